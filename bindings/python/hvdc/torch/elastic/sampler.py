"""ElasticSampler: Horovod's (horovod/torch/elastic/sampler.py), which deals a dataset among the
ranks and, tracked by a TorchState, goes on after a reset with the samples the epoch has not
processed yet, dealt among the ranks there are now. Recorded in whole global batches: after k
record_batch(_, b) calls at n ranks, the first k * b * n indices of the epoch's order are done.
Any thread that owns it.
"""
import random

import torch.utils.data

from hvdc.common.basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions dataset across ranks and repartitions after reset events.

    Args:
        dataset: the dataset sampled (of constant size).
        shuffle: shuffle the indices (default True), the same way on every rank.
        seed: the shuffle's seed, the same on every rank (default 0).

    Keep it in a TorchState, call record_batch after each batch, and set_epoch at the end of
    each epoch (not its start: a partly done epoch must not start over)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed

        self.epoch = 0
        self.processed_indices = set()

        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.processed_num = 0

        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch: its own order (with shuffle), nothing processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank processed batch_size more samples."""
        self.processed_num += (batch_size * self.num_replicas)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        """Deals the epoch's unprocessed indices among the ranks there are now."""
        self.num_replicas, self.rank = size(), rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:  # Horovod's order: the same on every rank, and after a restart
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = -(-len(self.remaining_indices) // self.num_replicas)  # ceil
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        """This rank's share: every num_replicas-th remaining index from its rank, the order
        padded with its own start so that every rank gets num_samples."""
        short = self.total_size - len(self.remaining_indices)
        padded = self.remaining_indices + self.remaining_indices[:short]
        self.indices = padded[self.rank::self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
