#!/usr/bin/env python3
"""check_dump.py - SIGUSR1 makes every rank print its state: rank 0 names the operation it has
announced and the coordinator names the rank it waits for.

  check_dump.py MPIRUN WORKLOAD
"""
import subprocess
import sys
import time

mpirun, workload = sys.argv[1:3]
cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2", workload]
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
time.sleep(2.5)
subprocess.run(["pkill", "-USR1", "-f", "^" + workload], check=False)
try:
    out, _ = proc.communicate(timeout=40)
except subprocess.TimeoutExpired:
    proc.kill()
    out, _ = proc.communicate()
    print(out)
    print("FAIL: workload hung")
    sys.exit(1)
print(out)
want = [
    "[hvdc rank 0] state dump (SIGUSR1)",
    "[hvdc rank 1] state dump (SIGUSR1)",
    "announced to rank 0, not yet executed: dump.withheld(allreduce float32",
    "allreduce 'dump.withheld' has waited",
    "missing on ranks 1",
    "rank 0: dump.withheld ended with libhvdc was shut down",
]
failures = [w for w in want if w not in out]
for w in failures:
    print("FAIL: output lacks:", w)
print("PASS" if not failures and proc.returncode == 0 else f"FAIL (exit {proc.returncode})")
sys.exit(0 if not failures and proc.returncode == 0 else 1)
