"""DistributedOptimizer(op=hvd.Adasum) with more than one rank: Horovod's delta optimizer.

Adasum combines updates, not gradients, so each rank first takes the wrapped optimizer's step
on its own gradient, and the ranks then Adasum-combine what that step changed:

  backward, per parameter p (its hook):   start = p;  inner step on p alone;  delta = p - start
                                          allreduce_async_(delta, op=Adasum)   (in p's storage)
  step():                                 wait;  p = start + combined delta

The hook computes delta in place in p's own storage (start holds the old value), as Horovod
does, so no extra copy of the model is made per step. The inner optimizer's state (momentum,
Adam moments) stays per rank, as in Horovod. skip_synchronize() is refused, synchronize()
does nothing (the combination needs the step first), as in Horovod. HVD_CHECK_CONSISTENCY
compares the parameters only (consistency.py), since the inner state differs by design.
Main (training) thread; hooks run on autograd's thread.
"""
from contextlib import contextmanager

import torch

from hvdc.common import basics as B
from hvdc.torch import collectives as M
from hvdc.torch import consistency
from hvdc.torch.optimizer_params import count_backward_pass, named_parameters_of


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self._hvdc_wrapper, self).__init__(params)
        self._compression = compression
        named_parameters = named_parameters_of(self.param_groups, named_parameters)
        ordered = sorted(named_parameters, key=lambda kv: kv[0])
        self._parameter_names = {v: k for k, v in ordered}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: self.backward_passes_per_step for _, v in ordered}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False)
                                 for _, p in named_parameters}
        self._check_every = consistency.every()
        self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def _register_hooks(self):
        for param_group in self.param_groups:
            for p in param_group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.add(p)
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _allreduce_grad_async(self, p):
        """The inner step on p alone, then the Adasum of its delta, in p's storage."""
        start = self._starting_models[p]
        stashed = []
        for group in self.param_groups:
            stashed.append(group["params"])
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            start.data.copy_(p)
            super(self._hvdc_wrapper, self).step()
            p.data.sub_(start)  # the delta: what this rank's step changed
        finally:
            for params, group in zip(stashed, self.param_groups):
                group["params"] = params
        compressed, ctx = self._compression.compress(p)
        handle = M.allreduce_async_(compressed.data, name=self._parameter_names.get(p),
                                    op=B.Adasum)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            handle, ctx = None, None
            if count_backward_pass(self, p):
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        pass

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        # the same order on every rank (a set of tensors iterates in id order)
        missing = self._requires_update - set(self._handles.keys())
        for p in sorted(missing, key=lambda p: self._parameter_names.get(p)):
            self._handles[p] = self._allreduce_grad_async(p)
        for p in sorted(self._handles, key=lambda p: self._parameter_names.get(p)):
            handle, ctx = self._handles[p]
            if not handle:  # step() before backward_passes_per_step passes: reduce now
                handle, ctx = self._allreduce_grad_async(p)
                self._handles[p] = (handle, ctx)
            delta = self._compression.decompress(M.synchronize(handle), ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        if self._check_every:  # the parameters only: the inner state stays per rank
            consistency.after_step(self, with_state=False)
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self._hvdc_wrapper, self).zero_grad(*args, **kwargs)
