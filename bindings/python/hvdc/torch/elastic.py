"""hvdc.torch.elastic: Horovod's elastic API (`hvd.elastic.run`, `hvd.elastic.TorchState`) on
libhvdc's restart-based elastic training (hvdc.h, "Elastic training"; docs/elastic.md).

Horovod's elastic mode keeps the processes and re-forms the ring in place; libhvdc, like
torchrun, restarts them: when a rank dies every rank fails, `hvdcrun --elastic` asks its host
discovery which hosts are up and starts the script again there, and the script restores its
last commit. So the same script works with both:

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                step()
                if state.batch % 10 == 0:
                    state.commit()
            state.batch = 0

    train(state)

What differs from Horovod: `run` restores the last commit (or gives every rank rank 0's state)
once when it starts, instead of after each failure in the same process; a failure ends the
process (HorovodInternalError), and the restart resumes from the last commit; commit() writes
to disk on rank 0 ($HVD_ELASTIC_DIR, which `hvdcrun --elastic` sets: a directory every host
shares), so it costs a file write, not a memory copy. Without $HVD_ELASTIC_DIR (not started by
`hvdcrun --elastic`) commits go to a temporary directory that lives as long as the process.
The model's and optimizer's state_dict() and the extra attributes travel as one blob, pickled
by torch.save, so they must be picklable. One thread at a time per state.
"""
import atexit
import ctypes
import functools
import io
import os
import shutil
import sys
import tempfile

import torch

import hvdc.common.library as L
from hvdc.common.basics import rank, shutdown, size
from hvdc.common.exceptions import HostsUpdatedInterrupt

_BLOB = b"hvdc.torch.state"


def _temporary_dir():
    path = tempfile.mkdtemp(prefix="hvdc-elastic-")
    atexit.register(shutil.rmtree, path, True)
    return path


class State:
    """Horovod's elastic State: what commit() saves, restore() brings back and sync() gives
    every rank from rank 0. Subclasses say what their state is (_save, _load)."""

    def __init__(self, **kwargs):
        self._callbacks = []
        self._extra = list(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)
        directory = None if os.environ.get("HVD_ELASTIC_DIR") else _temporary_dir()
        handle = ctypes.c_void_p(None)
        L.check(L.fast.hvd_elastic_create(directory.encode() if directory else None,
                                          ctypes.byref(handle)))
        self._handle = handle
        self.committed_size = None  # ranks of the run whose commit restore() loaded

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            L.fast.hvd_elastic_destroy(handle)
            self._handle = None

    # ---- Horovod's State API ----

    def register_reset_callbacks(self, callbacks):
        """Functions called after restore() brought back a commit written by another number
        of ranks (Horovod calls them after the world changed), e.g. to rescale the learning
        rate."""
        self._callbacks.extend(callbacks)

    def commit(self):
        """Saves the state: every rank calls it at the same point; rank 0's state is written.
        Raises HostsUpdatedInterrupt on every rank when hvdcrun asked the job to stop here to
        restart it on more hosts (run() handles it)."""
        self._put()
        stop = ctypes.c_int(0)
        L.check(L.lib.hvd_elastic_commit(self._handle, ctypes.byref(stop)))
        if stop.value:
            raise HostsUpdatedInterrupt(skip_sync=False)

    def check_host_updates(self):
        """Horovod polls for new hosts here; libhvdc learns of them at the next commit."""

    def restore(self):
        """Loads the last commit on every rank, or, if there is none, gives every rank rank 0's
        current state. Returns True if a commit was loaded."""
        self._put()  # rank 0's current state, should there be no commit
        info = L.ElasticInfo()
        L.check(L.lib.hvd_elastic_restore(self._handle, ctypes.byref(info)))
        self._get()
        self.committed_size = info.committed_size if info.restored else None
        if info.restored and info.committed_size != size():
            for callback in self._callbacks:
                callback()
        return bool(info.restored)

    def sync(self):
        """Gives every rank rank 0's current state."""
        self._put()
        L.check(L.lib.hvd_elastic_sync(self._handle))
        self._get()

    # ---- the blob ----

    def _put(self):
        if rank() != 0:  # only rank 0's blob is committed or given to the others (hvdc.h)
            return
        buf = io.BytesIO()
        torch.save(self._save(), buf)
        data = buf.getvalue()
        L.check(L.fast.hvd_elastic_set_blob(self._handle, _BLOB, data, len(data)))

    def _get(self):
        ptr, n = ctypes.c_void_p(None), ctypes.c_size_t(0)
        L.check(L.fast.hvd_elastic_get_blob(self._handle, _BLOB, ctypes.byref(ptr), ctypes.byref(n)))
        data = ctypes.string_at(ptr.value, n.value) if n.value else b""
        try:
            saved = torch.load(io.BytesIO(data), weights_only=False)
        except TypeError:  # torch before 1.13 has no weights_only
            saved = torch.load(io.BytesIO(data))
        self._load(saved)

    def _save(self):
        return {"extra": {name: getattr(self, name) for name in self._extra}}

    def _load(self, saved):
        for name, value in saved["extra"].items():
            setattr(self, name, value)


class ObjectState(State):
    """Horovod's ObjectState: picklable attributes only (e.g. epoch, batch)."""


class TorchState(State):
    """Horovod's TorchState(model=None, optimizer=None, **kwargs): the model's and optimizer's
    state_dict(), plus the keyword attributes (e.g. epoch=0, batch=0)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        super().__init__(**kwargs)

    def _save(self):
        saved = super()._save()
        if self.model is not None:
            saved["model"] = self.model.state_dict()
        if self.optimizer is not None:
            saved["optimizer"] = self.optimizer.state_dict()
        return saved

    def _load(self, saved):
        super()._load(saved)
        if self.model is not None and "model" in saved:
            self.model.load_state_dict(saved["model"])
        if self.optimizer is not None and "optimizer" in saved:
            self.optimizer.load_state_dict(saved["optimizer"])


def run(func):
    """Horovod's decorator: func(state, ...) runs from the last commit. On a restart by
    `hvdcrun --elastic` that is where the previous run committed; a failure raises out (the
    process ends, hvdcrun restarts it); a stop asked for at a commit (HostsUpdatedInterrupt)
    shuts down and exits 0 so hvdcrun can restart the job on more hosts."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.restore()
        try:
            return func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            shutdown()
            sys.exit(0)
    return wrapper
