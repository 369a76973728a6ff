"""The collectives of horovod.torch on libhvdc: allreduce, grouped_allreduce, allgather,
broadcast, alltoall, reducescatter (each blocking and _async, in place with a trailing _),
sparse_allreduce_async, barrier, join, poll and synchronize.

Each _async call checks what Horovod checks in Python, hands libhvdc the tensor's data pointer,
element count and dtype, and returns an int handle; the tensors stay referenced in the handle
table until synchronize(handle) returns the result. Negotiation, fusion and the data movement
are libhvdc's. The differentiable wrappers are in autograd.py; mpi_ops.py gathers both under
Horovod's module name. Any thread.
"""
import ctypes
import warnings

import torch

from hvdc.common import basics as B
from hvdc.common import library as L
from hvdc.common.process_sets import global_process_set
from hvdc.torch import tensors as T

Average, Sum, Adasum, Min, Max, Product = B.Average, B.Sum, B.Adasum, B.Min, B.Max, B.Product


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule: `average` is deprecated, op wins, and passing both is an error."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        return Average if average else Sum
    return Average


def _set(process_set):
    """The process set's id, checking that libhvdc runs and this rank may submit to the set."""
    if not L.fast.hvd_is_initialized():
        raise ValueError(L.NOT_INITIALIZED_MESSAGE)
    if process_set is global_process_set or process_set is None:
        return 0
    process_set._require()
    if not process_set.included():
        raise B.HvdcValueError(f"rank {B.rank()} is not in process set "
                               f"{process_set.process_set_id} (ranks {process_set.ranks}); only "
                               "its members may submit to it")
    return process_set.process_set_id


def _name(name, kind):
    if name is None:
        return B.auto_name(kind).encode()
    return name.encode() if isinstance(name, str) else bytes(name)


def _submitted(status):
    if status != L.OK:
        raise L.error_for(status, submitting=True)


# ---- allreduce -------------------------------------------------------------------------------

def _check_device_adasum(op, tensor):
    """Horovod's refusals for Adasum on GPU tensors (mpi_ops.py, _allreduce_async), before
    anything is sent; the C core checks the same on every rank."""
    if op != Adasum or not tensor.is_cuda:
        return
    if not B.is_homogeneous():
        raise NotImplementedError("Running GPU Adasum on heterogeneous cluster is not supported yet.")
    nodes = B.size() // B.local_size()
    if nodes & (nodes - 1):
        raise NotImplementedError("Running GPU Adasum with non-power of 2 nodes is not supported yet.")


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """Submits one all-reduce of tensor into output (output is tensor: in place).
    synchronize() of a CUDA tensor's all-reduce has the stream that is current at that call
    wait for the result on the device, instead of the host waiting for it (as Horovod and DDP
    on NCCL do): so DistributedOptimizer.step() queues its update behind the all-reduces
    without a host sync.
    DistributedOptimizer calls this for every gradient of every step, so the cheap checks are
    written out here rather than called, and the global set takes no _set: libhvdc itself
    refuses a submission before hvd.init() (the same ValueError)."""
    dtype = T.c_dtype(tensor, "allreduce")
    if tensor.is_sparse:
        T.check_dense(tensor, "allreduce")
    cop = B.c_op(op)
    if op == Adasum:
        _check_device_adasum(op, tensor)
    sid = 0 if process_set is global_process_set else _set(process_set)
    send = tensor if tensor.is_contiguous() else tensor.contiguous()
    recv = send if output is tensor else output
    opts, event = T.options(send, prescale_factor, postscale_factor, sid, tensor.shape)
    h = ctypes.c_uint64(0)
    status = L.fast.hvd_allreduce_async(_name(name, "allreduce"), send.data_ptr(),
                                        recv.data_ptr(), send.numel(), dtype, cop, opts,
                                        ctypes.byref(h))
    if status != L.OK:
        raise L.error_for(status, submitting=True)
    if output is tensor and send is not tensor:  # in place on a non-contiguous view
        def finish():
            return tensor.copy_(send)
    else:
        def finish():
            return recv
    stream = T.current_stream_of(send) if send.is_cuda else T.host_stream
    return B.register([h.value], (tensor, send, recv, opts, event), finish, stream)


def _allreduce_now(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """allreduce_async + synchronize in one: a host tensor goes through libhvdc's blocking
    hvd_allreduce_with_options (the GIL released meanwhile), which, like hvd_allreduce in C,
    can run an all-reduce named as in the step before on this thread, without a hand-off to
    the background thread (docs/performance.md, "The caller's path"). A CUDA tensor keeps
    the async path: its synchronize() has the current stream wait, not the host."""
    if tensor.is_cuda or tensor.is_sparse:
        return synchronize(_allreduce_async(tensor, output, name, op, prescale_factor,
                                            postscale_factor, process_set))
    dtype = T.c_dtype(tensor, "allreduce")
    cop = B.c_op(op)
    sid = 0 if process_set is global_process_set else _set(process_set)
    send = tensor if tensor.is_contiguous() else tensor.contiguous()
    recv = send if output is tensor else output
    opts, _ = T.options(send, prescale_factor, postscale_factor, sid, tensor.shape)
    status = L.lib.hvd_allreduce_with_options(_name(name, "allreduce"), send.data_ptr(),
                                              recv.data_ptr(), send.numel(), dtype, cop, opts)
    if status != L.OK:  # the call's own argument errors are ValueErrors, as at submission
        raise L.error_for(status, submitting=True)
    if output is tensor and send is not tensor:  # in place on a non-contiguous view
        return tensor.copy_(send)
    return recv


def allreduce_now(tensor, name, op, prescale_factor, postscale_factor, process_set):
    """The blocking all-reduce behind hvd.allreduce: the result in a new tensor (op already
    resolved from average)."""
    T.c_dtype(tensor, "allreduce")  # a non-tensor's TypeError before torch.empty's own error
    output = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    return _allreduce_now(tensor, output, name, op, prescale_factor, postscale_factor,
                          process_set)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts averaging (or summing, ...) tensor over the ranks; the input is not modified.
    Returns a handle for poll() / synchronize(), which returns the result."""
    op = handle_average_backwards_compatibility(op, average)
    T.c_dtype(tensor, "allreduce")
    output = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce_async: synchronize() returns tensor, holding the result."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns tensor."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_now(tensor, tensor, name, op, prescale_factor, postscale_factor,
                          process_set)


def _grouped_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set):
    """One grouped all-reduce per dtype present (libhvdc groups share a dtype); one handle.
    synchronize() waits as _allreduce_async's does: CUDA tensors on the device, by the stream
    current at that call."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce: the list of tensors is empty")
    cop = B.c_op(op)
    _check_device_adasum(op, tensors[0])
    sid = _set(process_set)
    base = _name(name, "grouped_allreduce")
    sends = [T.contiguous(t) for t in tensors]
    recvs = [s if o is t else o for s, o, t in zip(sends, outputs, tensors)]
    by_dtype = {}
    for i, t in enumerate(tensors):
        T.check_dense(t, "grouped_allreduce")
        by_dtype.setdefault(T.c_dtype(t, "grouped_allreduce"), []).append(i)
    c_handles, keep = [], [tensors, sends, recvs]
    for dtype, idx in by_dtype.items():
        n = len(idx)
        names = (ctypes.c_char_p * n)(*[base + b"_%d" % i for i in idx])
        send_p = (ctypes.c_void_p * n)(*[sends[i].data_ptr() for i in idx])
        recv_p = (ctypes.c_void_p * n)(*[recvs[i].data_ptr() for i in idx])
        counts = (ctypes.c_size_t * n)(*[sends[i].numel() for i in idx])
        opts, event = T.options(sends[idx[0]], prescale_factor, postscale_factor, sid)
        h = ctypes.c_uint64(0)
        status = L.fast.hvd_grouped_allreduce_async(n, names, send_p, recv_p, counts, dtype, cop,
                                                    opts, ctypes.byref(h))
        if status != L.OK:
            error = L.error_for(status, submitting=True)
            B.wait_all(c_handles)  # what was already submitted completes, then the error
            raise error
        c_handles.append(h.value)
        keep += [names, send_p, recv_p, counts, opts, event]

    def finish():
        out = []
        for t, s, r, o in zip(tensors, sends, recvs, outputs):
            out.append(t.copy_(s) if (o is t and s is not t) else r)
        return out
    # as _allreduce_async: a CUDA group's results are waited for on the current stream
    stream = T.current_stream_of(sends[0]) if sends[0].is_cuda else T.host_stream
    return B.register(c_handles, keep, finish, stream)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one unit (negotiated, fused and completed together)."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    for t in tensors:  # Horovod's TypeError / ValueError before any output is allocated
        T.c_dtype(t, "grouped_allreduce")
    outputs = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in tensors]
    return _grouped_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                          process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    return _grouped_async(tensors, tensors, name, op, prescale_factor, postscale_factor,
                          process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """A sparse tensor's allreduce as Horovod does it: allgather its indices and values (the
    sum of sparse tensors is their concatenation), average by dividing the values. Returns a
    callable that waits and returns the sparse result (synchronize() accepts it too)."""
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices_handle = allgather_async(t._indices().transpose(0, 1).contiguous(),
                                     name=f"{name}.indices", process_set=process_set)
    values_handle = allgather_async(t._values(), name=f"{name}.values", process_set=process_set)
    n = process_set.size()

    def handle():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        if op == Average:
            values = values / n
        elif op != Sum:
            raise NotImplementedError("sparse_allreduce_async supports op=Average or Sum")
        if indices.dim() == 0 or values.dim() == 0:
            return t.new().resize_as_(t)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size())
    return handle


def _one_handle(tensors, name, kind, submit, pick=lambda result: result):
    """A grouped op as one submission per tensor (named <name>_<i>) under one handle, whose
    synchronize() returns [pick(each result)]. If a submission fails, those already made
    complete first, then the error is raised."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{kind}: the list of tensors is empty")
    base = _name(name, kind).decode()
    handles = []
    try:
        for i, t in enumerate(tensors):
            handles.append(submit(t, f"{base}_{i}"))
    except Exception:
        for h in handles:
            synchronize(h)
        raise
    pendings = [B._pending.pop(h) for h in handles]
    return B.register([c for p in pendings for c in p.c_handles], pendings,
                      lambda: [pick(p.finish()) for p in pendings])


# ---- allgather -------------------------------------------------------------------------------

def _allgather_async(tensor, name, process_set):
    """Submits an allgather; synchronize returns (output, first dimension of every rank)."""
    dtype = T.c_dtype(tensor, "allgather")
    T.check_dense(tensor, "allgather")
    sid = _set(process_set)
    dim0, row, trailing = T.rows(tensor, "allgather")
    send = T.contiguous(tensor)
    name = _name(name, "allgather")
    n = process_set.size()
    if row == 0 or send.device.type != "cpu":
        return _allgather_two_rounds(send, name, dtype, dim0, row, trailing, process_set, sid)
    out = ctypes.c_void_p(None)
    total = ctypes.c_size_t(0)
    counts = (ctypes.c_size_t * n)()
    h = ctypes.c_uint64(0)
    sopts = T.set_options(sid, tensor.shape)
    _submitted(L.fast.hvd_allgather_alloc_async(name, send.data_ptr(), send.numel(), dtype, sopts,
                                                ctypes.byref(out), ctypes.byref(total), counts,
                                                ctypes.byref(h)))

    def finish():
        bad = [r for r in range(n) if counts[r] % row]
        if bad:
            L.fast.hvd_free(out)
            raise B.HorovodInternalError(
                f"allgather '{name.decode()}': rank(s) {bad} sent {[counts[r] for r in bad]} "
                f"elements, not a whole number of rows of shape {list(trailing)} as on rank "
                f"{process_set.rank()}; every rank's tensor must have the same shape after the "
                "first dimension")
        dims = [counts[r] // row for r in range(n)]
        return T.from_allocated(out.value, tensor.dtype, (sum(dims),) + trailing), dims
    return B.register([h.value], (tensor, send, out, total, counts, sopts), finish)


def _allgather_two_rounds(send, name, dtype, dim0, row, trailing, process_set, sid):
    """Device tensors (libhvdc allocates host memory only) and rows of 0 elements: first the
    first dimensions (a host allgather), then the data into an output allocated for them."""
    n = process_set.size()
    dims = torch.tensor([dim0], dtype=torch.int64)
    got = (ctypes.c_int64 * n)()
    h = ctypes.c_uint64(0)
    _submitted(L.fast.hvd_allgather_async(name + b".dims", dims.data_ptr(), 1,
                                          ctypes.addressof(got), n, L.INT64, None, None,
                                          T.set_options(sid), ctypes.byref(h)))
    B.wait_all([h.value])
    all_dims = list(got)
    output = torch.empty((sum(all_dims),) + trailing, dtype=send.dtype, device=send.device)
    opts, event = T.options(send, process_set=sid, shape=send.shape)
    h = ctypes.c_uint64(0)
    _submitted(L.fast.hvd_allgather_async(name, send.data_ptr(), send.numel(), output.data_ptr(),
                                          output.numel(), dtype, None, None, opts,
                                          ctypes.byref(h)))
    return B.register([h.value], (send, output, opts, event), lambda: (output, all_dims))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's tensor along the first dimension (which may differ
    between ranks); synchronize() returns the result."""
    handle = _allgather_async(tensor, name, process_set)
    pending = B._pending[handle]
    inner = pending.finish
    pending.finish = lambda: inner()[0]
    return handle


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors under one handle; synchronize() returns a list."""
    return _one_handle(tensors, name, "grouped_allgather",
                       lambda t, n: _allgather_async(t, n, process_set),
                       lambda result: result[0])


# ---- broadcast -------------------------------------------------------------------------------

def _broadcast_async(tensor, output, root_rank, name, process_set):
    dtype = T.c_dtype(tensor, "broadcast")
    T.check_dense(tensor, "broadcast")
    sid = _set(process_set)
    if output is tensor:
        buf = T.contiguous(tensor)
    else:
        buf = output.copy_(tensor)
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        root_rank = int(root_rank)
    h = ctypes.c_uint64(0)
    if buf.device.type == "cuda":  # libhvdc recognises device memory; order it after the data
        torch.cuda.current_stream(buf.device).synchronize()
    sopts = T.set_options(sid, tensor.shape)
    _submitted(L.fast.hvd_broadcast_async(_name(name, "broadcast"), buf.data_ptr(), buf.numel(),
                                          dtype, root_rank, sopts, ctypes.byref(h)))
    if output is tensor and buf is not tensor:
        def finish():
            return tensor.copy_(buf)
    else:
        def finish():
            return buf
    return B.register([h.value], (tensor, buf, sopts), finish)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's tensor to every rank; the input is not modified."""
    T.c_dtype(tensor, "broadcast")
    output = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    return _broadcast_async(tensor, output, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast_async: tensor receives root_rank's values."""
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall --------------------------------------------------------------------------------

def _splits(splits, dim0, n):
    if splits is None:
        if dim0 % n:
            raise ValueError(f"alltoall: the first dimension ({dim0}) must be divisible by the "
                             f"number of ranks ({n}) when splits is not given")
        return [dim0 // n] * n
    values = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
    if len(values) != n:
        raise ValueError(f"alltoall: splits has {len(values)} entries; expected one per rank ({n})")
    if any(s < 0 for s in values) or sum(values) != dim0:
        raise ValueError(f"alltoall: splits {values} must be non-negative and sum to the first "
                         f"dimension ({dim0})")
    return values


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[r] rows of tensor (along the first dimension) to each rank r;
    synchronize() returns (output, received_splits)."""
    dtype = T.c_dtype(tensor, "alltoall")
    T.check_dense(tensor, "alltoall")
    sid = _set(process_set)
    sopts = T.set_options(sid)
    shaped = T.set_options(sid, tensor.shape)  # the data's: its shape is compared
    n = process_set.size()
    dim0, row, trailing = T.rows(tensor, "alltoall")
    split_list = _splits(splits, dim0, n)
    send = T.contiguous(tensor)
    sendcounts = (ctypes.c_size_t * n)(*[s * row for s in split_list])
    recvcounts = (ctypes.c_size_t * n)()
    name = _name(name, "alltoall")
    h = ctypes.c_uint64(0)
    if send.device.type == "cpu" and row > 0:
        out, total = ctypes.c_void_p(None), ctypes.c_size_t(0)
        _submitted(L.fast.hvd_alltoall_alloc_async(name, send.data_ptr(), sendcounts, dtype, shaped,
                                                   ctypes.byref(out), ctypes.byref(total),
                                                   recvcounts, ctypes.byref(h)))

        def finish():
            got = [recvcounts[r] // row for r in range(n)]
            output = T.from_allocated(out.value, tensor.dtype, (sum(got),) + trailing)
            return output, torch.tensor(got, dtype=torch.int32)
        return B.register([h.value], (tensor, send, sendcounts, recvcounts, out, total, shaped),
                          finish)
    # device tensors and rows of 0 elements: the received splits first, then the data
    got = torch.empty(n, dtype=torch.int64)
    mine = torch.tensor(split_list, dtype=torch.int64)
    counts = (ctypes.c_size_t * n)(*([1] * n))
    _submitted(L.fast.hvd_alltoall_async(name + b".splits", mine.data_ptr(), counts,
                                         got.data_ptr(), n, L.INT64, None, None, sopts,
                                         ctypes.byref(h)))
    B.wait_all([h.value])
    received = got.tolist()
    output = torch.empty((sum(received),) + trailing, dtype=send.dtype, device=send.device)
    if send.device.type == "cuda":
        torch.cuda.current_stream(send.device).synchronize()
    h = ctypes.c_uint64(0)
    _submitted(L.fast.hvd_alltoall_async(name, send.data_ptr(), sendcounts, output.data_ptr(),
                                         output.numel(), dtype, None, recvcounts, shaped,
                                         ctypes.byref(h)))
    return B.register([h.value], (tensor, send, sendcounts, recvcounts, output, shaped),
                      lambda: (output, torch.tensor(received, dtype=torch.int32)))


# ---- reducescatter ---------------------------------------------------------------------------

def _block_rows(dim0, n, r):
    """Horovod's split of the first dimension: the first dim0 % n ranks get one row more."""
    base, extra = divmod(dim0, n)
    return r * base + min(r, extra), base + (1 if r < extra else 0)


def _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor):
    dtype = T.c_dtype(tensor, "reducescatter")
    T.check_dense(tensor, "reducescatter")
    cop = B.c_op(op)
    sid = _set(process_set)
    n, me = process_set.size(), process_set.rank()
    dim0, row, trailing = T.rows(tensor, "reducescatter")
    first, mine = _block_rows(dim0, n, me)
    send = T.contiguous(tensor)
    if dim0 % n and row > 1:
        # libhvdc splits by elements; rows only line up when dim0 % n == 0 or rows are single
        # elements. Otherwise lay each rank's rows out in an equal padded block.
        per = -(-dim0 // n)
        padded = torch.zeros((n * per,) + trailing, dtype=send.dtype, device=send.device)
        for r in range(n):
            f, c = _block_rows(dim0, n, r)
            padded[r * per:r * per + c] = send[f:f + c]
        send, recv_rows = padded, per
    else:
        recv_rows = mine
    recv = torch.empty((recv_rows,) + trailing, dtype=tensor.dtype, device=tensor.device)
    opts, event = T.options(send, prescale_factor, postscale_factor, sid, tensor.shape)
    h = ctypes.c_uint64(0)
    _submitted(L.fast.hvd_reducescatter_async(_name(name, "reducescatter"), send.data_ptr(),
                                              recv.data_ptr(), send.numel(), dtype, cop, opts,
                                              None, ctypes.byref(h)))
    return B.register([h.value], (tensor, send, recv, opts, event),
                      lambda: recv if recv_rows == mine else recv[:mine])


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing tensor over the ranks and leaving rank r its block of rows (the first
    dim0 % size ranks get one row more); synchronize() returns the block."""
    return _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    return _one_handle(tensors, name, "grouped_reducescatter",
                       lambda t, n: _reducescatter_async(t, n, op, process_set,
                                                         prescale_factor, postscale_factor))


# ---- barrier, join, handles ------------------------------------------------------------------

def barrier(process_set=global_process_set):
    """Returns once every rank (of the set) has called barrier."""
    sid = _set(process_set)
    h = ctypes.c_uint64(0)
    _submitted(L.fast.hvd_barrier_async(T.set_options(sid), ctypes.byref(h)))
    B.wait_all([h.value])


def join(device=-1):
    """For uneven data: blocks until every rank has called join; meanwhile the others'
    allreduces go on without this rank. Returns the rank that joined last. device is accepted
    for compatibility (libhvdc's join needs no device)."""
    if not isinstance(device, int):
        raise ValueError(f"join: device must be an int, got {device!r}")
    last = ctypes.c_int(-1)
    L.check(L.lib.hvd_join(ctypes.byref(last)))
    B.realign_names(lambda n: int(allreduce_(torch.tensor([n], dtype=torch.int64), op=B.Max,
                                             name="hvd.join.names").item()))
    return last.value


poll = B.poll
synchronize = B.synchronize

