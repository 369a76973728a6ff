"""How torch tensors cross into libhvdc: dtypes, contiguity, devices, the options struct, and
output buffers that libhvdc allocates. Nothing here talks to other ranks.
Any thread.
"""
import ctypes
import weakref

import torch

from hvdc.common import library as L

# Every dtype horovod.torch accepts on the CPU (torch has no uint16 before 2.3: 16-bit unsigned
# integers reach libhvdc's HVD_UINT16 only from other frameworks).
DTYPES = {
    torch.uint8: L.UINT8, torch.int8: L.INT8, torch.int16: L.INT16, torch.int32: L.INT32,
    torch.int64: L.INT64, torch.float16: L.FLOAT16, torch.bfloat16: L.BFLOAT16,
    torch.float32: L.FLOAT32, torch.float64: L.FLOAT64, torch.bool: L.BOOL,
}
if hasattr(torch, "uint16"):
    DTYPES[torch.uint16] = L.UINT16

_DEFAULT_OPTIONS = None  # NULL: libhvdc's defaults (no scaling, host memory)


def c_dtype(tensor, fn):
    """libhvdc's dtype for tensor; raises as Horovod does for what cannot be sent."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{fn}: expected a torch.Tensor, got {type(tensor).__name__}")
    try:
        return DTYPES[tensor.dtype]
    except KeyError:
        raise ValueError(f"{fn}: tensor type {tensor.type()} is not supported; supported dtypes: "
                         + ", ".join(str(d).replace("torch.", "") for d in DTYPES)) from None


def check_dense(tensor, fn):
    if tensor.is_sparse:
        raise ValueError(f"{fn}: sparse tensors are not supported here; use "
                         "hvd.sparse_allreduce_async, or DistributedOptimizer(sparse_as_dense=True)")


def contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _with_shape(o, shape):
    """o describing a tensor of this shape (hvd_options.shape): libhvdc compares it across
    ranks, as Horovod compares shapes. The array lives as long as o."""
    if shape is not None:
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        o.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
        o.ndim = len(shape)
        o._dims = dims
    return o


def options(tensor, prescale=1.0, postscale=1.0, process_set=0, shape=None):
    """An hvd_options for tensor in process set process_set (an id), or None (NULL) when the
    defaults do. CUDA tensors name their device and carry an event recorded on the current
    stream, so libhvdc's stream waits for the data on the device instead of the host waiting;
    the event must outlive the operation (the caller keeps the returned objects). shape: the
    caller's tensor's shape, compared across ranks."""
    plain = prescale == 1.0 and postscale == 1.0 and tensor.is_cpu  # not .device: builds an object
    if plain and process_set == 0 and shape is None:
        return _DEFAULT_OPTIONS, None
    if plain:  # the common case, every step: one options object per shape, made once
        return _plain_options(process_set, shape), None
    o = _with_shape(L.Options(float(prescale), float(postscale), L.DEVICE_CPU, None, process_set),
                    shape)
    event = None
    if tensor.device.type == "cuda":
        o.device = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
        event = torch.cuda.current_stream(tensor.device).record_event()
        o.ready_event = event.cuda_event
    elif tensor.device.type != "cpu":
        raise ValueError(f"tensors on {tensor.device} are not supported (CPU and CUDA only)")
    return ctypes.pointer(o), event


def host_stream():
    """The stream of a host tensor's operation (basics.wait_all): none."""
    return None


def current_stream_of(tensor):
    """A function returning the cudaStream_t (an int) current on tensor's device when called:
    the stream that waits for the tensor's operation at synchronize (basics.wait_all)."""
    device = tensor.device
    return lambda: torch.cuda.current_stream(device).cuda_stream


_plain = {}  # (process set, shape) -> hvd_options; libhvdc only reads options during a call


def _plain_options(process_set, shape):
    key = (process_set, None if shape is None else tuple(shape))
    o = _plain.get(key)
    if o is None:
        if len(_plain) >= 4096:  # a model has far fewer shapes; bound a pathological caller
            _plain.clear()
        o = ctypes.pointer(_with_shape(L.Options(1.0, 1.0, L.DEVICE_CPU, None, process_set),
                                       shape))
        _plain[key] = o
    return o


def set_options(process_set, shape=None):
    """An hvd_options that names a process set (id) and, if given, the tensor's shape; None
    for the global set without a shape."""
    if process_set == 0 and shape is None:
        return None
    return _plain_options(process_set, shape)


def from_allocated(ptr, dtype, shape):
    """A tensor over a buffer libhvdc allocated (hvd_*_alloc_async), without copying; the buffer
    goes back to libhvdc (hvd_free) when the last tensor viewing it is gone."""
    numel = 1
    for d in shape:
        numel *= d
    if not ptr or numel == 0:
        if ptr:
            L.fast.hvd_free(ptr)
        return torch.empty(shape, dtype=dtype)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    buf = (ctypes.c_char * nbytes).from_address(ptr)
    weakref.finalize(buf, L.fast.hvd_free, ptr)
    return torch.frombuffer(buf, dtype=dtype).view(shape)


def rows(tensor, fn):
    """(first dimension, elements per row, the shape after the first dimension)."""
    if tensor.dim() == 0:
        raise ValueError(f"{fn}: a tensor of rank 0 has no first dimension to concatenate or "
                         "split along; use tensor.reshape(1)")
    trailing = tuple(tensor.shape[1:])
    row = 1
    for d in trailing:
        row *= d
    return tensor.shape[0], row, trailing
