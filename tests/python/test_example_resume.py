"""examples/pytorch/train_fashion_mnist.py's checkpoints and elastic commits: 3 epochs in one
run, and a run stopped after 2 epochs (--stop-after 2) then continued with --resume (or started
again with --elastic), end with the same model, bit for bit (the sampler's order depends only on the
seed and the epoch; rank 0's checkpoint carries the model, the optimizer's momentum and the
epoch). A 1024-image subset at np = 2 keeps it short. Run without a launcher: it starts the jobs
with $HVDCRUN (meson sets it to build/hvdcrun), else the hvdcrun on PATH."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

import hvdc.torch as hvd

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "pytorch", "train_fashion_mnist.py")


def train(checkpoint, *extra, env=None):
    launcher = os.environ.get("HVDCRUN") or shutil.which("hvdcrun")
    if not launcher:
        pytest.skip("no launcher: set HVDCRUN=build/hvdcrun (meson test does)")
    cmd = [launcher, "-np", "2", sys.executable, EXAMPLE,
           "--epochs", "3", "--train-limit", "1024", "--checkpoint", checkpoint, *extra]
    # env: Python's copy of the environment from before hvd.init(); MPI's singleton start-up
    # added variables to the process's own environment that would confuse a nested launch
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=150, env=dict(os.environ, **(env or {})))
    assert run.returncode == 0, run.stdout[-3000:]
    return run.stdout


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The 3-epoch run both tests compare with, trained once: its checkpoint's contents."""
    assert hvd.size() == 1, "run this file without a launcher: it starts its own jobs"
    if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        pytest.skip("dataset-fashion-mnist is not installed (scripts/setup.sh installs it)")
    whole = str(tmp_path_factory.mktemp("uninterrupted") / "whole.pt")
    train(whole)
    return torch.load(whole)


def test_resume_equals_uninterrupted(uninterrupted):
    with tempfile.TemporaryDirectory() as d:
        part = os.path.join(d, "part.pt")
        assert "stopped after epoch 2" in train(part, "--stop-after", "2")
        out = train(part, "--resume")
        assert "resuming after epoch 2" in out and "\n    3 " in out and "\n    1 " not in out, out
        a, b = uninterrupted, torch.load(part)
        assert a["epoch"] == b["epoch"] == 3
        for k in a["model"]:
            assert torch.equal(a["model"][k], b["model"][k]), f"{k} differs after resuming"


def test_elastic_restart_equals_uninterrupted(uninterrupted):
    """--elastic: a run stopped after 2 epochs and started again (as hvdcrun --elastic restarts
    one) continues from its last commit and ends with the uninterrupted run's model."""
    with tempfile.TemporaryDirectory() as d:
        part = os.path.join(d, "part.pt")
        commits = {"HVD_ELASTIC_DIR": os.path.join(d, "commits")}
        os.mkdir(commits["HVD_ELASTIC_DIR"])
        assert "stopped after epoch 2" in train(part, "--elastic", "--stop-after", "2", env=commits)
        out = train(part, "--elastic", env=commits)
        assert "resuming after epoch 2" in out and "\n    3 " in out and "\n    1 " not in out, out
        a, b = uninterrupted, torch.load(part)
        for k in a["model"]:
            assert torch.equal(a["model"][k], b["model"][k]), f"{k} differs after the restart"


def test_device_cuda_refused_or_trains():
    """--device cuda: where torch sees no GPU for a rank, every rank stops with exit status 2
    and the reason (none hangs); where it does, a short run trains on the GPUs (with --amp)."""
    launcher = os.environ.get("HVDCRUN") or shutil.which("hvdcrun")
    if not launcher:
        pytest.skip("no launcher: set HVDCRUN=build/hvdcrun (meson test does)")
    if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        pytest.skip("dataset-fashion-mnist is not installed (scripts/setup.sh installs it)")
    cmd = [launcher, "-np", "2", sys.executable, EXAMPLE, "--epochs", "1", "--train-limit",
           "512", "--device", "cuda", "--amp"]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=150, env=dict(os.environ))
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        assert run.returncode == 0 and "ranks on cuda with amp" in run.stdout, run.stdout[-3000:]
    else:
        assert run.returncode != 0, run.stdout[-3000:]
        assert "--device cuda on rank" in run.stdout and ("no CUDA device" in run.stdout or
                                                         "no GPU" in run.stdout), run.stdout[-3000:]
