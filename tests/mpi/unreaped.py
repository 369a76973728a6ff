#!/usr/bin/env python3
"""unreaped.py - runs a command as its child and reaps it only S seconds after it ends.

  unreaped.py S COMMAND ARGS...

Meanwhile the ended child is a zombie: its pid still answers kill(pid, 0), as a killed rank's
did for 6 s under load (TSan, 2 cores) before mpirun reaped it. check_kill.py --unreaped runs
the victim rank so, to test that its node's survivors still see the death at once. Exits with
the child's status.
"""
import os
import sys
import time

hold_s = float(sys.argv[1])
child = os.fork()
if child == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
os.waitid(os.P_PID, child, os.WEXITED | os.WNOWAIT)  # the child's end, seen without reaping it
time.sleep(hold_s)
_, status = os.waitpid(child, 0)
sys.exit(os.waitstatus_to_exitcode(status) % 256)
