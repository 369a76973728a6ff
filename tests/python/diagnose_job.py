"""The jobs test_diagnose.py runs at np 3, one per mode:
  stuck  rank 2 spins in spin_in_user_code() and never submits again: rank 0's stall verdict
         must name rank 2, its host, and that function's file and line
  usr1   rank 1 sends itself SIGUSR1 inside look_at_me(): its dump must show that function
  slow   60 steps; rank 2 submits each step's 20 gradients 40 ms late: rank 0's HVD_REPORT
         must name it (a step count, not a time on each rank's own clock, so that no rank stops
         a step before the others and shuts down under them);
         rank 0 prints hvd.report() as one JSON line, "REPORT {...}"
  busy   rank 2 computes for 6 s in Python, holding the GIL, longer than HVD_HOST_TIMEOUT: it
         is not lost (libhvdc's own thread sends its heartbeats), and the job finishes
"""
import json
import os
import signal
import sys
import time

import torch

import hvdc.torch as hvd


def spin_in_user_code():
    x = 0
    while True:
        x += 1


def look_at_me():
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(1.0)  # the dump is printed by libhvdc's thread meanwhile


def compute_for(seconds):
    x, until = 0, time.monotonic() + seconds
    while time.monotonic() < until:
        x += 1


def step(grads, late):
    if late:
        time.sleep(0.04)
    handles = [hvd.allreduce_async_(g, name="grad.%d" % k) for k, g in enumerate(grads)]
    for h in handles:
        hvd.synchronize(h)


def main(mode):
    hvd.init()
    grads = [torch.ones(256) for _ in range(20)]
    if mode == "stuck":
        for _ in range(3):
            step(grads, False)
        if hvd.rank() == 2:
            spin_in_user_code()
        step(grads, False)  # fails with HVD_STALL_SHUTDOWN_TIME, naming rank 2
    elif mode == "usr1":
        step(grads, False)
        if hvd.rank() == 1:
            look_at_me()
        step(grads, False)
    elif mode == "busy":
        step(grads, False)
        if hvd.rank() == 2:
            compute_for(6.0)
        step(grads, False)
        print("BUSY rank %d done" % hvd.rank(), flush=True)
    elif mode == "slow":
        for _ in range(60):  # ~2.5 s at 40 ms a step: HVD_REPORT=1 ends two periods
            step(grads, hvd.rank() == 2)
        if hvd.rank() == 0:
            print("REPORT " + json.dumps(hvd.report()), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
