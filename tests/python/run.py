#!/usr/bin/env python3
"""run.py - runs one test of the Python bindings for meson: a pytest file under hvdcrun
(build/hvdcrun), or a script. Each run is bounded (a hang fails loudly) and skips, saying why,
when the interpreter cannot import what the bindings need.

  run.py PYTHON HVDCRUN NP pytest FILE     NP ranks each run `PYTHON -m pytest FILE`
  run.py PYTHON HVDCRUN NP script FILE ... NP ranks run FILE with the arguments after it
  run.py PYTHON HVDCRUN NP migrate FILE    FILE is a Horovod script (`import horovod.torch as
                                           hvd`): run a copy where only that line differs
  run.py - - 0 skip REASON                 prints the reason and exits 77 (skipped)
Environment: HVDC_TEST_TIMEOUT (seconds, default 240) bounds the whole run.
"""
import os
import signal
import subprocess
import sys
import tempfile

SKIP = 77
# prints what the interpreter lacks, if anything
FIND_NEEDS = """
import importlib.util
missing = []
for name in ("torch", "numpy", "pytest", "hvdc.torch"):
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:
        found = False
    if not found:
        missing.append(name)
if missing:
    print("missing: " + ", ".join(missing))
"""


def main():
    python, launcher, np_, mode, target, *rest = sys.argv[1:]
    if mode == "skip":
        print("SKIP:", target)
        return SKIP
    # Found, not imported: importing torch here cost ~3 s per test, before every run that
    # imports it again. A package that is found but broken fails the run itself, loudly.
    probe = subprocess.run([python, "-c", FIND_NEEDS], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0 or probe.stdout.strip():
        last = (probe.stdout.strip().splitlines() or ["?"])[-1]
        print(f"SKIP: {python} cannot import the bindings' needs (torch, numpy, pytest, "
              f"hvdc.torch): {last}")
        return SKIP
    cleanup = None
    if mode == "pytest":
        cmd = [python, "-m", "pytest", "-q", "--color=no", "-p", "no:cacheprovider", "-rs", target] + rest
    elif mode == "script":
        cmd = [python, target] + rest
    elif mode == "migrate":
        cleanup = tempfile.mkdtemp(prefix="hvdc-migrate-")
        copy = os.path.join(cleanup, os.path.basename(target))
        original = open(target).read().splitlines(keepends=True)
        migrated = [line.replace("import horovod.torch as hvd", "import hvdc.torch as hvd")
                    for line in original]
        changed = [i + 1 for i, (a, b) in enumerate(zip(original, migrated)) if a != b]
        if len(changed) != 1:
            print(f"FAIL: {target} must contain `import horovod.torch as hvd` exactly once "
                  f"(lines changed: {changed})")
            return 1
        print(f"# {target}: line {changed[0]} becomes `import hvdc.torch as hvd`; nothing else")
        open(copy, "w").write("".join(migrated))
        cmd = [python, copy] + rest
    else:
        print(f"run.py: unknown mode {mode!r}")
        return 2
    if int(np_) > 0:
        # hvdcrun allows root, oversubscribes, leaves ranks unbound and makes them yield
        cmd = [launcher, "-np", np_] + cmd
    timeout = float(os.environ.get("HVDC_TEST_TIMEOUT", "240"))
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"FAIL: no result within {timeout:.0f} s (a hang?): {' '.join(cmd)}")
        code = 1
    if cleanup:
        subprocess.run(["rm", "-rf", cleanup])
    return code


if __name__ == "__main__":
    sys.exit(main())
