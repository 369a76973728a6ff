"""What libhvdc says about a slow or stuck rank, run as a user would (np = 3 jobs of
diagnose_job.py, started with $HVDCRUN): the stall verdict names the stuck rank, its host and
the Python function it is stuck in; SIGUSR1 shows a rank's Python stacks; HVD_REPORT and
hvd.report() name the slow rank and its host. Run without a launcher: it starts its own jobs."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "diagnose_job.py")
HOST = socket.gethostname()


def run_job(mode, **settings):
    launcher = os.environ.get("HVDCRUN") or shutil.which("hvdcrun")
    if not launcher:
        pytest.skip("no launcher: set HVDCRUN=build/hvdcrun (meson test does)")
    env = dict(os.environ, **settings)
    # a session of its own: a job that outlives its bound is killed whole, mpirun and ranks
    job = subprocess.Popen([launcher, "-np", "3", sys.executable, JOB, mode], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        out, _ = job.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        out, _ = job.communicate()
        pytest.fail("the job ran past 90 s:\n" + out[-3000:])
    return subprocess.CompletedProcess(job.args, job.returncode, out)


def test_stall_verdict_names_rank_host_and_python_function():
    run = run_job("stuck", HVD_STALL_CHECK_TIME="2", HVD_STALL_SHUTDOWN_TIME="6")
    out = run.stdout
    assert run.returncode != 0, "the stalled job must fail:\n" + out[-3000:]
    verdict = out[out.find("stall: for"):]
    assert "stall: for" in out, "no stall verdict:\n" + out[-3000:]
    assert f"rank 2 (host '{HOST}'" in verdict, "the verdict names rank 2 and its host:\n" + verdict
    assert "'grad." in verdict, "the verdict names a tensor rank 2 holds up:\n" + verdict
    assert "spin_in_user_code" in verdict and 'diagnose_job.py", line' in verdict, \
        "the verdict shows where rank 2's Python thread is:\n" + verdict
    assert "last submitted 'grad." in verdict, "and what it submitted last:\n" + verdict


def test_sigusr1_dump_shows_python_stacks():
    run = run_job("usr1")
    out = run.stdout
    assert run.returncode == 0, out[-3000:]
    dump = [line for line in out.splitlines() if line.startswith("[hvdc rank 1]")]
    text = "\n".join(dump)
    assert "state dump (SIGUSR1)" in text, "rank 1 printed no dump:\n" + out[-3000:]
    assert "look_at_me" in text and "last submitted 'grad." in text, \
        "the dump shows rank 1's Python stack and last submission:\n" + text


def test_long_compute_step_is_not_a_lost_host():
    run = run_job("busy", HVD_HOST_TIMEOUT="2")
    out = run.stdout
    assert run.returncode == 0 and "lost" not in out and "stopped answering" not in out, \
        "a rank computing 6 s (HVD_HOST_TIMEOUT=2) was taken for lost:\n" + out[-3000:]
    assert out.count("BUSY rank") == 3, out[-3000:]


def test_report_names_slow_rank_and_host():
    run = run_job("slow", HVD_REPORT="1")
    out = run.stdout
    assert run.returncode == 0, out[-3000:]
    assert f"arrived last most often: rank 2 (host '{HOST}')" in out, \
        "the printed report names rank 2:\n" + out[-3000:]
    line = next(l for l in out.splitlines() if l.startswith("REPORT "))
    figures, _ = json.JSONDecoder().raw_decode(line[len("REPORT "):])  # stderr may follow it
    assert figures["last_rank"] == 2 and figures["last_host"] == HOST, figures
    assert 20 < figures["last_lateness_ms"] < 120, figures
    assert figures["steps_per_s"] > 0 and figures["tensors"] >= figures["ops"] > 0, figures
