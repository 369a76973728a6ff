#!/usr/bin/env python3
"""train_fashion_mnist.py - a CNN on Fashion-MNIST, data-parallel with hvdc.torch, written as a
Horovod PyTorch script (only the import names hvdc):

    build/hvdcrun -np 2 /usr/bin/python3 examples/pytorch/train_fashion_mnist.py
    ... --checkpoint ck.pt            rank 0 saves after every epoch (atomically)
    ... --checkpoint ck.pt --resume   continues from the epoch the checkpoint ends with
    ... --elastic                     commits after every epoch (hvd.elastic.TorchState) and
                                      starts from the last commit: under hvdcrun --elastic a
                                      run that lost a host restarts from there
    ... --device cuda [--amp]         one GPU per rank, its local rank's (as Horovod's
                                      examples); --amp: mixed precision with a GradScaler, in
                                      Horovod's synchronize() / skip_synchronize() pattern
    (--stop-after N ends a run after N epochs, as if interrupted)

Every rank holds the whole model and trains on its shard of each epoch (torch's
DistributedSampler with num_replicas=hvd.size(), rank=hvd.rank()); broadcast_parameters and
broadcast_optimizer_state start every replica from rank 0's state; DistributedOptimizer averages
the gradients; the metrics are averaged over the ranks with hvd.allreduce. Rank 0 prints one
line per epoch. The data: Debian's dataset-fashion-mnist (the same files as examples/train).
Exit status 1 when --min-accuracy is given and the held-out accuracy stays below it.
"""
import argparse
import gzip
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import hvdc.torch as hvd

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path, magic, dims):
    """An IDX file (gzip'd) as a uint8 tensor, checking the magic number and the sizes."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        sys.exit(f"cannot read {path}: {e} (install dataset-fashion-mnist, or pass --data DIR "
                 "holding train-images-idx3-ubyte.gz and its three siblings)")
    if len(raw) < 4 + 4 * dims or struct.unpack(">I", raw[:4])[0] != magic:
        sys.exit(f"{path}: not an IDX file of {dims} dimension(s) (magic {raw[:4].hex()})")
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    body = raw[4 + 4 * dims:]
    if len(body) != math.prod(shape):
        sys.exit(f"{path}: {len(body)} bytes of data, the header says {math.prod(shape)}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).view(shape)


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 0x803, 3)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 0x801, 1)
    if images.shape[0] != labels.shape[0]:
        sys.exit(f"{split}: {images.shape[0]} images but {labels.shape[0]} labels")
    x = (images.float() / 255.0 - 0.2860) / 0.3530  # Fashion-MNIST's mean and deviation
    return TensorDataset(x.unsqueeze(1), labels.long())


class Net(nn.Module):
    """conv16-conv32-fc128-fc10, as examples/train's --model cnn."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def metric_average(values, name):
    """Sums (loss, correct, count) over the ranks: exact global figures for uneven shards."""
    return hvd.allreduce(torch.tensor(values, dtype=torch.float64), op=hvd.Sum, name=name)


def evaluate(model, loader, epoch, device):
    model.eval()
    loss = correct = count = 0.0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            out = model(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            count += len(y)
    total = metric_average([loss, correct, count], f"eval.{epoch}")
    return total[0].item() / total[2].item(), total[1].item() / total[2].item()


def save_checkpoint(path, model, optimizer, epoch):
    """Rank 0 writes path.tmp, fsyncs it and renames it over path: path always holds a whole
    checkpoint, the previous one or the new one."""
    if hvd.rank() != 0:
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": epoch, "format": "hvdc-example-1"}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def choose_device(args):
    """cpu, or this rank's GPU: its local rank's, as Horovod's examples do. Every rank decides
    together, so a rank without a GPU stops the job with its reason instead of hanging it."""
    if args.device == "cpu":
        if args.amp:
            sys.exit("--amp needs --device cuda")
        return torch.device("cpu")
    why = ""
    if not torch.cuda.is_available():
        why = (f"torch {torch.__version__} sees no CUDA device"
               + ("" if torch.version.cuda else " (it was built without CUDA)"))
    elif hvd.local_rank() >= torch.cuda.device_count():
        why = (f"local rank {hvd.local_rank()} has no GPU of its own ({torch.cuda.device_count()} "
               "visible): start at most one rank per GPU")
    ok = hvd.allreduce(torch.tensor([0 if why else 1]), op=hvd.Min, name="device.check")
    if why or ok.item() == 0:
        if hvd.rank() == 0 or why:
            print(f"--device cuda on rank {hvd.rank()}: {why or 'another rank has no GPU'}",
                  file=sys.stderr, flush=True)
        hvd.shutdown()
        sys.exit(2)
    torch.cuda.set_device(hvd.local_rank())
    return torch.device("cuda", hvd.local_rank())


def grad_scaler():
    """torch.amp.GradScaler("cuda") where torch has it (2.3 on), else torch.cuda.amp's."""
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64, help="per rank (global = size x this)")
    p.add_argument("--lr", type=float, default=0.05, help="for the global batch; cosine-decayed")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data", default=DATA)
    p.add_argument("--train-limit", type=int, default=0, help="use only the first N training images")
    p.add_argument("--checkpoint", default="")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--stop-after", type=int, default=0,
                   help="stop after this many epochs, as if interrupted (the schedule still "
                        "spans --epochs)")
    p.add_argument("--fp16-allreduce", action="store_true", help="Compression.fp16 for gradients")
    p.add_argument("--elastic", action="store_true",
                   help="commit every epoch to $HVD_ELASTIC_DIR and start from the last commit")
    p.add_argument("--min-accuracy", type=float, default=0.0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: one GPU per rank, its local rank's")
    p.add_argument("--amp", action="store_true",
                   help="--device cuda: mixed precision (torch.autocast, a GradScaler)")
    args = p.parse_args()

    hvd.init()
    device = choose_device(args)
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    train_set, test_set = load(args.data, "train"), load(args.data, "t10k")
    if args.train_limit:
        train_set = TensorDataset(*(t[:args.train_limit] for t in train_set.tensors))
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                       shuffle=True, seed=args.seed)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                      shuffle=False)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = DataLoader(test_set, batch_size=500, sampler=test_sampler)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    start_epoch = 0
    elastic_state = None
    if args.elastic:  # the last commit, if there is one (the broadcasts below sync it)
        elastic_state = hvd.elastic.TorchState(model, optimizer, epoch=0)
        if elastic_state.resume():
            start_epoch = elastic_state.epoch
    elif args.resume:
        if not args.checkpoint:
            sys.exit("--resume needs --checkpoint PATH")
        if hvd.rank() == 0:
            state = torch.load(args.checkpoint, map_location=device)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start_epoch = state["epoch"]
        start_epoch = hvd.broadcast_object(start_epoch, root_rank=0, name="start_epoch")
    # every replica starts from rank 0's model and optimizer state
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    steps_per_epoch = len(train_loader)
    total_steps = args.epochs * steps_per_epoch
    scaler = grad_scaler() if args.amp else None

    if hvd.rank() == 0:
        print(f"# {hvd.size()} ranks on {device.type}{' with amp' if args.amp else ''}, "
              f"{len(train_set)} training images, global batch "
              f"{args.batch_size * hvd.size()}, {steps_per_epoch} steps per epoch"
              + (f", resuming after epoch {start_epoch}" if start_epoch else ""), flush=True)
        print(f"{'epoch':>5} {'loss':>10} {'train_acc':>9} {'test_acc':>9} {'samples/s':>10} "
              f"{'train_s':>8} {'total_s':>8}", flush=True)
    test_acc = 0.0
    for epoch in range(start_epoch, args.epochs):
        t0 = time.time()
        model.train()
        train_sampler.set_epoch(epoch)
        loss_sum = correct = count = 0.0
        for i, (x, y) in enumerate(train_loader):
            step = epoch * steps_per_epoch + i
            for g in optimizer.param_groups:  # cosine decay to 0 over the run
                g["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            with torch.autocast(device_type=device.type, enabled=args.amp):
                out = model(x)
                loss = F.cross_entropy(out, y)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:  # Horovod's documented pattern: average, unscale, then step without averaging
                scaler.scale(loss).backward()
                optimizer.synchronize()
                scaler.unscale_(optimizer)
                with optimizer.skip_synchronize():
                    scaler.step(optimizer)
                scaler.update()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            count += len(y)
        train_s = time.time() - t0
        totals = metric_average([loss_sum, correct, count], f"train.{epoch}")
        _, test_acc = evaluate(model, test_loader, epoch, device)
        if args.checkpoint:
            save_checkpoint(args.checkpoint, model, optimizer, epoch + 1)
        if elastic_state is not None:
            elastic_state.epoch = epoch + 1
            try:
                elastic_state.commit()
            except hvd.HostsUpdatedInterrupt:  # hosts changed: hvdcrun restarts the job there
                hvd.shutdown()
                return 0
        if hvd.rank() == 0:
            n = totals[2].item()
            print(f"{epoch + 1:>5} {totals[0].item() / n:>10.4f} {totals[1].item() / n:>9.4f} "
                  f"{test_acc:>9.4f} {n / train_s:>10.0f} {train_s:>8.2f} "
                  f"{time.time() - t0:>8.2f}", flush=True)
        if args.stop_after and epoch + 1 >= args.stop_after and epoch + 1 < args.epochs:
            if hvd.rank() == 0:
                print(f"stopped after epoch {epoch + 1}", flush=True)
            break
    ok = test_acc >= args.min_accuracy
    if hvd.rank() == 0 and args.min_accuracy:
        print(f"held-out accuracy {test_acc:.4f} {'>=' if ok else '<'} {args.min_accuracy}: "
              f"{'PASS' if ok else 'FAIL'}", flush=True)
    hvd.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
