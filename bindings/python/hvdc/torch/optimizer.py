"""DistributedOptimizer: wraps a torch.optim optimizer so that step() applies gradients
averaged over the ranks, with Horovod's interface and behaviour.

A hook on each parameter's gradient accumulator submits that gradient's all-reduce the moment
backward has produced it, so communication overlaps the rest of backward; libhvdc negotiates,
fuses and reduces them in its background thread. step() waits for all of them (synchronize),
writes the averages into p.grad, then runs the wrapped optimizer's step.

  loss.backward()          hooks fire layer by layer: allreduce_async_(p.grad) each
  optimizer.step()         synchronize(): wait for every handle, p.grad = average; then step

With op=hvd.Adasum (and more than one rank) it is Horovod's delta optimizer instead
(optimizer_adasum.py): each rank steps on its own gradient and Adasum combines the updates.
backward_passes_per_step = k: the hooks let torch accumulate k backward passes into p.grad
and submit on the k-th (the gradients are summed over the passes, as in Horovod).
groups: lists of parameters (or a number of groups) reduced as one grouped all-reduce each,
submitted when the group's last gradient is ready.
With HVD_CHECK_CONSISTENCY=N (an hvdc extension), every N-th step() ends with
hvd.check_consistency over the parameters and the optimizer's state (consistency.py); unset,
step() pays one test of an attribute.
Main (training) thread; hooks run on autograd's thread.
"""
import warnings
from contextlib import contextmanager

import torch

from hvdc.common import basics as B
from hvdc.common.process_sets import global_process_set
from hvdc.torch import collectives as M
from hvdc.torch import consistency
from hvdc.torch.compression import Compression
from hvdc.torch.optimizer_adasum import _DistributedAdasumOptimizer
from hvdc.torch.optimizer_params import (count_backward_pass, find_duplicates, named_parameters_of,
                                         wrapped_class)


class _DistributedOptimizer(torch.optim.Optimizer):
    """Its methods are copied into a subclass of the wrapped optimizer's class
    (optimizer_params.wrapped_class), which they reach as super(self._hvdc_wrapper, self)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=B.Average, gradient_predivide_factor=1.0, groups=None,
                 sparse_as_dense=False, process_set=global_process_set):
        super(self._hvdc_wrapper, self).__init__(params)
        self._compression = compression
        named_parameters = named_parameters_of(self.param_groups, named_parameters)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: self.backward_passes_per_step
                                 for _, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        if groups is not None:
            if not (isinstance(groups, list) or groups > 0):
                raise ValueError("groups should be a non-negative integer or a list of lists of "
                                 "torch.Tensor.")
            if isinstance(groups, list):
                grouped_id = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError("groups must consist of torch.Tensor.")
                        if id(p) in grouped_id:
                            raise ValueError("A parameter can only appear once in groups.")
                        grouped_id.add(id(p))
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        # HVD_CHECK_CONSISTENCY: a collective over every rank, so not with a process set
        self._check_every = consistency.every() if process_set is global_process_set else 0
        if process_set.included() and (B.size() > 1):
            self._register_hooks()

    find_duplicates = staticmethod(find_duplicates)  # Horovod's name for it

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def _register_hooks(self):
        if self._groups is not None:
            p_list = []
            # Get list of parameters with grads
            for param_group in self.param_groups:
                for p in param_group["params"]:
                    if p.requires_grad:
                        p_list.append(p)
            # To ensure parameter order and group formation is consistent, sort by name
            p_list = sorted(p_list, key=lambda p: self._parameter_names.get(p))
            if isinstance(self._groups, int):
                n = self._groups
                p_groups = [tuple(p_list[i::n]) for i in range(n)] if n <= len(p_list) else \
                    [(p,) for p in p_list]
                p_groups = [g for g in p_groups if g]
            else:
                wanted = [[p for p in group if p.requires_grad] for group in self._groups]
                in_groups = {id(p) for g in wanted for p in g}
                p_groups = [tuple(sorted(g, key=lambda p: self._parameter_names.get(p)))
                            for g in wanted if g]
                p_groups += [(p,) for p in p_list if id(p) not in in_groups]
            for group in p_groups:
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

        for param_group in self.param_groups:
            for p in param_group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    p_tmp = p.expand_as(p)
                    grad_acc = p_tmp.grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _scales(self):
        if self.op == B.Average:
            # libhvdc's average divides by the ranks; the predivide factor moves part of that
            # before the sum (less risk of overflow in float16), as Horovod splits it
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # another rank may have produced this gradient (dynamic graphs): send zeros
            p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if self.sparse_as_dense:
                tensor = tensor.to_dense()
            else:
                return self._sparse_allreduce_grad_async(p, name)
        tensor_compressed, ctx = self._compression.compress(tensor)
        prescale, postscale = self._scales()
        # allreduce_async_ without its argument shuffling: every gradient of every step
        handle = M._allreduce_async(tensor_compressed, tensor_compressed, name, self.op,
                                    prescale, postscale, self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, ps):
        name = self._parameter_names.get(ps[0])
        tensors_compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in ps])
        prescale, postscale = self._scales()
        handle = M.grouped_allreduce_async_(list(tensors_compressed), name=name, op=self.op,
                                            prescale_factor=prescale,
                                            postscale_factor=postscale,
                                            process_set=self.process_set)
        return handle, ctxs

    def _sparse_allreduce_grad_async(self, p, name):
        handle = M.sparse_allreduce_async(p.grad, name=name, op=self.op,
                                          process_set=self.process_set)
        return handle, None

    def _make_hook(self, p):
        def hook(*ignore):
            handle, ctx = None, None
            if count_backward_pass(self, p):
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        handle, ctxs = self._grouped_allreduce_grad_async(group)
                        self._handles[group] = (handle, ctxs)
                        for gp in group:  # drop entries of earlier passes' no-op calls
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient's all-reduce (submitting those the hooks did not) and
        writes the averaged gradients into p.grad."""
        if not self.process_set.included():
            self._synchronized = True
            return
        if self._groups is None and len(self._handles) == len(self._requires_update):
            missing_p = ()  # every hook fired: the keys are _requires_update (no tensor hashed)
        else:
            completed = set()
            for x in self._handles.keys():
                completed.update(x) if isinstance(x, tuple) else completed.add(x)
            missing_p = self._requires_update - completed
        # the same order on every rank (sets of tensors iterate in id order)
        for p in sorted(missing_p, key=lambda p: self._parameter_names.get(p)):
            if self._groups is not None and len(self._p_to_group[p]) > 1:
                group = self._p_to_group[p]
                if group not in self._handles:
                    self._handles[group] = self._grouped_allreduce_grad_async(group)
                    for gp in group:
                        self._handles.pop(gp, None)
                continue
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in self._handles.items():
            if isinstance(p, tuple):
                outputs = M.synchronize(handle)
                for gp, output, gctx in zip(p, outputs, ctx):
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                    gp.grad.set_(self._compression.decompress(output, gctx))
                if self._groups is not None:
                    self._group_counts[p] = 0
            else:
                output = M.synchronize(handle)  # a sparse allreduce's callable too
                self._allreduce_delay[p] = self.backward_passes_per_step
                if self._groups is not None:
                    self._group_counts[self._p_to_group[p]] = 0
                grad = p.grad
                if grad.is_sparse:
                    aggregated = self._compression.decompress(output, ctx)
                    if not aggregated.is_sparse:
                        aggregated = aggregated.to_sparse()
                    grad.zero_().add_(aggregated)
                else:
                    averaged = self._compression.decompress(output, ctx)
                    if averaged is not grad:  # in place (no compression): already there
                        grad.set_(averaged)
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """step() without synchronizing, after an explicit synchronize() (e.g. to clip):

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        loss = super(self._hvdc_wrapper, self).step(closure)
        if self._check_every:
            consistency.after_step(self, with_state=True)
        return loss

    def load_state_dict(self, *args, **kwargs):
        """Horovod's override: loading another state forgets gradients in flight and restarts
        the count of backward passes, so the next step all-reduces a whole accumulation."""
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        if self._groups is not None:
            for group in self._group_counts:
                self._group_counts[group] = 0
        super(self._hvdc_wrapper, self).load_state_dict(*args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self._hvdc_wrapper, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=B.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """An optimizer that averages gradients over the ranks before applying them (Horovod's
    DistributedOptimizer; see the module's comment). Returns an instance of a subclass of
    optimizer's class, built on optimizer.param_groups."""
    if gradient_predivide_factor != 1.0 and op != B.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if op != B.Adasum or B.size() == 1:
        cls = wrapped_class(_DistributedOptimizer, optimizer.__class__)
        return cls(optimizer.param_groups, named_parameters, compression,
                   backward_passes_per_step, op, gradient_predivide_factor, groups,
                   sparse_as_dense, process_set)
    # Adasum combines each rank's update, not its gradient (optimizer_adasum.py), as Horovod
    if process_set != global_process_set:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    cls = wrapped_class(_DistributedAdasumOptimizer, optimizer.__class__)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)
