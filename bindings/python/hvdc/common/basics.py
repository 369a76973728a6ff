"""Start-up, topology, build facts, the timeline, and handles: Horovod's `basics`, framework-free.

Every call goes straight to libhvdc; the only state kept here is what Horovod's Python keeps:
the table of pending handles (so the tensors of an operation stay referenced until it
completes) and the process sets known to this process.
Any thread (as libhvdc's calls are).
"""
import atexit
import ctypes
import itertools
import threading

from hvdc.common import library as L
from hvdc.common.diagnostics import register_thread_dump
from hvdc.common.exceptions import HorovodInternalError, HvdcValueError  # noqa: F401
from hvdc.common.process_sets import ProcessSet, global_process_set, _registry

# Reduction ops, with Horovod's values so that code comparing or storing them keeps working.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_C_OPS = {Average: L.AVERAGE, Sum: L.SUM, Min: L.MIN, Max: L.MAX, Product: L.PRODUCT,
          Adasum: L.ADASUM}

_homogeneous = None
_atexit_registered = False


def _topology(fn):
    return L.query_int(fn)


def c_op(op):
    """libhvdc's reduce op for a Horovod op value; unknown values are refused."""
    try:
        return _C_OPS[op]
    except (KeyError, TypeError):
        raise ValueError(f"unknown reduction op {op!r}; expected one of hvd.Average, hvd.Sum, "
                         "hvd.Adasum, hvd.Min, hvd.Max, hvd.Product") from None


# ---- start-up --------------------------------------------------------------------------------

def init(comm=None, process_sets=None):
    """Starts libhvdc on every rank (collective). As in Horovod, a second call does nothing.

    comm: None (all MPI processes), a list of world ranks that must name every process (libhvdc
    starts on MPI_COMM_WORLD), or an mpi4py communicator (libhvdc uses a duplicate of it).
    process_sets: ProcessSet objects to register now, in the same order on every rank, or
    "dynamic" (accepted for compatibility: sets can always be added later).
    """
    global _homogeneous, _atexit_registered
    if L.fast.hvd_is_initialized():
        return
    register_thread_dump()  # rank 0's stall verdict and SIGUSR1 show every Python thread
    if comm is None or isinstance(comm, (list, tuple, range)):
        status = L.lib.hvd_init()
    else:
        status = L.lib.hvd_init_comm(_mpi4py_handle(comm))
    if status != L.OK:
        raise HorovodInternalError("hvd.init() failed: " + L.last_error(status))
    if not _atexit_registered:
        atexit.register(_shutdown_at_exit)
        _atexit_registered = True
    size = _topology(L.fast.hvd_size)
    if comm is not None and isinstance(comm, (list, tuple, range)) and \
            sorted(int(r) for r in comm) != list(range(size)):
        L.lib.hvd_shutdown()
        raise NotImplementedError(
            f"hvd.init(comm={list(comm)!r}): libhvdc starts on all {size} MPI processes; a list "
            "of ranks must name every one of them. For a subset, start with hvd.init() and use "
            "hvd.add_process_set(ranks), or pass an mpi4py communicator.")
    global_process_set._register(0, list(range(size)))
    _registry.clear()
    _registry[0] = global_process_set
    _homogeneous = _agree_homogeneous()
    if process_sets is not None and process_sets != "dynamic":
        from hvdc.common.process_sets import add_process_set
        for ps in process_sets:
            add_process_set(ps)


def _mpi4py_handle(comm):
    try:
        from mpi4py import MPI
    except ImportError:
        raise ValueError(f"hvd.init(comm={comm!r}): comm must be None, a list of ranks, or an "
                         "mpi4py communicator (mpi4py is not installed)") from None
    if not isinstance(comm, MPI.Comm):
        raise ValueError(f"hvd.init(comm=...): expected an mpi4py communicator, got {type(comm)}")
    return ctypes.c_void_p(MPI._handleof(comm))


def _agree_homogeneous():
    """True when every node runs the same number of ranks: one tiny all-reduce at init."""
    local = _topology(L.fast.hvd_local_size)
    vals = (ctypes.c_int32 * 2)(local, -local)
    h = ctypes.c_uint64(0)
    L.check(L.fast.hvd_allreduce_async(b"hvdc.init.local_sizes", ctypes.addressof(vals),
                                       ctypes.addressof(vals), 2, L.INT32, L.MIN, None,
                                       ctypes.byref(h)), submitting=True)
    L.check(L.lib.hvd_wait(ctypes.byref(h)))
    return vals[0] == -vals[1]


def shutdown():
    """Stops libhvdc (collective). Operations still pending fail; their handles are dropped."""
    if not L.fast.hvd_is_initialized():
        return
    status = L.lib.hvd_shutdown()
    _pending.clear()
    for ps in list(_registry.values()):
        ps._invalidate()
    _registry.clear()
    if status != L.OK:
        raise L.error_for(status)


def _shutdown_at_exit():
    try:
        shutdown()
    except Exception:  # exiting anyway; libhvdc already printed what went wrong
        pass


def is_initialized():
    return bool(L.fast.hvd_is_initialized())


# ---- topology --------------------------------------------------------------------------------

def rank():
    return _topology(L.fast.hvd_rank)


def size():
    return _topology(L.fast.hvd_size)


def local_rank():
    return _topology(L.fast.hvd_local_rank)


def local_size():
    return _topology(L.fast.hvd_local_size)


def cross_rank():
    return _topology(L.fast.hvd_cross_rank)


def cross_size():
    return _topology(L.fast.hvd_cross_size)


def is_homogeneous():
    """True if every node runs the same number of ranks (decided at init)."""
    if not L.fast.hvd_is_initialized():
        raise ValueError(L.NOT_INITIALIZED_MESSAGE)
    return _homogeneous


# ---- what this build has (truthfully) --------------------------------------------------------

def mpi_threads_supported():
    """libhvdc always runs MPI with MPI_THREAD_MULTIPLE (hvd.init fails otherwise)."""
    if not L.fast.hvd_is_initialized():
        raise ValueError(L.NOT_INITIALIZED_MESSAGE)
    return True


def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """NCCL's version code this build was compiled against (e.g. 22809 for 2.28.9), 0 without
    NCCL: an int, as Horovod's, so that `nccl_built() >= 2700` guards read the same."""
    return int(L.fast.hvd_nccl_built())


def cuda_built():
    return bool(L.fast.hvd_gpu_built())


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def sycl_built():
    """Horovod's Intel GPU (SYCL) build: never here."""
    return False


# ---- timeline --------------------------------------------------------------------------------

def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline to file_path (call on every rank; rank 0 writes)."""
    if not isinstance(file_path, (str, bytes)) and not hasattr(file_path, "__fspath__"):
        raise ValueError(f"start_timeline: file_path must be a path, got {type(file_path)}")
    import os
    path = os.fsencode(file_path)
    L.check(L.lib.hvd_start_timeline(path, 1 if mark_cycles else 0), submitting=True)


def stop_timeline():
    L.check(L.lib.hvd_stop_timeline(), submitting=True)


# ---- handles ---------------------------------------------------------------------------------

class Pending:
    """An operation in flight: libhvdc's handles, what must stay alive until they complete,
    how to produce the result once they have, and the stream that waits for it (see
    wait_all), or None."""
    __slots__ = ("c_handles", "keep", "finish", "stream")

    def __init__(self, c_handles, keep, finish, stream=None):
        self.c_handles = c_handles
        self.keep = keep
        self.finish = finish
        self.stream = stream


_pending = {}
_synthetic = itertools.count(-1, -1)


def register(c_handles, keep, finish, stream=None):
    """Records an operation; returns its handle (an int, as Horovod's are). stream: see
    wait_all."""
    handle = c_handles[0] if c_handles else next(_synthetic)
    _pending[handle] = Pending(c_handles, keep, finish, stream)
    return handle


def wait_all(c_handles, stream=None):
    """Waits for every handle (the GIL is released while waiting); raises the first failure
    after all have completed, so nothing is left in flight.
    stream: None, the host waits for the results (hvd_wait). Else a function returning the
    cudaStream_t (an int; 0 or None: the legacy default stream) that is to wait for them
    instead: the host then waits only until they are queued on the device
    (hvd_wait_on_stream), and work queued on that stream afterwards sees them. For host
    memory hvd_wait_on_stream is hvd_wait, so a host tensor's operation may take it too."""
    first = None
    on = stream() if stream is not None else None
    for h in c_handles:
        ch = ctypes.c_uint64(h)
        if stream is None:
            status = L.lib.hvd_wait(ctypes.byref(ch))
        else:
            status = L.lib.hvd_wait_on_stream(ctypes.byref(ch), on)
        if status != L.OK and first is None:
            first = L.error_for(status)
    if first is not None:
        raise first


def poll(handle):
    """True once the operation behind handle has completed (synchronize will not block)."""
    p = _pending.get(handle)
    if p is None:
        raise ValueError(f"poll: handle {handle!r} is not a pending operation (already "
                         "synchronized, or not returned by an _async call)")
    done = ctypes.c_int(0)
    for h in p.c_handles:
        L.check(L.fast.hvd_poll(h, ctypes.byref(done)), submitting=True)
        if not done.value:
            return False
    return True


def synchronize(handle):
    """Waits for the operation and returns its result; None for an unknown handle, as Horovod.
    A handle may also be the callable a sparse allreduce returns."""
    if callable(handle):
        return handle()
    p = _pending.pop(handle, None)
    if p is None:
        return None
    wait_all(p.c_handles, p.stream)
    return p.finish()


_names = threading.local()


def auto_name(kind):
    """A name for an unnamed operation: the same on every rank whose threads each submit in the
    same order, however the threads interleave. Each thread counts its own operations: the main
    thread's names keep Horovod's form (kind.noname.N), another thread's carry its name, so the
    threads that submit need the same names on every rank (threading's default Thread-1,
    Thread-2, ... have them when the threads start in the same order)."""
    count = getattr(_names, "count", 0)
    _names.count = count + 1
    thread = threading.current_thread()
    if thread is threading.main_thread():
        return f"{kind}.noname.{count}"
    return f"{kind}.noname.{thread.name}.{count}"


def realign_names(largest):
    """After hvd.join: ranks that had joined named none of the others' operations meanwhile,
    so their counts fell behind; the calling thread goes on from largest(its count), the
    largest over the ranks, and its next unnamed operation has the same name everywhere again."""
    _names.count = largest(getattr(_names, "count", 0))
