#!/usr/bin/env python3
"""torch_compare.py - the same training step three ways, in one run on this machine: one
process; PyTorch DistributedDataParallel on its CPU backend (gloo); hvdc.torch's
DistributedOptimizer. Same model, per-rank batch, steps and thread count per rank.

    /usr/bin/python3 benchmarks/torch_compare.py [--np 2] [--out benchmarks/results/torch_compare]
    python3 benchmarks/torch_compare.py --device cuda [--np GPUS]   (one GPU per rank)

With --device cuda each rank uses its local rank's GPU, DDP runs on NCCL ("ddp (nccl)"), the
CNN and ResNet-50 take a batch of 64 per rank (ResNet-50 at 3x224x224, as people train it), and
each step ends with torch.cuda.synchronize() so its time is the device's too; --np defaults to
the GPUs torch sees.

Models: the Fashion-MNIST CNN of examples/pytorch (batch 64 per rank, 1x28x28) and
torchvision's ResNet-50 (untrained, 1000 classes, 25.6 M parameters: 102 MB of float32
gradients per step; synthetic 3x64x64 images, batch 2 per rank, so that communicating the
gradients weighs against computing them). Synthetic integer-derived batches, different per
rank; SGD with momentum; every process uses 1 thread (2 cores: a rank each at np 2), so
"one process" is one rank's share of the machine. Each worker is started by mpirun (DDP's too:
rank and size from Open MPI's environment, rendezvous over TCP on 127.0.0.1).

Columns: model, mode, ranks, samples/s (all ranks), ms/step (median step of the timed ones),
speed-up over one process, scaling efficiency (speed-up / ranks). Correctness is checked while
timing: after the timed steps every rank must hold the same parameters (DDP and hvdc alike), or
the exit status is 1. Writes OUT.txt, OUT.csv and OUT.svg (a bar chart of samples/s).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {  # name: (per-rank batch, input shape, classes, warm-up steps, timed steps)
    "cnn": (64, (1, 28, 28), 10, 5, 40),
    "resnet50": (2, (3, 64, 64), 1000, 2, 6),
}
CUDA_MODELS = {  # --device cuda: a realistic batch for a GPU
    "cnn": (64, (1, 28, 28), 10, 10, 100),
    "resnet50": (64, (3, 224, 224), 1000, 5, 30),
}


# ---- worker: one process of one configuration ---------------------------------------------

def build(model_name):
    import torch
    torch.manual_seed(0)
    if model_name == "cnn":  # the example's model, so the two measure the same network
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "examples", "pytorch"))
        from train_fashion_mnist import Net
        return Net()
    import torchvision
    return torchvision.models.resnet50(weights=None)


def worker(mode, model_name, device_kind):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    cuda = device_kind == "cuda"
    batch, shape, classes, warmup, timed = (CUDA_MODELS if cuda else MODELS)[model_name]
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(local_rank)
    model = build(model_name).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("nccl" if cuda else "gloo",
                                init_method=f"tcp://127.0.0.1:{os.environ['HVDC_BENCH_PORT']}",
                                rank=rank, world_size=size)
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if cuda else None)
    elif mode == "hvdc":
        import hvdc.torch as hvd
        hvd.init()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(rank)
    x = ((torch.randint(0, 256, (batch,) + shape, generator=g).float() - 128) / 64).to(device)
    y = torch.randint(0, classes, (batch,), generator=g).to(device)
    steps = []
    for step in range(warmup + timed):
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()  # the step's device work is part of its time
        steps.append(time.perf_counter() - t0)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    # every rank must hold the same parameters: compare min and max of a checksum over ranks
    check = torch.tensor([params.double().sum().item(), -params.double().sum().item()])
    if mode == "ddp":
        import torch.distributed as dist
        # NCCL reduces device tensors only
        t = torch.tensor([s for s in steps[warmup:]], dtype=torch.float64, device=device)
        check = check.to(device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.all_reduce(check, op=dist.ReduceOp.MIN)
        t, check = t.cpu(), check.cpu()
        dist.destroy_process_group()
    elif mode == "hvdc":
        t = hvd.allreduce(torch.tensor(steps[warmup:], dtype=torch.float64), op=hvd.Max)
        check = hvd.allreduce(check, op=hvd.Min)
        hvd.shutdown()
    else:
        t = torch.tensor(steps[warmup:], dtype=torch.float64)
    identical = abs(check[0].item() + check[1].item()) == 0.0
    if rank == 0:
        print("RESULT " + json.dumps({"steps": t.tolist(), "identical": identical,
                                      "batch": batch, "ranks": size}), flush=True)
    return 0


# ---- driver ----------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_config(mode, model_name, ranks, python, device_kind):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1",
               HVDC_BENCH_PORT=str(free_port()))
    repo = os.path.dirname(HERE)
    env["PYTHONPATH"] = os.path.join(repo, "bindings", "python") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), python,
           os.path.abspath(__file__), "--worker", mode, "--model", model_name,
           "--device", device_kind]
    run = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=900)
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{mode} {model_name} np {ranks} failed:\n{run.stdout[-3000:]}")


def svg(rows, path):
    """A grouped bar chart of samples/s, one group per model, no dependencies."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    colors = {"one process": "#999999", "ddp (gloo)": "#d95f02", "ddp (nccl)": "#d95f02",
              "hvdc": "#1b9e77"}
    w, h, left, top, bottom = 720, 400, 70, 50, 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">', '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">torch_compare: samples/s '
           '(higher is better), each model scaled to its best mode</text>']
    group_w = (w - left - 40) / len(models)
    for gi, m in enumerate(models):
        mrows = [r for r in rows if r["model"] == m]
        best = max(r["samples_s"] for r in mrows)
        bar_w = group_w * 0.7 / len(mrows)
        for bi, r in enumerate(mrows):
            bh = (h - top - bottom) * r["samples_s"] / best
            x = left + gi * group_w + group_w * 0.15 + bi * bar_w
            y = h - bottom - bh
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 4:.1f}" height="{bh:.1f}" '
                       f'fill="{colors.get(r["mode"], "#7570b3")}"/>')
            out.append(f'<text x="{x + (bar_w - 4) / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle">'
                       f'{r["samples_s"]:.0f}</text>')
        out.append(f'<text x="{left + gi * group_w + group_w / 2:.1f}" y="{h - bottom + 20}" '
                   f'text-anchor="middle">{m}</text>')
    for i, mode in enumerate(modes):
        out.append(f'<rect x="{left + i * 160}" y="{h - 22}" width="12" height="12" '
                   f'fill="{colors.get(mode, "#7570b3")}"/><text x="{left + i * 160 + 18}" '
                   f'y="{h - 12}">{mode}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", choices=["one", "ddp", "hvdc"])
    p.add_argument("--model", choices=list(MODELS))
    p.add_argument("--np", type=int, default=0, help="ranks (default 2, or the GPUs with cuda)")
    p.add_argument("--models", default="cnn,resnet50")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", default="")
    args = p.parse_args()
    if args.worker:
        return worker(args.worker, args.model, args.device)
    import torch
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit(f"torch_compare: --device cuda: torch {torch.__version__} sees no CUDA device"
                 + ("" if torch.version.cuda else " (it was built without CUDA)"))
    if not args.np:
        args.np = torch.cuda.device_count() if cuda else 2
    if not args.out:
        args.out = os.path.join(HERE, "results", "torch_compare_cuda" if cuda else "torch_compare")
    table_models = CUDA_MODELS if cuda else MODELS
    rows, bad = [], 0
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    for m in args.models.split(","):
        base = None
        for mode, label, ranks in [("one", "one process", 1),
                                   ("ddp", "ddp (nccl)" if cuda else "ddp (gloo)", args.np),
                                   ("hvdc", "hvdc", args.np)]:
            res = run_config(mode, m, ranks, sys.executable, args.device)
            step_s = statistics.median(res["steps"])
            samples = res["batch"] * ranks / step_s
            if mode == "one":
                base = samples
            bad += not res["identical"]
            rows.append({"model": m, "mode": label, "ranks": ranks, "samples_s": samples,
                         "ms_step": step_s * 1e3, "speedup": samples / base,
                         "efficiency": samples / base / ranks, "identical": res["identical"]})
            print(f"# {m} {label} np {ranks}: {samples:.1f} samples/s, {step_s * 1e3:.1f} ms/step",
                  file=sys.stderr, flush=True)
    where = (f"{torch.cuda.get_device_name(0)} x {args.np}, CUDA {torch.version.cuda}"
             if cuda else f"{os.cpu_count()} cores")
    header = (f"# torch_compare --device {args.device}, {os.uname().nodename} ({where}), torch "
              f"{torch.__version__}, started {started}\n"
              f"# 1 thread per process; per-rank batch and steps: "
              + "; ".join(f"{m} batch {table_models[m][0]} x {table_models[m][1]}, "
                          f"{table_models[m][4]} timed steps after {table_models[m][3]}"
                          for m in args.models.split(",")) + "\n"
              "# ms/step: median over the timed steps of the slowest rank's step time\n")
    table = [f"{'model':>9} {'mode':>12} {'ranks':>5} {'samples/s':>10} {'ms/step':>9} "
             f"{'speed-up':>8} {'efficiency':>10} {'identical':>9}"]
    for r in rows:
        table.append(f"{r['model']:>9} {r['mode']:>12} {r['ranks']:>5} {r['samples_s']:>10.1f} "
                     f"{r['ms_step']:>9.1f} {r['speedup']:>8.2f} {r['efficiency']:>10.2f} "
                     f"{'yes' if r['identical'] else 'NO':>9}")
    text = header + "\n".join(table) + "\n"
    print(text, end="")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".txt", "w") as f:
        f.write(text)
    with open(args.out + ".csv", "w") as f:
        f.write("model,mode,ranks,samples_per_s,ms_per_step,speedup,efficiency,identical\n")
        for r in rows:
            f.write(f"{r['model']},{r['mode']},{r['ranks']},{r['samples_s']:.2f},{r['ms_step']:.2f},"
                    f"{r['speedup']:.3f},{r['efficiency']:.3f},{int(r['identical'])}\n")
    svg(rows, args.out + ".svg")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
