#!/usr/bin/env python3
"""check_timeline.py - runs timeline_workload under mpirun with HVD_TIMELINE and checks the file.

  check_timeline.py MPIRUN WORKLOAD complete   # 3 steps: every tensor shows its phases
  check_timeline.py MPIRUN WORKLOAD sigterm    # killed mid-run: the file still parses
  check_timeline.py MPIRUN WORKLOAD names      # names with quotes, controls, non-UTF-8 bytes
  check_timeline.py MPIRUN WORKLOAD startstop  # hvd_start/stop_timeline at run time, twice
  check_timeline.py MPIRUN WORKLOAD dynamic    # the same with HOROVOD_TIMELINE=DYNAMIC: no file
                                               # named DYNAMIC, nothing recorded before the start

The file must load with a JSON parser; a known run must show, per tensor, QUEUED, NEGOTIATE
and ALLREDUCE; the small tensors must be packed (PACK/UNPACK) and share a fusion group; the
large ones must be reduced in place (ALLREDUCE without PACK).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

mpirun, workload, mode = sys.argv[1:4]
workload = os.path.abspath(workload)  # "dynamic" runs it from an empty directory
fd, path = tempfile.mkstemp(suffix=".json")
os.close(fd)
env = dict(os.environ, HVD_TIMELINE=path, HVD_TIMELINE_MARK_CYCLES="1")
cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2", workload]
failures = []

if mode in ("startstop", "dynamic"):
    # no HVD_TIMELINE (or Horovod's DYNAMIC): the workload starts file A before step 1, stops
    # it after, starts B before step 3; each file holds exactly its steps' tensors and is valid
    # JSON
    env.pop("HVD_TIMELINE")
    env.pop("HVD_TIMELINE_MARK_CYCLES")
    if mode == "dynamic":
        env["HOROVOD_TIMELINE"] = "DYNAMIC"
    files = [path + ".a", path + ".b"]
    workdir = tempfile.mkdtemp()
    run = subprocess.run(cmd + ["startstop"] + files, env=env, timeout=60, cwd=workdir)
    if run.returncode != 0:
        failures.append(f"workload exited {run.returncode}")
    left = os.listdir(workdir)
    if left:
        failures.append(f"files written in the working directory: {left}")
    for f in left:
        os.unlink(os.path.join(workdir, f))
    os.rmdir(workdir)
    for f, step, marks in [(files[0], 1, True), (files[1], 3, False)]:
        try:
            with open(f) as fh:
                events = json.load(fh)
        except (OSError, ValueError) as e:
            failures.append(f"{f}: not valid JSON: {e}")
            continue
        names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        steps = {n.split(".")[0] for n in names}
        print(f"{f}: {len(events)} events, rows of steps {sorted(steps)}")
        if steps != {f"s{step}"}:
            failures.append(f"{f}: rows of steps {sorted(steps)}, expected only s{step}")
        if marks != any(e.get("ph") == "i" for e in events):
            failures.append(f"{f}: round markers {'missing' if marks else 'present'} "
                            f"with mark_cycles={int(marks)}")
        if not any(e.get("ph") == "X" and e["name"] == "ALLREDUCE" for e in events):
            failures.append(f"{f}: no ALLREDUCE phase")
        os.unlink(f)
elif mode in ("complete", "names"):
    run = subprocess.run(cmd + ["3" if mode == "complete" else "names"], env=env, timeout=60)
    if run.returncode != 0:
        failures.append(f"workload exited {run.returncode}")
else:
    proc = subprocess.Popen(cmd + ["0"], env=env, start_new_session=True)
    # SIGTERM once the job is past MPI start-up and has written events (slow when loaded)
    deadline = time.time() + 30
    while time.time() < deadline and os.path.getsize(path) < 4096:
        time.sleep(0.2)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        failures.append("workload did not stop within 30 s of SIGTERM")

if mode not in ("startstop", "dynamic"):
    try:
        with open(path) as f:
            events = json.load(f)
        print(f"timeline {mode}: {len(events)} events, valid JSON")
    except (OSError, ValueError) as e:
        events = []
        failures.append(f"timeline is not valid JSON: {e}")
else:
    events = []

rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
phases = {}
for e in events:
    if e.get("ph") == "X":
        phases.setdefault(rows.get(e["tid"], "?"), []).append(e)
if mode == "complete":
    for name in ["small.0", "small.19", "large.20", "large.21"]:
        got = {e["name"] for e in phases.get(name, [])}
        for want in ["QUEUED", "NEGOTIATE", "ALLREDUCE"]:
            if want not in got:
                failures.append(f"{name}: no {want} phase (has {sorted(got)})")
        # QUEUED runs from submission to the announcement, on the timeline's clock: it starts
        # after the timeline did and ends before the tensor's negotiation starts
        for q in (e for e in phases.get(name, []) if e["name"] == "QUEUED"):
            later = [e["ts"] for e in phases.get(name, []) if e["name"] == "NEGOTIATE" and e["ts"] >= q["ts"]]
            if q["ts"] < 0 or q["dur"] < 0 or not later or q["ts"] + q["dur"] > min(later) + 1:
                failures.append(f"{name}: QUEUED at {q['ts']} for {q['dur']} us, not before its "
                                f"negotiation ({min(later) if later else 'none after it'})")
    small_packed = [e for e in phases.get("small.5", []) if e["name"] == "PACK"]
    if len(small_packed) != 3:
        failures.append(f"small.5 packed {len(small_packed)} times in 3 steps, expected 3")
    if any(e["name"] == "PACK" for e in phases.get("large.20", [])):
        failures.append("large.20 was packed; large tensors are reduced in place")
    groups = {}
    for name in [f"small.{i}" for i in range(20)]:
        for e in phases.get(name, []):
            if e["name"] == "ALLREDUCE":
                groups.setdefault(e["args"]["group"], set()).add(name)
    if not any(len(g) > 1 for g in groups.values()):
        failures.append("no fusion group holds more than one small tensor")
    if not any(e.get("ph") == "i" for e in events):
        failures.append("HVD_TIMELINE_MARK_CYCLES=1 but no round markers")
elif mode == "names":
    # valid UTF-8 comes back as written; every other byte b as the character U+00b
    odd = [b'quote"in.name', b"back\\slash", b"tab\tand\nnewline\x01", b"latin1 \xe9t\xe9",
           b"stray \x80\xff bytes", b"utf8 gr\xc3\xbc\xc3\x9fe \xe2\x82\xac", b"truncated \xe2\x82"]
    def expected(raw):
        out, i = "", 0
        while i < len(raw):
            for n in (4, 3, 2, 1):
                try:
                    ch = raw[i:i + n].decode("utf-8")
                    if len(ch) == 1:
                        out, i = out + ch, i + n
                        break
                except UnicodeDecodeError:
                    pass
            else:
                out, i = out + chr(raw[i]), i + 1
        return out
    for raw in odd:
        if expected(raw) not in rows.values():
            failures.append(f"no timeline row named {expected(raw)!r} (rows: {sorted(rows.values())})")
elif mode == "sigterm" and not any(e.get("ph") == "X" for e in events):
    failures.append("no phase events were written before SIGTERM")

os.unlink(path)
for f in failures:
    print("FAIL:", f)
print("PASS" if not failures else "FAIL")
sys.exit(1 if failures else 0)
