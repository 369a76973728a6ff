"""Seeing where a job is: HVD_REPORT's figures as a dict, and the thread dump that lets rank 0's
stall verdict and the SIGUSR1 dump show where every Python thread is.

The thread dump is faulthandler's: libhvdc raises THREAD_DUMP_SIGNAL on a thread of its own and
reads what faulthandler wrote, every Python thread's stack, collected without the GIL, so a rank
stuck in C code, or holding the GIL in a loop, still answers.
Any thread.
"""
import ctypes
import faulthandler
import signal
import tempfile

from hvdc.common import library as L

# A real-time signal nothing else here uses: libhvdc raises it on its own thread only.
THREAD_DUMP_SIGNAL = signal.SIGRTMIN + 6 if hasattr(signal, "SIGRTMIN") else None
_dump_file = None


def register_thread_dump():
    """Lets libhvdc show every Python thread's stack (once per process; best effort)."""
    global _dump_file
    if _dump_file is not None or THREAD_DUMP_SIGNAL is None:
        return
    try:
        f = tempfile.TemporaryFile()
        faulthandler.register(THREAD_DUMP_SIGNAL, file=f, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        return  # no thread dump: the verdict still names the last submission
    _dump_file = f
    L.lib.hvd_set_thread_dump(int(THREAD_DUMP_SIGNAL), f.fileno())


def report():
    """The figures of HVD_REPORT's last period, as rank 0 printed them, for TensorBoard or W&B:
    {'period_s', 'steps_per_s', 'rounds_per_s', 'wait_ms', 'last_rank', 'last_host',
    'last_share', 'last_lateness_ms', 'bytes', 'busbw_gbs', 'tensors', 'ops'}. Rank 0 measures
    them (HVD_REPORT=<seconds>); elsewhere, and before the first period ends, an empty dict."""
    r = L.Report()
    L.check(L.fast.hvd_report_get(ctypes.byref(r)))
    if r.period_s <= 0:
        return {}
    out = {name: getattr(r, name) for name, _ in L.Report._fields_}
    out["last_host"] = r.last_host.decode("utf-8", "replace")
    return out

