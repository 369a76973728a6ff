#!/usr/bin/python3
"""allreduce.py - one rank of a job that Slurm started (through hvdcrun and mpirun, or srun
directly): hvdc.torch all-reduces integer-valued tensors whose exact sum is known in any order
(np >= 3 shows a reduction-order bug that np 2 hides), checks it, and prints one line:

    ALLREDUCE rank R of N on HOST local L: ok, sum of 1000 elements exact

Usage: allreduce.py EXPECTED_SIZE   (exit status 1 on a wrong size or sum)
Used by tests/slurm/slurm_two_hosts.sh.
"""
import os
import socket
import sys

import torch
import hvdc.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
x = torch.arange(1000, dtype=torch.float64) * (rank + 1) + rank
got = hvd.allreduce(x, op=hvd.Sum)
want = torch.arange(1000, dtype=torch.float64) * (size * (size + 1) // 2) + size * (size - 1) // 2
ok = size == int(sys.argv[1]) and torch.equal(got, want)
# One write(2): mpirun runs together the lines that ranks print in pieces.
line = "ALLREDUCE rank %d of %d on %s local %d: %s\n" % (
    rank, size, socket.gethostname(), hvd.local_rank(),
    "ok, sum of 1000 elements exact" if ok else "WRONG (size %d, sum %s)" % (size, got[:4]))
os.write(1, line.encode())
hvd.shutdown()
sys.exit(0 if ok else 1)
