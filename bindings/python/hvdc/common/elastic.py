"""hvdc.common.elastic: Horovod's elastic State contract (horovod/common/elastic.py) over
libhvdc's restart-based elastic training (hvdc.h, "Elastic training"; docs/elastic.md).

Horovod keeps the processes when a rank fails or hosts change, rolls the state back to its
last commit() in memory and re-forms the ring; libhvdc, like torchrun, restarts the processes:
hvdcrun starts the job again on the hosts that are up, and the script goes on from its last
commit, which commit() also wrote to $HVD_ELASTIC_DIR. The contract a State subclass keeps is
Horovod's, method for method:

    save()      copy the live values aside (what a commit keeps)
    restore()   put the copies back (undo what followed the last commit)
    sync()      give every rank rank 0's values
    reset()     called after a reset event, before sync(); on_reset() calls it, then the
                callbacks of register_reset_callbacks()
    commit()    save(), write the saved copies to disk (rank 0), check_host_updates()
    check_host_updates()   raise HostsUpdatedInterrupt on every rank when the hosts changed

What survives a restart is what save() set aside: every attribute of the state object when it
is written (the saved copies included; a subclass's own `_saved_...` fields too), except the
live objects the handlers of a TorchState manage and attributes that cannot be pickled (named
once). A restarted run's `run` (run_fn) loads that, calls restore(), then, since a restart is
Horovod's reset event, on_reset(), then sync(), then the training function.

Host changes: hvdcrun's discovery notices a host gone from its answer, or more usable slots,
and creates $HVD_ELASTIC_DIR/stop.request (docs/elastic.md); the next commit() or
check_host_updates() takes it on every rank, writes a commit of the current values and raises
HostsUpdatedInterrupt, whereupon run() shuts down and exits 0 and hvdcrun restarts the job on
the new hosts, losing nothing.
One thread at a time per state.
"""
import atexit
import ctypes
import functools
import io
import os
import pickle
import queue
import shutil
import sys
import tempfile
import warnings

import hvdc.common.library as L
from hvdc.common.basics import rank, shutdown
from hvdc.common.exceptions import HostsUpdatedInterrupt

_BLOB = b"hvdc.elastic.state"
_STOP_REQUEST = "stop.request"  # hvdcrun's request (libhvdc/src/train/elastic.c takes it)


def _temporary_dir():
    path = tempfile.mkdtemp(prefix="hvdc-elastic-")
    atexit.register(shutil.rmtree, path, True)
    return path


class _Commits:
    """The state's copy on disk: libhvdc's hvd_elastic handle with one blob, rank 0's bytes."""

    def __init__(self):
        self.dir = os.environ.get("HVD_ELASTIC_DIR") or _temporary_dir()
        handle = ctypes.c_void_p(None)
        L.check(L.fast.hvd_elastic_create(self.dir.encode(), ctypes.byref(handle)))
        self.handle = handle

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle is not None and handle.value:
            L.fast.hvd_elastic_destroy(handle)
            self.handle = None

    def _set(self, data):
        L.check(L.fast.hvd_elastic_set_blob(self.handle, _BLOB, data, len(data)))

    def write(self, data):
        """Collective: rank 0 writes data (the others pass b""). True when hvdcrun asked the job
        to stop at this commit (on every rank)."""
        self._set(data if rank() == 0 else b"")
        stop = ctypes.c_int(0)
        L.check(L.lib.hvd_elastic_commit(self.handle, ctypes.byref(stop)))
        return bool(stop.value)

    def read(self):
        """Collective: (bytes of the last commit, or None if there is none; ranks that wrote it)."""
        self._set(b"")
        info = L.ElasticInfo()
        L.check(L.lib.hvd_elastic_restore(self.handle, ctypes.byref(info)))
        if not info.restored:
            return None, None
        ptr, n = ctypes.c_void_p(None), ctypes.c_size_t(0)
        L.check(L.fast.hvd_elastic_get_blob(self.handle, _BLOB, ctypes.byref(ptr), ctypes.byref(n)))
        return (ctypes.string_at(ptr.value, n.value) if n.value else b""), info.committed_size

    def stop_requested(self):
        """Rank 0's view: has hvdcrun asked the job to stop (hosts changed)?"""
        return os.path.exists(os.path.join(self.dir, _STOP_REQUEST))


def restarted():
    """This process is a restart of the job by hvdcrun (after a failure or a host change)."""
    try:
        return int(os.environ.get("HVD_ELASTIC_RESTART", "0")) > 0
    except ValueError:
        return False


class State(object):
    """Horovod's State: tracks in-memory state across workers (see the module's comment).

    Args:
        bcast_object: broadcasts a picklable object from rank 0 to every rank.
        get_rank: returns this worker's rank.
    """

    # the state's machinery: never written into a commit
    _RUNTIME = ("_bcast_object", "_rank", "_host_messages", "_last_updated_timestamp",
                "_reset_callbacks", "_commits", "_unpicklable_said", "committed_size")

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []
        self._commits = _Commits()
        self._unpicklable_said = set()
        self.committed_size = None  # ranks of the run whose commit resume() loaded

    def register_reset_callbacks(self, callbacks):
        """Functions called after a reset event (the job restarted on another set of workers),
        e.g. to rescale the learning rate to the new hvd.size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's notification hook, kept for code that calls it; hvdcrun's host updates
        arrive through $HVD_ELASTIC_DIR instead (check_host_updates)."""
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state (save()), writes it where a restarted job finds it (rank 0 writes;
        every rank waits), then checks for host updates. Raises HostsUpdatedInterrupt on every
        rank when hvdcrun asked the job to stop here."""
        self.save()
        if self._commits.write(self._snapshot()):
            raise HostsUpdatedInterrupt(skip_sync=False)
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when hosts were added or removed since the
        last check (hvdcrun's stop request), after committing the current values: the job
        restarts on the new hosts from exactly here. Costs one small broadcast when nothing
        changed."""
        requested = bool(self._rank() == 0 and (self._commits.stop_requested() or
                                                 not self._host_messages.empty()))
        if not self._bcast_object(requested):
            return
        self._host_messages = queue.Queue()
        self.save()
        self._commits.write(self._snapshot())
        raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        """Saves state to host memory."""
        raise NotImplementedError()

    def restore(self):
        """Restores the last committed state, undoing any uncommitted modifications."""
        raise NotImplementedError()

    def sync(self):
        """Synchronizes state across workers."""
        raise NotImplementedError()

    def reset(self):
        """Resets objects and variables following a reset event (before synchronization)."""

    # ---- what a restart finds (hvdc's) ----

    def _persisted(self):
        """{name: value} of what a commit writes: every attribute but the machinery."""
        return {k: v for k, v in vars(self).items() if k not in self._RUNTIME}

    def _load_persisted(self, values):
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def _snapshot(self):
        """The commit's bytes on rank 0 (b"" elsewhere): the persisted attributes, those that
        pickle (the others are named once and left out)."""
        if rank() != 0:
            return b""
        keep = {}
        for k, v in self._persisted().items():
            try:
                pickle.dumps(v)
            except Exception as e:  # noqa: BLE001 - any pickling failure leaves it out
                if k not in self._unpicklable_said:
                    self._unpicklable_said.add(k)
                    warnings.warn("hvdc elastic: %s.%s cannot be pickled (%s): a restart will "
                                  "not find it" % (type(self).__name__, k, e))
                continue
            keep[k] = v
        return _dump(keep)

    def resume(self):
        """hvdc's (restart-based) start: loads the last commit on every rank, if there is one,
        and restore()s it. Returns True if a commit was loaded. run() calls it."""
        data, committed = self._commits.read()
        if data is None:
            return False
        self._load_persisted(_load(data))
        self.committed_size = committed
        self.restore()
        return True


def _dump(obj):
    try:
        import torch
    except ImportError:
        return pickle.dumps(obj)
    buf = io.BytesIO()
    torch.save(obj, buf)  # tensors, on their devices, as torch pickles them
    return buf.getvalue()


def _load(data):
    try:
        import torch
    except ImportError:
        return pickle.loads(data)
    try:
        return torch.load(io.BytesIO(data), weights_only=False)
    except TypeError:  # torch before 1.13 has no weights_only
        return torch.load(io.BytesIO(data))


class ObjectState(State):
    """Horovod's ObjectState: simple Python objects, each a keyword argument, exposed as
    attributes; save() copies them, sync() gives every rank rank 0's saved values."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super(ObjectState, self).__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        new_state = {}
        for attr in self._saved_state.keys():
            new_state[attr] = getattr(self, attr)
        self._saved_state = new_state

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def run_fn(func, reset):
    """Horovod's run_fn. Restart-based: the decorated function starts from the last commit
    (resume(); on a restart, on_reset() as after Horovod's reset event), then sync(); a
    failure raises out of the process, which hvdcrun restarts; a stop asked for at a commit
    or host check (HostsUpdatedInterrupt) shuts down and exits 0, so hvdcrun restarts the job
    on the new hosts. reset is Horovod's in-process reset, which a restart makes unneeded."""
    del reset

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.resume()
        if restarted():
            state.on_reset()
        state.sync()
        try:
            return func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            shutdown()
            sys.exit(0)
    return wrapper
