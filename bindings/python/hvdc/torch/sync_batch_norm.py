"""SyncBatchNorm: batch normalization whose statistics are those of the global batch (every
rank's part together), in forward and in backward, with Horovod's interface.

In training, each rank computes its part's count, mean and centred sum of squares per channel;
one allgather brings every rank's three to every rank, which combines them (Chan et al.'s
parallel variance: no E[x^2] - E[x]^2 cancellation). The allgather is differentiable (this
one's backward sums what every rank sends back; Horovod's public allgather averages), so
autograd alone produces the synchronized backward: the gradient of the whole job's loss with respect to this rank's inputs, which is what
torch.nn.SyncBatchNorm computes. (torch's fused batch_norm_stats kernels are CUDA-only in many
torch builds; plain tensor ops run everywhere.) In eval mode, or on one rank, it is BatchNorm.
Any thread that runs the module.
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hvdc.common.process_sets import global_process_set
from hvdc.torch.autograd import allgather_summed_grad


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous batch normalization over the ranks: drop-in for torch.nn.BatchNorm*d
    (and torch.nn.SyncBatchNorm) in a data-parallel model. Input: (N, C, ...)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            self._factor(), self.eps)

    def _factor(self):
        if self.momentum is None:  # cumulative moving average
            return 1.0 / float(self.num_batches_tracked) if self.num_batches_tracked else 0.0
        return self.momentum

    def forward(self, input):
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
        if not self.training:
            return self._run_bn(input)
        if self.process_set.size() == 1 and input.numel() > input.shape[1]:
            return self._run_bn(input)  # the same numbers, one fused kernel
        # one value per channel on one rank: as Horovod, normalize it (to the bias) where
        # F.batch_norm would refuse "more than 1 value per channel"
        return self._sync_forward(input)

    def _sync_forward(self, x):
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        n = x.numel() // c if c else 0
        # per-rank statistics in float64 where the input is narrower, for the combination
        work = x.double() if x.dtype in (torch.float16, torch.bfloat16, torch.float32) else x
        if n > 0:
            mean = work.mean(dims)
            m2 = ((work - mean.view(1, c, *([1] * (x.dim() - 2)))) ** 2).sum(dims)
        else:
            mean = work.new_zeros(c)
            m2 = work.new_zeros(c)
        count = work.new_full((1,), float(n))
        row = torch.cat([count, mean, m2]).view(1, 2 * c + 1)
        rows = allgather_summed_grad(row, process_set=self.process_set)  # (ranks, 2c + 1)
        counts, means, m2s = rows[:, :1], rows[:, 1:c + 1], rows[:, c + 1:]
        total = counts.sum()
        if float(total) == 0:
            raise ValueError("SyncBatchNorm: every rank's batch is empty")
        g_mean = (counts * means).sum(0) / total
        g_m2 = (m2s + counts * (means - g_mean) ** 2).sum(0)
        g_var = g_m2 / total  # biased, for normalizing
        if self.training and self.track_running_stats:
            with torch.no_grad():
                factor = self._factor()
                unbiased = g_m2 / (total - 1) if float(total) > 1 else g_var
                self.running_mean.mul_(1 - factor).add_(g_mean.to(self.running_mean.dtype),
                                                        alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype),
                                                       alpha=factor)
        shape = (1, c) + (1,) * (x.dim() - 2)
        inv = torch.rsqrt(g_var + self.eps).view(shape)
        out = (work - g_mean.view(shape)) * inv
        out = out.to(x.dtype)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=global_process_set):
        """Returns module with every BatchNorm*d replaced by a SyncBatchNorm (same parameters)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                module.track_running_stats, process_set)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        return out

