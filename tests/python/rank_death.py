"""rank_death.py - run by test_rank_death.py under `mpirun --enable-recovery -np 3`: rank 2
exits abruptly mid-run; ranks 0 and 1 must get hvd.HorovodInternalError naming rank 2, within
seconds, from the collective they are in, and report it on a KILLTEST line."""
import os
import time

import torch

import hvdc.torch as hvd

hvd.init()
rank = hvd.rank()
start = time.time()
step = 0
try:
    while time.time() - start < 30:
        if rank == 2 and time.time() - start > 1.5:
            os._exit(3)  # no shutdown, no goodbye: as a crash
        hvd.allreduce(torch.ones(1000), name=f"step.{step}")
        step += 1
    print(f"KILLTEST rank={rank} no error in 30 s", flush=True)
except hvd.HorovodInternalError as e:
    print(f"KILLTEST rank={rank} HorovodInternalError after_s={time.time() - start - 1.5:.2f} "
          f"message=\"{e}\"", flush=True)
os._exit(0)  # MPI cannot be finalized with a dead rank; libhvdc's shutdown would say so
