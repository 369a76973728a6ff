#!/usr/bin/python3
"""elastic_torch.py - an elastic PyTorch training script of the shape of Horovod's elastic
ImageNet example (examples/elastic/pytorch/pytorch_imagenet_resnet50_elastic.py): an
ElasticSampler for training and one for validation, a TorchState subclass holding the model,
the optimizer, both samplers, the epoch and the batch, state.commit() every
--batches-per-commit batches and state.check_host_updates() every --batches-per-host-check,
record_batch after each batch, set_epoch at the end of the epoch, a reset callback, and
@hvd.elastic.run around the whole. Only the import line differs from what runs under Horovod
(and the data: N small synthetic samples, each carrying its index).

Rank 0 prints, for check_elastic.py's accounting of which samples each epoch trained on:
  # resumed epoch E batch B np N       when a run of the job starts (after resume and sync)
  # batch E B i,j,k,...                the sample indices of global batch B of epoch E
  # resets R                           the state's reset count at each resume
  # done epochs E                      at the end
Usage: elastic_torch.py [--epochs 2] [--samples 256] [--batch-size 4] [--step-s 0.05] ...
"""
import argparse
import time

import torch
import torch.nn.functional as F

import hvdc.torch as hvd

parser = argparse.ArgumentParser(description="Elastic PyTorch, ImageNet example's shape")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--samples", type=int, default=256)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--batches-per-commit", type=int, default=4)
parser.add_argument("--batches-per-host-check", type=int, default=2)
parser.add_argument("--base-lr", type=float, default=0.0125)
parser.add_argument("--warmup-epochs", type=float, default=1)
parser.add_argument("--step-s", type=float, default=0.05,
                    help="seconds each batch also takes, as a bigger model's would")


class IndexedSamples(torch.utils.data.Dataset):
    """Sample i: 16 features that are a function of i, a label, and i itself."""

    def __init__(self, n, salt):
        self.n, self.salt = n, salt

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.sin(torch.arange(16, dtype=torch.float32) * (i + 1 + self.salt) * 0.37)
        return x, (i + self.salt) % 4, i


class TrainingState(hvd.elastic.TorchState):
    """A user's own state: Horovod's TorchState with a count of the resets it saw."""

    def __init__(self, *args, **kwargs):
        self.resets = 0
        super().__init__(*args, **kwargs)

    def reset(self):
        self.resets += 1


class Metric(object):
    """Horovod's example's metric: averaged over the ranks."""

    def __init__(self, name):
        self.name = name
        self.sum = torch.tensor(0.)
        self.n = torch.tensor(0.)

    def update(self, val):
        self.sum += hvd.allreduce(val.detach().cpu(), name=self.name)
        self.n += 1

    @property
    def avg(self):
        return self.sum / self.n


def train(state):
    model.train()
    epoch = state.epoch
    train_loss = Metric("train_loss")
    batch_offset = state.batch
    for idx, (data, target, ids) in enumerate(train_loader):
        # Elastic Horovod: update the current batch index this epoch and commit / check for
        # host updates. Do not check hosts when we commit as it would be redundant.
        state.batch = batch_idx = batch_offset + idx
        if args.batches_per_commit > 0 and state.batch % args.batches_per_commit == 0:
            state.commit()
        elif args.batches_per_host_check > 0 and state.batch % args.batches_per_host_check == 0:
            state.check_host_updates()
        adjust_learning_rate(epoch, batch_idx)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        train_loss.update(loss)
        loss.backward()
        everyone = hvd.allgather(ids, name="batch.ids")
        if hvd.rank() == 0:
            print("# batch %d %d %s" % (epoch, batch_idx, ",".join(str(i) for i in
                                                                  everyone.tolist())),
                  flush=True)
        # Elastic Horovod: record which samples were processed this batch so we do not
        # reprocess them if a reset event occurs
        state.train_sampler.record_batch(idx, args.batch_size)
        optimizer.step()
        time.sleep(args.step_s)
    state.commit()


def validate(epoch):
    model.eval()
    val_loss = Metric("val_loss")
    with torch.no_grad():
        for data, target, _ in val_loader:
            val_loss.update(F.cross_entropy(model(data), target))
    if hvd.rank() == 0:
        print("# validated epoch %d loss %.4f" % (epoch, val_loss.avg.item()), flush=True)


def adjust_learning_rate(epoch, batch_idx):
    if epoch < args.warmup_epochs:
        epoch += float(batch_idx + 1) / len(train_loader)
        lr_adj = 1. / hvd.size() * (epoch * (hvd.size() - 1) / args.warmup_epochs + 1)
    else:
        lr_adj = 1.
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.base_lr * hvd.size() * lr_adj


def end_epoch(state):
    state.epoch += 1
    state.batch = 0
    state.train_sampler.set_epoch(state.epoch)
    state.commit()


def on_state_reset():
    # Horovod's examples rescale the learning rate to the new number of workers here
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.base_lr * hvd.size()


@hvd.elastic.run
def full_train(state):
    if hvd.rank() == 0:  # where this run of the job starts: the last commit, or the start
        print("# resumed epoch %d batch %d np %d" % (state.epoch, state.batch, hvd.size()),
              flush=True)
        print("# resets %d" % state.resets, flush=True)
    while state.epoch < args.epochs:
        train(state)
        validate(state.epoch)
        end_epoch(state)
    if hvd.rank() == 0:
        print("# done epochs %d" % state.epoch, flush=True)


if __name__ == "__main__":
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)

    train_dataset = IndexedSamples(args.samples, 0)
    # Elastic Horovod: use ElasticSampler to partition data among workers.
    train_sampler = hvd.elastic.ElasticSampler(train_dataset)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)
    val_dataset = IndexedSamples(args.samples // 4, 1000)
    val_sampler = hvd.elastic.ElasticSampler(val_dataset)
    val_loader = torch.utils.data.DataLoader(val_dataset, batch_size=args.batch_size,
                                             sampler=val_sampler)

    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    state = TrainingState(model=model, optimizer=optimizer, train_sampler=train_sampler,
                          val_sampler=val_sampler, epoch=0, batch=0)
    state.register_reset_callbacks([on_state_reset])
    full_train(state)
