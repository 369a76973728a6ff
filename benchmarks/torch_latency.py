#!/usr/bin/env python3
"""torch_latency.py - what hvdc.torch adds to a small all-reduce: a blocking 4-byte
hvd.allreduce from Python against the C call it makes, side by side in one run.

    build/hvdcrun -np 2 /usr/bin/python3 benchmarks/torch_latency.py [-n 2000]
    build/hvdcrun -np 2 build/benchmarks/latency_bench -n 2000   # the pure C figure

Rows (every one a blocking all-reduce of one float32, i.e. 4 bytes):
  c-call      libhvdc's hvd_allreduce called through ctypes (the floor from Python: the C call
              plus the foreign-function call itself, ~0.2 us)
  allreduce   hvd.allreduce(t) (a new output tensor, the handle table, the result tensor)
  allreduce_  hvd.allreduce_(t) (in place)
  named       hvd.allreduce(t, name=...) (no automatic name)
Iterations alternate between the rows; each starts after hvd.barrier(); an iteration's time is
the slowest rank's. Columns: median, p90, p99 (us), and each row's median minus c-call's.
latency_bench's "single hvd" row is the same call from a C program (no Python at all). Every
result is checked; a wrong one makes the exit status 1.
"""
import argparse
import ctypes
import os
import sys
import time

import torch

import hvdc.torch as hvd
from hvdc.common import library as L


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=2000, help="timed iterations per row")
    p.add_argument("-w", type=int, default=200, help="warm-up iterations per row")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    rank, size = hvd.rank(), hvd.size()
    x = torch.tensor([float(rank + 1)])
    want = float(size * (size + 1) // 2)
    c_buf = (ctypes.c_float * 1)(rank + 1.0)
    c_out = (ctypes.c_float * 1)()
    L.lib.hvd_allreduce.restype = ctypes.c_int
    L.lib.hvd_allreduce.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    c_in, c_res = ctypes.addressof(c_buf), ctypes.addressof(c_out)
    wrong = 0

    def c_call(i):
        st = L.lib.hvd_allreduce(b"lat.c", c_in, c_res, 1, L.FLOAT32, L.SUM)
        return st == 0 and c_out[0] == want

    def allreduce(i):
        return hvd.allreduce(x, op=hvd.Sum).item() == want

    y = torch.empty(1)

    def allreduce_(i):
        y.fill_(rank + 1.0)
        return hvd.allreduce_(y, op=hvd.Sum).item() == want

    def named(i):
        return hvd.allreduce(x, op=hvd.Sum, name="lat.named").item() == want

    rows = [("c-call", c_call), ("allreduce", allreduce), ("allreduce_", allreduce_),
            ("named", named)]
    times = {name: [] for name, _ in rows}
    for it in range(args.w + args.n):
        for name, fn in rows:
            hvd.barrier()
            t0 = time.perf_counter()
            ok = fn(it)
            t1 = time.perf_counter()
            wrong += not ok
            if it >= args.w:
                times[name].append(t1 - t0)
    # the slowest rank per iteration
    slowest = {}
    for name, _ in rows:
        t = hvd.allreduce(torch.tensor(times[name], dtype=torch.float64), op=hvd.Max,
                          name=f"lat.gather.{name}")
        slowest[name] = [v * 1e6 for v in t.tolist()]
    wrong = int(hvd.allreduce(torch.tensor([wrong]), op=hvd.Sum, name="lat.wrong").item())
    if rank == 0:
        base = percentile(slowest["c-call"], 0.5)
        print(f"# torch_latency, hvdc.torch over {L.path}, {size} ranks, host {os.uname().nodename} "
              f"({os.cpu_count()} cores), torch {torch.__version__}, "
              f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
        print(f"# {args.n} iterations per row (+{args.w} warm-up), rows alternating; blocking "
              "all-reduce of one float32 (4 bytes); time: slowest rank, after hvd.barrier()")
        print(f"{'row':>12} {'median':>8} {'p90':>8} {'p99':>8} {'-c-call':>8}")
        print(f"{'':>12} {'(us)':>8} {'(us)':>8} {'(us)':>8} {'(us)':>8}")
        for name, _ in rows:
            s = slowest[name]
            med = percentile(s, 0.5)
            print(f"{name:>12} {med:8.2f} {percentile(s, 0.9):8.2f} {percentile(s, 0.99):8.2f} "
                  f"{med - base:8.2f}")
        print(f"# wrong results: {wrong}", flush=True)
    hvd.shutdown()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
