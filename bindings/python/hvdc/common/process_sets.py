"""Process sets, as Horovod's ProcessSet: a subset of ranks whose collectives run among
themselves, identified by an id that libhvdc gives it. The global set (id 0) holds every rank.

ProcessSet(ranks) only describes a set; add_process_set (or hvd.init(process_sets=[...]))
registers it with libhvdc on every rank, which gives it its id.
Any thread.
"""
import ctypes

from hvdc.common import library as L


class ProcessSet:
    """A set of ranks. `process_set_id` is None until the set is registered."""

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        self.mpi_comm = None
        if hasattr(ranks_or_comm, "Get_group"):  # an mpi4py communicator
            self.mpi_comm = ranks_or_comm
            self.ranks = None
        else:
            try:
                ranks = [int(r) for r in ranks_or_comm]
            except (TypeError, ValueError):
                raise ValueError("ProcessSet: expected a list of ranks or an mpi4py "
                                 f"communicator, got {ranks_or_comm!r}") from None
            if len(set(ranks)) != len(ranks):
                raise ValueError(f"ProcessSet: ranks {ranks} contain duplicates")
            self.ranks = sorted(ranks)

    def _register(self, process_set_id, ranks):
        self.process_set_id = process_set_id
        self.ranks = list(ranks)

    def _invalidate(self):
        self.process_set_id = None

    def _require(self):
        if self.process_set_id is None:
            raise ValueError(f"{self} is not registered: call hvd.init() (global set) or "
                             "hvd.add_process_set(...) on every rank first")

    def size(self):
        """Number of ranks in the set; None when the set is not registered (as Horovod)."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set; None when not registered; -1 when not in it."""
        if self.process_set_id is None:
            return None
        me = L.query_int(L.fast.hvd_rank)
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """True if this process belongs to the set; None when not registered."""
        if self.process_set_id is None:
            return None
        return L.query_int(L.fast.hvd_rank) in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
_registry = {}  # id -> ProcessSet, for the sets registered with libhvdc


def _ranks_of_comm(comm):
    """The world ranks of an mpi4py communicator's processes."""
    from mpi4py import MPI
    group = comm.Get_group()
    return list(MPI.Group.Translate_ranks(group, list(range(group.Get_size())),
                                          MPI.COMM_WORLD.Get_group()))


def add_process_set(process_set):
    """Registers a set of ranks (a ProcessSet, a list of ranks or an mpi4py communicator) with
    libhvdc; collective over every rank, members or not, in the same order everywhere. Returns
    the registered ProcessSet; its operations run on their own communicators and thread."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set} is already registered")
    ranks = process_set.ranks if process_set.mpi_comm is None else _ranks_of_comm(process_set.mpi_comm)
    if not L.fast.hvd_is_initialized():
        raise ValueError(L.NOT_INITIALIZED_MESSAGE)
    arr = (ctypes.c_int * max(1, len(ranks)))(*ranks)
    out = ctypes.c_int(-1)
    L.check(L.lib.hvd_add_process_set(arr, len(ranks), ctypes.byref(out)), submitting=True)
    process_set._register(out.value, sorted(ranks))
    _registry[out.value] = process_set
    return process_set


def remove_process_set(process_set):
    """Unregisters a set (collective over every rank). Returns True if it was registered and is
    now removed, False if it was not registered. Refused (ValueError, on every rank) while any
    rank has an operation of the set in flight."""
    if process_set is global_process_set or process_set.process_set_id == 0:
        raise ValueError("the global process set cannot be removed")
    if process_set.process_set_id is None:
        return False
    L.check(L.lib.hvd_remove_process_set(process_set.process_set_id), submitting=True)
    _registry.pop(process_set.process_set_id, None)
    process_set._invalidate()
    return True
