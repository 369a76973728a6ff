"""A training script written for Horovod (horovod.torch 0.28), as its users write them: the
migration test (run.py's `migrate` mode) runs it with only the import line changed to
`import hvdc.torch as hvd`. It exits non-zero unless training worked: the loss fell, every
rank ends with the same parameters (not buffers: BatchNorm's are per rank), the averaged metrics agree on every rank, and rank 0's
checkpoint loads.

usage: mpirun -np N python horovod_style_train.py CHECKPOINT_DIR
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed
import horovod.torch as hvd


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(20, 32)
        self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.bn(self.fc1(x)))), dim=1)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def main():
    checkpoint_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)

    # a learnable synthetic task: the class is the argmax of 4 fixed projections
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 20, generator=g)
    y = (x @ torch.randn(20, 4, generator=g)).argmax(1)
    train_dataset = torch.utils.data.TensorDataset(x, y)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=32, sampler=train_sampler)

    model = Net()
    lr_scaler = hvd.size()
    optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average)

    losses = []
    for epoch in range(1, 4):
        model.train()
        train_sampler.set_epoch(epoch)
        total = 0.0
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            total += loss.item()
        avg = metric_average(total / len(train_loader), f"avg_loss.{epoch}")
        losses.append(avg)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: average loss {avg:.4f}", flush=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch}, os.path.join(checkpoint_dir, "checkpoint.pt"))

    failures = []
    if not losses[-1] < 0.8 * losses[0]:
        failures.append(f"the loss did not fall: {losses}")
    everyone = hvd.allgather_object(losses)
    if any(l != losses for l in everyone):
        failures.append(f"ranks disagree on the averaged metrics: {everyone}")
    for name, p in model.named_parameters():  # BatchNorm's running statistics stay local
        root = hvd.broadcast(p.detach(), root_rank=0, name=f"check.{name}")
        if not torch.equal(root, p):
            failures.append(f"rank {hvd.rank()}: {name} differs from rank 0's")
    hvd.barrier()
    if hvd.rank() == 0:
        state = torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))
        model.load_state_dict(state["model"])
        if state["epoch"] != 3:
            failures.append(f"the checkpoint holds epoch {state['epoch']}")
    for f in failures:
        print(f"FAIL (rank {hvd.rank()}): {f}", flush=True)
    if hvd.rank() == 0 and not failures:
        print("MIGRATION OK: the Horovod script trained with hvdc.torch", flush=True)
    hvd.shutdown()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
