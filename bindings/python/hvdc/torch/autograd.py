"""The blocking collectives of horovod.torch, differentiable as in Horovod 0.28: for a tensor
that requires grad, each runs as a torch.autograd.Function whose backward is Horovod's:

  allreduce      -> allreduce of the gradient with the same op and scale factors
  allgather      -> averaged allreduce of the gradient, then this rank's rows
  broadcast      -> averaged allreduce of the gradient, kept on the root (zeros elsewhere)
  alltoall       -> alltoall back with the received splits
  reducescatter  -> allgather of the gradient, times the set's size for op=Sum and times
                    prescale_factor * postscale_factor

(the grouped variants alike, as one grouped operation). These are Horovod's conventions, kept
so that models that differentiate through the collectives train as they did under Horovod.
Without grad they call the _async op and wait, skipping autograd's bookkeeping.
Any thread (backward runs on autograd's thread, like every collective's caller).
"""
import torch

from hvdc.common import basics as B
from hvdc.common.process_sets import global_process_set
from hvdc.torch import collectives as M
from hvdc.torch.compression import Compression

Sum, Average = B.Sum, B.Average


def _differentiable(tensors):
    return torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors)


# ---- allreduce -------------------------------------------------------------------------------

class HorovodAllreduce(torch.autograd.Function):
    """An all-reduce whose backward all-reduces the gradient with the same op."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        op = M.handle_average_backwards_compatibility(op, average)
        return M.allreduce_now(tensor, name, op, prescale_factor, postscale_factor, process_set)

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return grad, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Averages (or sums, min, max, multiplies) tensor over the ranks and returns the result;
    the input is not modified. Differentiable."""
    op = M.handle_average_backwards_compatibility(op, average)
    compressed, ctx = compression.compress(tensor)
    if _differentiable((compressed,)):
        reduced = HorovodAllreduce.apply(compressed, None, name, op, prescale_factor,
                                         postscale_factor, process_set)
    else:
        reduced = M.allreduce_now(compressed, name, op, prescale_factor, postscale_factor,
                                  process_set)
    return compression.decompress(reduced, ctx)


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return tuple(M.synchronize(M.grouped_allreduce_async(
            list(tensors), average, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=ctx.op,
                                  prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None,) * 6 + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Reduces a list of tensors as one unit; returns the list of results. Differentiable."""
    op = M.handle_average_backwards_compatibility(op, average)
    pairs = [compression.compress(t) for t in tensors]
    compressed = [c for c, _ in pairs]
    if _differentiable(compressed):
        reduced = HorovodGroupedAllreduce.apply(None, name, op, prescale_factor,
                                                postscale_factor, process_set, *compressed)
    else:
        reduced = M.synchronize(M.grouped_allreduce_async(compressed, None, name, op,
                                                          prescale_factor, postscale_factor,
                                                          process_set))
    return [compression.decompress(r, c) for r, (_, c) in zip(reduced, pairs)]


# ---- allgather -------------------------------------------------------------------------------

def _my_rows(dims, process_set):
    r = process_set.rank()
    return sum(dims[:r]), dims[r]


def _allgather_grad(ctx, grad_output, op):
    """This rank's rows of the gradient all-reduced with op over the set."""
    grad = allreduce(grad_output, op=op, process_set=ctx.process_set)
    offset, rows = _my_rows(ctx.dims, ctx.process_set)
    return grad.narrow(0, offset, rows)


class HorovodAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        output, dims = M.synchronize(M._allgather_async(tensor, name, process_set))
        ctx.dims, ctx.process_set = dims, process_set
        return output

    @staticmethod
    def backward(ctx, grad_output):
        return _allgather_grad(ctx, grad_output, Average), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension (which may differ between
    ranks; the rest of the shape must agree). Differentiable."""
    if _differentiable((tensor,)):
        return HorovodAllgather.apply(tensor, name, process_set)
    return M.synchronize(M.allgather_async(tensor, name, process_set))


class _AllgatherSummedGrad(HorovodAllgather):
    """An allgather whose backward sums (not averages) what every rank sends back: the exact
    gradient of the sum of every rank's loss. SyncBatchNorm differentiates through this one,
    so its gradients are torch's SyncBatchNorm's."""

    @staticmethod
    def backward(ctx, grad_output):
        return _allgather_grad(ctx, grad_output, Sum), None, None


def allgather_summed_grad(tensor, name=None, process_set=global_process_set):
    """allgather, differentiable with the summed backward of _AllgatherSummedGrad."""
    if _differentiable((tensor,)):
        return _AllgatherSummedGrad.apply(tensor, name, process_set)
    return M.synchronize(M.allgather_async(tensor, name, process_set))


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        base = name if name is not None else B.auto_name("grouped_allgather")
        results = [M.synchronize(M._allgather_async(t, f"{base}_{i}", process_set))
                   for i, t in enumerate(tensors)]
        ctx.dims, ctx.process_set = [d for _, d in results], process_set
        return tuple(o for o, _ in results)

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=Average, process_set=ctx.process_set)
        out = []
        for g, dims in zip(grads, ctx.dims):
            offset, rows = _my_rows(dims, ctx.process_set)
            out.append(g.narrow(0, offset, rows))
        return (None, None) + tuple(out)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    tensors = list(tensors)
    if _differentiable(tensors):
        return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))
    return M.synchronize(M.grouped_allgather_async(tensors, name, process_set))


# ---- broadcast -------------------------------------------------------------------------------

class HorovodBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return M.synchronize(M.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if B.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's tensor on every rank; the input is not modified. Differentiable."""
    if _differentiable((tensor,)):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return M.synchronize(M.broadcast_async(tensor, root_rank, name, process_set))


# ---- alltoall --------------------------------------------------------------------------------

class HorovodAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = M.synchronize(M.alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.process_set = received, process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, grad_received):
        grad, _ = M.synchronize(M.alltoall_async(grad_output.contiguous(), ctx.received,
                                                 process_set=ctx.process_set))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[r] rows (first dimension) of tensor to each rank r, in rank order; without
    splits the first dimension is split evenly. Returns the rows received, concatenated in rank
    order, and, when splits was given, also the tensor of rows received from each rank (as
    Horovod). Differentiable."""
    if _differentiable((tensor,)):
        output, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    else:
        output, received = M.synchronize(M.alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# ---- reducescatter ---------------------------------------------------------------------------

def _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor):
    """Horovod's factor on a reducescatter's gradient before it is allgathered."""
    scale = float(process_set.size()) if op == Sum else 1.0
    return scale * prescale_factor * postscale_factor


class HorovodReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.process_set = process_set
        ctx.scale = _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor)
        return M.synchronize(M.reducescatter_async(tensor, name, op, process_set,
                                                   prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output * ctx.scale if ctx.scale != 1.0 else grad_output
        return allgather(grad.contiguous(), process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=B.Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces tensor over the ranks; rank r gets its block of rows (the first dim0 % size
    ranks one row more). Differentiable."""
    compressed, ctx = compression.compress(tensor)
    if _differentiable((compressed,)):
        reduced = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                             postscale_factor)
    else:
        reduced = M.synchronize(M.reducescatter_async(compressed, name, op, process_set,
                                                      prescale_factor, postscale_factor))
    return compression.decompress(reduced, ctx)


class HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.process_set = process_set
        ctx.scale = _reducescatter_grad_scale(op, process_set, prescale_factor, postscale_factor)
        return tuple(M.synchronize(M.grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = [(g * ctx.scale if ctx.scale != 1.0 else g).contiguous() for g in grad_outputs]
        return (None,) * 5 + tuple(grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=B.Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reduce-scatters a list of tensors as one unit; returns the list of results.
    Differentiable."""
    pairs = [compression.compress(t) for t in tensors]
    compressed = [c for c, _ in pairs]
    if _differentiable(compressed):
        reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                    postscale_factor, *compressed)
    else:
        reduced = M.synchronize(M.grouped_reducescatter_async(compressed, name, op, process_set,
                                                              prescale_factor, postscale_factor))
    return [compression.decompress(r, c) for r, (_, c) in zip(reduced, pairs)]
