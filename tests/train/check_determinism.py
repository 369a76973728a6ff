#!/usr/bin/env python3
"""check_determinism.py - examples/train ends with the same parameters, bit for bit (issue 11):

  1. whatever the fusion threshold: HVD_FUSION_THRESHOLD unset (the default, run twice), 0, 1K,
     64K and 128M, each run stopped after STEPS steps (--stop-after), give one parameter hash;
  2. after a crash: a full one-epoch run, and the same run with a rank killed by SIGKILL right
     after a mid-epoch checkpoint (--checkpoint-every), then continued with --resume, give one hash.

  check_determinism.py MPIRUN TRAIN NP SCRATCH_DIR

Meant for NP >= 3: at NP = 2 a + b = b + a, and order bugs cannot show. Exits 77 (skipped), saying
why, when the Fashion-MNIST files are not installed. Every mpirun runs under a timeout.
"""
import os
import re
import signal
import subprocess
import sys
import time

DATA = "/usr/share/datasets/fashion-mnist"
FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
STEPS = 150           # per threshold run
CHECKPOINT_EVERY = 50  # the crash run: killed right after the first checkpoint (step 50 of 500)
TIMEOUT_S = 120
HASH = re.compile(r"parameters identical on all ranks: yes; hash ([0-9a-f]+)")

mpirun, train, np, scratch = sys.argv[1:5]
missing = [f for f in FILES if not os.path.isfile(os.path.join(DATA, f))]
if missing:
    print(f"SKIP: Fashion-MNIST is not installed ({DATA}/{missing[0]} is missing; "
          "Debian: apt-get install dataset-fashion-mnist)")
    sys.exit(77)

ckpt = os.path.join(scratch, f"check_determinism.{os.getpid()}.ckpt")
# global batch 120: divisible by 3 and by 4; 500 steps per epoch
base = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", np, train,
        "--epochs", "1", "--batch", "120", "--seed", "3"]
failures = []


def command(extra, threshold):
    env = dict(os.environ)
    env.pop("HVD_FUSION_THRESHOLD", None)
    env.pop("HOROVOD_FUSION_THRESHOLD", None)
    cmd = list(base)
    if threshold is not None:
        env["HVD_FUSION_THRESHOLD"] = threshold
        cmd[1:1] = ["-x", "HVD_FUSION_THRESHOLD"]  # also to ranks started on other hosts
    return cmd + extra, env


def run(what, extra, threshold=None):
    """Runs to the end; returns the parameter hash, or None (a failure is recorded)."""
    cmd, env = command(extra, threshold)
    start = time.time()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        print(e.stdout or "")
        failures.append(f"{what}: no end within {TIMEOUT_S} s")
        return None
    m = HASH.search(p.stdout)
    resumed = re.search(r"# resumed from .*", p.stdout)
    if resumed:
        print(f"{what}: {resumed.group(0)[2:]}")
    print(f"{what}: hash {m.group(1) if m else 'none'} (exit {p.returncode}, {time.time() - start:.1f} s)")
    if p.returncode != 0 or not m:
        print(p.stdout)
        failures.append(f"{what}: exit status {p.returncode}, hash {'found' if m else 'missing'}")
        return None
    return m.group(1)


def rank_pid(parent, rank):
    """The pid of the process started by `parent` (mpirun) that is MPI rank `rank`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"OMPI_COMM_WORLD_RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(entry)
        except (OSError, ValueError, IndexError):
            continue
    return None


def run_killed(what, extra, rank):
    """Starts a run and SIGKILLs `rank` as soon as rank 0 reports the first checkpoint saved.
    Returns the position that checkpoint resumes at, or None (a failure is recorded)."""
    cmd, env = command(extra, None)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, position, deadline = [], None, time.time() + TIMEOUT_S
    for line in p.stdout:
        out.append(line)
        m = re.search(r"# checkpoint .* saved \(next: epoch (\d+), step (\d+)\)", line)
        if m:
            position = (int(m.group(1)), int(m.group(2)))
            pid = rank_pid(p.pid, rank)
            if pid is None:
                failures.append(f"{what}: found no process for rank {rank} under mpirun")
            else:
                os.kill(pid, signal.SIGKILL)
                print(f"{what}: checkpoint saved at epoch {position[0]} step {position[1]}; "
                      f"SIGKILL to rank {rank} (pid {pid})")
            break
        if time.time() > deadline:
            break
    try:
        rest, _ = p.communicate(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        p.kill()
        rest, _ = p.communicate()
        failures.append(f"{what}: the job did not end after the kill")
    out.append(rest or "")
    text = "".join(out)
    if position is None or p.returncode == 0 or HASH.search(text):
        print(text)
        failures.append(f"{what}: expected a run killed mid-epoch (checkpoint seen: {position}, "
                        f"exit status {p.returncode}, final hash {'printed' if HASH.search(text) else 'not printed'})")
        return None
    print(f"{what}: ended with exit status {p.returncode}, no final parameters, as a crash does")
    return position


try:
    # 1. fusion thresholds (and a repeated run)
    stopped = ["--stop-after", str(STEPS)]
    hashes = {}
    for label, threshold in [("default", None), ("default again", None), ("0", "0"),
                             ("1K", "1K"), ("64K", "64K"), ("128M", "128M")]:
        hashes[label] = run(f"np={np} HVD_FUSION_THRESHOLD={label}, {STEPS} steps", stopped, threshold)
    if len(set(hashes.values())) != 1 or None in hashes.values():
        failures.append(f"the thresholds' hashes differ: {hashes}")

    # 2. killed after a checkpoint, resumed == uninterrupted
    whole = run(f"np={np} one epoch, uninterrupted", [])
    if os.path.exists(ckpt):
        os.remove(ckpt)
    position = run_killed(f"np={np} one epoch, rank 1 killed", ["--checkpoint", ckpt,
                          "--checkpoint-every", str(CHECKPOINT_EVERY)], 1)
    if position is not None:
        resumed = run(f"np={np} resumed", ["--checkpoint", ckpt, "--resume"])
        if whole is None or resumed != whole:
            failures.append(f"uninterrupted {whole} != killed and resumed {resumed}")
finally:
    if os.path.exists(ckpt):
        os.remove(ckpt)

for f in failures:
    print("FAIL:", f)
print("PASS" if not failures else "FAIL")
sys.exit(1 if failures else 0)
