#!/usr/bin/env python3
"""torch_consistency.py - what hvd.check_consistency costs on a real model, and what
HVD_CHECK_CONSISTENCY costs the DistributedOptimizer's step when it is off.

    PYTHONPATH=bindings/python build/hvdcrun -np 2 /usr/bin/python3 benchmarks/torch_consistency.py

Rows (times are the slowest rank's; median, p90 in ms):
  read            one pass over the same tensors (a sum of each), the baseline of the same run
  check model     hvd.check_consistency(model): parameters and buffers
  check model+opt hvd.check_consistency(model, optimizer): also SGD's momentum buffers
  step            DistributedOptimizer.step() of a small model (HVD_CHECK_CONSISTENCY as set)
and the price of the test step() makes when the check is off (one attribute, timeit).
The model is torchvision's ResNet-50 (25.6M float parameters) on the host; --model small for a
quick run. Checked while timed: equal replicas report nothing, then the last rank changes one
weight and exactly that one is reported; a wrong result makes the exit status 1.
"""
import argparse
import sys
import time
import timeit

import torch

import hvdc.torch as hvd


def timed(fn, n, w, _calls=[0]):
    _calls[0] += 1  # the same on every rank: rows are timed in the same order everywhere
    for _ in range(w):
        fn()
    times = []
    for _ in range(n):
        hvd.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    slowest = hvd.allreduce(torch.tensor(times, dtype=torch.float64), op=hvd.Max,
                            name=f"times.{_calls[0]}")
    xs = sorted(slowest.tolist())
    return xs[len(xs) // 2] * 1e3, xs[min(len(xs) - 1, int(0.9 * len(xs)))] * 1e3


def make_model(name):
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        return torchvision.models.resnet50()
    return torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.BatchNorm1d(256),
                               torch.nn.Linear(256, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50", choices=["resnet50", "small"])
    p.add_argument("-n", type=int, default=10, help="timed checks per row")
    p.add_argument("-w", type=int, default=2, help="untimed checks first")
    p.add_argument("--steps", type=int, default=300, help="timed optimizer steps")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    rank, size = hvd.rank(), hvd.size()
    model = make_model(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for q in model.parameters():  # momentum buffers, equal on every rank
        q.grad = torch.ones_like(q)
    opt.step()
    wrong = 0
    tensors = list(model.parameters()) + list(model.buffers())
    rows = [("read", timed(lambda: [t.sum() for t in tensors], args.n, args.w))]
    rows.append(("check model", timed(lambda: hvd.check_consistency(model), args.n, args.w)))
    rows.append(("check model+opt", timed(lambda: hvd.check_consistency(model, opt), args.n,
                                          args.w)))
    wrong += len(hvd.check_consistency(model, opt)) != 0
    first = next(model.parameters())
    if rank == size - 1:
        with torch.no_grad():
            first.view(-1)[0] += 1
    found = [d["name"] for d in hvd.check_consistency(model, opt)]
    wrong += found != ([next(model.named_parameters())[0]] if size > 1 else [])

    small = make_model("small")
    dist = hvd.DistributedOptimizer(torch.optim.SGD(small.parameters(), lr=0.01),
                                    named_parameters=small.named_parameters())
    x = torch.ones(8, 256) * (rank + 1)

    def step():
        dist.zero_grad()
        small(x).sum().backward()
        dist.step()
    rows.append(("step", timed(step, args.steps, 20)))
    branch_ns = min(timeit.repeat("if o._check_every: pass", globals={"o": dist},
                                  number=100000, repeat=5)) / 100000 * 1e9
    wrong = int(hvd.allreduce(torch.tensor([wrong]), op=hvd.Sum, name="wrong").item())
    if rank == 0:
        floats = sum(t.numel() for t in tensors)
        print(f"# torch_consistency, {size} ranks, model {args.model} ({floats} floats in "
              f"parameters and buffers), torch {torch.__version__}, HVD_CHECK_CONSISTENCY="
              f"{dist._check_every or '(off)'}")
        print(f"{'row':>16} {'median_ms':>10} {'p90_ms':>10} {'x read':>8}")
        for name, (med, p90) in rows:
            ratio = f"{med / rows[0][1][0]:8.2f}" if name != "step" else f"{'-':>8}"
            print(f"{name:>16} {med:10.2f} {p90:10.2f} {ratio}")
        print(f"# step()'s test of HVD_CHECK_CONSISTENCY when off: {branch_ns:.0f} ns")
        print(f"# wrong results: {wrong} {'FAIL' if wrong else 'OK'}")
    hvd.shutdown()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
