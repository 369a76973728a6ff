"""Finds and loads libhvdc.so with ctypes and declares the C functions the bindings call.

Why ctypes and not a compiled extension: nothing here is compiled against CPython's or a
framework's C++ ABI, so one install works with whatever Python 3 and torch the user has
(Horovod's torch extension, built against one torch, is its most common install failure).
The bindings pass tensors as (data pointer, element count, dtype); libhvdc does the rest.

Where the library is looked for, first hit wins:
  1. $HVDC_LIBRARY (a path to libhvdc.so; the test suite sets it to the build's library);
  2. the path `meson install` recorded in hvdc/_install_config.py (pip install .: hvdc/lib/);
  3. the source tree's build directory: <repository>/build/libhvdc/libhvdc.so, so that
     PYTHONPATH=bindings/python works straight after scripts/setup.sh;
  4. the dynamic linker's search path (libhvdc.so.0).

Two handles on the same library: `lib` releases the GIL around each call (for calls that block:
init, shutdown, wait, barrier, join) and `fast` keeps it (for calls that only queue work or read
state, where releasing and re-taking the GIL would cost more than the call).
Any thread.
"""
import ctypes
import os

from hvdc.common.exceptions import HvdcValueError, HorovodInternalError

# hvd_status (libhvdc/include/hvdc.h; tests/python/check_abi.py compares these with it)
OK = 0
ERR_INVALID_ARG = 1
ERR_NOT_INITIALIZED = 2
ERR_ALREADY_INITIALIZED = 3
ERR_CONFIG = 4
ERR_MPI = 5
ERR_MISMATCH = 6
ERR_DUPLICATE_NAME = 7
ERR_SHUTDOWN = 8
ERR_NO_MEMORY = 9
ERR_UNSUPPORTED = 10
ERR_CUDA = 11
ERR_NCCL = 12
ERR_INTERNAL = 13
ERR_STALLED = 14
ERR_RANK_FAILED = 15

# hvd_dtype
UINT8, INT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64, INT16, UINT16, BOOL = range(11)
# hvd_reduce_op
SUM, AVERAGE, MIN, MAX, PRODUCT, ADASUM = range(6)

DEVICE_CPU = -1
PROCESS_SET_GLOBAL = 0
NOT_INITIALIZED_MESSAGE = "Horovod has not been initialized; use hvd.init()."


class Options(ctypes.Structure):
    """hvd_options, made as HVD_OPTIONS_INIT makes it (tests/python/check_abi.py compares the
    layout with hvdc.h's)."""
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("prescale", ctypes.c_double),
                ("postscale", ctypes.c_double),
                ("device", ctypes.c_int),
                ("ready_event", ctypes.c_void_p),
                ("process_set", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("ndim", ctypes.c_int)]

    def __init__(self, prescale=1.0, postscale=1.0, device=DEVICE_CPU, ready_event=None,
                 process_set=PROCESS_SET_GLOBAL, shape=None, ndim=0):
        super().__init__(ctypes.sizeof(Options), prescale, postscale, device, ready_event,
                         process_set, shape, ndim)


def _candidates():
    env = os.environ.get("HVDC_LIBRARY")
    if env:
        return [env], True
    paths = []
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from hvdc import _install_config  # written by meson install
        # relative: inside the package (pip install .)
        paths.append(os.path.join(os.path.dirname(here), _install_config.LIBRARY))
    except ImportError:
        pass
    repo = os.path.normpath(os.path.join(here, "..", "..", "..", ".."))
    paths.append(os.path.join(repo, "build", "libhvdc", "libhvdc.so"))
    paths.append("libhvdc.so.0")
    return paths, False


def _load():
    paths, explicit = _candidates()
    errors = []
    for path in paths:
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            # RTLD_GLOBAL: Open MPI's plugins, loaded later by MPI_Init, resolve MPI's own
            # symbols through the global namespace
            return (ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL),
                    ctypes.PyDLL(path, mode=ctypes.RTLD_GLOBAL), path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    where = "HVDC_LIBRARY" if explicit else "the install, the source tree's build/ and the linker path"
    raise ImportError(
        "hvdc: cannot load libhvdc (looked in " + where + "): " + "; ".join(errors) +
        ". Build it with scripts/setup.sh (then PYTHONPATH=bindings/python finds build/), "
        "install it with `pip install .` or `meson install -C build`, or set "
        "HVDC_LIBRARY=/path/to/libhvdc.so.")


lib, fast, path = _load()

_size_t = ctypes.c_size_t
_vp = ctypes.c_void_p
_handle_p = ctypes.POINTER(ctypes.c_uint64)
_size_p = ctypes.POINTER(ctypes.c_size_t)
_int_p = ctypes.POINTER(ctypes.c_int)


class ElasticInfo(ctypes.Structure):
    """hvd_elastic_info (tests/python/check_abi.py compares the layout with hvdc.h's)."""
    _fields_ = [("restored", ctypes.c_int),
                ("sequence", ctypes.c_uint64),
                ("committed_size", ctypes.c_int),
                ("age_s", ctypes.c_double)]

class NamedBuffer(ctypes.Structure):
    """hvd_named_buffer: keep in step with hvdc.h."""
    _fields_ = [("name", ctypes.c_char_p),
                ("data", ctypes.c_void_p),
                ("nbytes", ctypes.c_size_t)]


class Report(ctypes.Structure):
    """hvd_report: keep in step with hvdc.h."""
    _fields_ = [("period_s", ctypes.c_double),
                ("steps_per_s", ctypes.c_double),
                ("rounds_per_s", ctypes.c_double),
                ("wait_ms", ctypes.c_double),
                ("last_rank", ctypes.c_int),
                ("last_host", ctypes.c_char * 64),
                ("last_share", ctypes.c_double),
                ("last_lateness_ms", ctypes.c_double),
                ("bytes", ctypes.c_uint64),
                ("busbw_gbs", ctypes.c_double),
                ("tensors", ctypes.c_uint64),
                ("ops", ctypes.c_uint64)]

_opt_p = ctypes.POINTER(Options)


def _declare(handle, name, restype, argtypes):
    f = getattr(handle, name)
    f.restype = restype
    f.argtypes = argtypes
    return f


for _h in (lib, fast):
    _declare(_h, "hvd_init", ctypes.c_int, [])
    _declare(_h, "hvd_init_comm", ctypes.c_int, [_vp])
    _declare(_h, "hvd_shutdown", ctypes.c_int, [])
    _declare(_h, "hvd_is_initialized", ctypes.c_int, [])
    for _fn in ("hvd_rank", "hvd_size", "hvd_local_rank", "hvd_local_size", "hvd_cross_rank",
                "hvd_cross_size"):
        _declare(_h, _fn, ctypes.c_int, [_int_p])
    _declare(_h, "hvd_allreduce_async", ctypes.c_int,
             [ctypes.c_char_p, _vp, _vp, _size_t, ctypes.c_int, ctypes.c_int, _opt_p, _handle_p])
    _declare(_h, "hvd_allreduce_with_options", ctypes.c_int,
             [ctypes.c_char_p, _vp, _vp, _size_t, ctypes.c_int, ctypes.c_int, _opt_p])
    _declare(_h, "hvd_grouped_allreduce_async", ctypes.c_int,
             [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(_vp),
              ctypes.POINTER(_vp), _size_p, ctypes.c_int, ctypes.c_int, _opt_p, _handle_p])
    _declare(_h, "hvd_broadcast_async", ctypes.c_int,
             [ctypes.c_char_p, _vp, _size_t, ctypes.c_int, ctypes.c_int, _opt_p, _handle_p])
    _declare(_h, "hvd_allgather_async", ctypes.c_int,
             [ctypes.c_char_p, _vp, _size_t, _vp, _size_t, ctypes.c_int, _size_p, _size_p,
              _opt_p, _handle_p])
    _declare(_h, "hvd_allgather_alloc_async", ctypes.c_int,
             [ctypes.c_char_p, _vp, _size_t, ctypes.c_int, _opt_p, ctypes.POINTER(_vp), _size_p,
              _size_p, _handle_p])
    _declare(_h, "hvd_reducescatter_async", ctypes.c_int,
             [ctypes.c_char_p, _vp, _vp, _size_t, ctypes.c_int, ctypes.c_int, _opt_p, _size_p,
              _handle_p])
    _declare(_h, "hvd_alltoall_async", ctypes.c_int,
             [ctypes.c_char_p, _vp, _size_p, _vp, _size_t, ctypes.c_int, _size_p, _size_p,
              _opt_p, _handle_p])
    _declare(_h, "hvd_alltoall_alloc_async", ctypes.c_int,
             [ctypes.c_char_p, _vp, _size_p, ctypes.c_int, _opt_p, ctypes.POINTER(_vp), _size_p,
              _size_p, _handle_p])
    _declare(_h, "hvd_free", None, [_vp])
    _declare(_h, "hvd_barrier", ctypes.c_int, [])
    _declare(_h, "hvd_barrier_async", ctypes.c_int, [_opt_p, _handle_p])
    _declare(_h, "hvd_add_process_set", ctypes.c_int, [_int_p, ctypes.c_int, _int_p])
    _declare(_h, "hvd_remove_process_set", ctypes.c_int, [ctypes.c_int])
    _declare(_h, "hvd_process_set_rank", ctypes.c_int, [ctypes.c_int, _int_p])
    _declare(_h, "hvd_process_set_size", ctypes.c_int, [ctypes.c_int, _int_p])
    _declare(_h, "hvd_join", ctypes.c_int, [_int_p])
    _declare(_h, "hvd_poll", ctypes.c_int, [ctypes.c_uint64, _int_p])
    _declare(_h, "hvd_wait", ctypes.c_int, [_handle_p])
    _declare(_h, "hvd_wait_on_stream", ctypes.c_int, [_handle_p, _vp])
    _declare(_h, "hvd_start_timeline", ctypes.c_int, [ctypes.c_char_p, ctypes.c_int])
    _declare(_h, "hvd_stop_timeline", ctypes.c_int, [])
    _declare(_h, "hvd_set_thread_dump", ctypes.c_int, [ctypes.c_int, ctypes.c_int])
    _declare(_h, "hvd_report_get", ctypes.c_int, [ctypes.POINTER(Report)])
    _declare(_h, "hvd_status_string", ctypes.c_char_p, [ctypes.c_int])
    _declare(_h, "hvd_last_error", ctypes.c_char_p, [])
    _declare(_h, "hvd_gpu_built", ctypes.c_int, [])
    _declare(_h, "hvd_nccl_built", ctypes.c_int, [])
    _declare(_h, "hvd_version", ctypes.c_char_p, [])
    _declare(_h, "hvd_check_consistency", ctypes.c_int,
             [ctypes.POINTER(NamedBuffer), ctypes.c_int, ctypes.c_int,
              ctypes.POINTER(ctypes.c_uint64), _int_p])
    _declare(_h, "hvd_check_consistency_every", ctypes.c_int, [_int_p])
    _declare(_h, "hvd_elastic_create", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_vp)])
    _declare(_h, "hvd_elastic_destroy", ctypes.c_int, [_vp])
    _declare(_h, "hvd_elastic_set_blob", ctypes.c_int, [_vp, ctypes.c_char_p, _vp, _size_t])
    _declare(_h, "hvd_elastic_get_blob", ctypes.c_int,
             [_vp, ctypes.c_char_p, ctypes.POINTER(_vp), _size_p])
    _declare(_h, "hvd_elastic_commit", ctypes.c_int, [_vp, _int_p])
    _declare(_h, "hvd_elastic_restore", ctypes.c_int, [_vp, ctypes.POINTER(ElasticInfo)])
    _declare(_h, "hvd_elastic_sync", ctypes.c_int, [_vp])


def last_error(status):
    """This thread's message for the call that just failed (hvd_last_error is thread-local)."""
    text = fast.hvd_last_error()
    if text:
        return text.decode("utf-8", "replace")
    return fast.hvd_status_string(status).decode()


def error_for(status, message=None, submitting=False):
    """The exception for a failed call. submitting: the call only queued work (its argument
    errors are ValueErrors); otherwise it is the operation's own status."""
    message = message if message is not None else last_error(status)
    if status == ERR_NOT_INITIALIZED:
        return ValueError(NOT_INITIALIZED_MESSAGE + " (" + message + ")")
    if status in (ERR_INVALID_ARG, ERR_DUPLICATE_NAME) and submitting:
        return HvdcValueError(message)
    if status == ERR_UNSUPPORTED:
        return NotImplementedError(message)
    return HorovodInternalError(message)


def query_int(fn):
    """The int a query of the C API (hvd_rank, hvd_size, ...) writes, or its exception."""
    out = ctypes.c_int(-1)
    status = fn(ctypes.byref(out))
    if status != OK:
        raise error_for(status)
    return out.value


def check(status, submitting=False):
    """Raises the exception for status unless it is OK."""
    if status != OK:
        raise error_for(status, submitting=submitting)
