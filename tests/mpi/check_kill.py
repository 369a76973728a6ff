#!/usr/bin/env python3
"""check_kill.py - a rank SIGKILLs itself mid-run (tests/mpi/test_kill.c); nobody may hang.

  check_kill.py MPIRUN TEST_KILL recovery   # mpirun --enable-recovery keeps the survivors:
                                            # each must fail with HVD_ERR_RANK_FAILED naming
                                            # the dead rank within BOUND_S of its last step
  check_kill.py MPIRUN TEST_KILL default    # mpirun's default: it tears the job down; the
                                            # job must end with a non-zero status, in time
  check_kill.py MPIRUN TEST_KILL recovery --fault SITE
                                            # the victim runs with HVDC_TEST_FAULTS=SITE (base/
                                            # fault.h), which kills it at that point instead
  check_kill.py ... --np N                  # N ranks (default 3); the last is the victim
  check_kill.py ... --unreaped S            # the victim runs under unreaped.py, which leaves
                                            # it a zombie for S s after it dies (as a busy
                                            # launcher does): the survivors' bound still holds
  check_kill.py ... -- ARGS...              # ARGS go to TEST_KILL too
An unknown option, one without its value, or --fault with --unreaped is refused (exit 2): a
misspelt one would otherwise run, and pass, as another test.
In recovery mode a survivor's "wrong all-reduce result" or "FAIL" line fails the check too;
in both a sanitizer's report (the job's exit status cannot tell: a rank was killed).
"""
import os
import re
import subprocess
import sys
import time

BOUND_S = 5.0
argv, extra = sys.argv, []
if "--" in argv:
    argv, extra = argv[:argv.index("--")], argv[argv.index("--") + 1:]
mpirun, test_kill, mode = argv[1:4]
options = dict(zip(argv[4::2], argv[5::2]))
unknown = set(options) - {"--fault", "--np", "--unreaped"}
if len(argv[4:]) % 2 or unknown or {"--fault", "--unreaped"} <= set(options):
    print(f"check_kill.py: options {argv[4:]}: expected pairs of --fault SITE, --np N, "
          "--unreaped S (not --fault with --unreaped)")
    sys.exit(2)
fault = options.get("--fault")
np = int(options.get("--np", 3))
unreaped = options.get("--unreaped")
cmd = [mpirun, "--oversubscribe", "--bind-to", "none"]
if mode == "recovery":
    cmd.append("--enable-recovery")
args = [test_kill, "--after-s", "1.5", "--max-s", "30"] + extra
if fault:  # MPMD: the victim alone gets the switch
    victim = ["-x", "HVDC_TEST_FAULTS=" + fault] + args
    cmd += ["-np", str(np - 1)] + args + [":", "-np", "1"] + victim
elif unreaped:  # MPMD: the victim alone runs under the wrapper
    here = os.path.dirname(os.path.abspath(__file__))
    victim = [sys.executable, os.path.join(here, "unreaped.py"), unreaped] + args
    cmd += ["-np", str(np - 1)] + args + [":", "-np", "1"] + victim
else:
    cmd += ["-np", str(np)] + args
start = time.time()
try:
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
except subprocess.TimeoutExpired as e:
    print(e.stdout or "")
    print("FAIL: the job hung (no end within 60 s)")
    sys.exit(1)
elapsed = time.time() - start
print(run.stdout)
failures = []
if mode == "recovery":
    for rank in range(np - 1):
        m = re.search(rf'KILLTEST rank={rank} .*failed step=\d+ status="([^"]*)" after_s=([\d.]+) message="([^"]*)"', run.stdout)
        if not m:
            failures.append(f"rank {rank} reported no libhvdc error")
            continue
        if "a rank died" not in m.group(1):
            failures.append(f"rank {rank}: status '{m.group(1)}' is not HVD_ERR_RANK_FAILED")
        if f"rank {np - 1}" not in m.group(3):
            failures.append(f"rank {rank}: message does not name rank {np - 1}: {m.group(3)}")
        if float(m.group(2)) > BOUND_S:
            failures.append(f"rank {rank} took {m.group(2)} s to notice (bound {BOUND_S} s)")
        print(f"rank {rank} noticed in {m.group(2)} s: {m.group(3)}")
        # the victim died before entering the call the others were inside: only the watchdog
        # can have noticed, and the background thread stays there (runtime/watchdog.h)
        if fault == "die_in_mpi_allreduce" and not re.search(
                rf"warning rank {rank}\] the background thread is still inside MPI_Allreduce", run.stdout):
            failures.append(f"rank {rank}: no sign of its background thread inside MPI_Allreduce")
    # a survivor's own verdict: a wrong result, or a check of the test's that failed
    if re.search(r"wrong all-reduce result|^FAIL$", run.stdout, re.M):
        failures.append("a survivor saw a wrong result or failed a check (its lines above)")
else:
    if run.returncode == 0:
        failures.append("the job exited 0 although a rank was killed")
    print(f"job ended with status {run.returncode} after {elapsed:.1f} s")
# under tests/sanitizers.sh: the job's status is the dead rank's, so read the reports
if re.search(r"ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:", run.stdout):
    failures.append("a sanitizer reported an error (its report above)")
for f in failures:
    print("FAIL:", f)
print("PASS" if not failures else "FAIL")
sys.exit(1 if failures else 0)
