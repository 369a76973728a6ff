"""Process sets, as Horovod's ProcessSet: a subset of ranks whose collectives run among
themselves, identified by an id that libhvdc gives it. The global set (id 0) holds every rank.

ProcessSet(ranks) only describes a set; add_process_set (or hvd.init(process_sets=[...]))
registers it with libhvdc on every rank, which gives it its id.
Any thread.
"""


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
        from hvdc.common.basics import rank
        me = rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """True if this process belongs to the set; None when not registered."""
        if self.process_set_id is None:
            return None
        from hvdc.common.basics import rank
        return rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
_registry = {}  # id -> ProcessSet, for the sets registered with libhvdc


def add_process_set(process_set):
    """Registers a set of ranks with libhvdc (collective over every rank, in the same order
    everywhere); returns the registered ProcessSet."""
    raise NotImplementedError("process sets other than the global one need libhvdc's process "
                              "set support, which this build does not have yet")


def remove_process_set(process_set):
    """Unregisters a set (collective). Returns True if it was registered."""
    raise NotImplementedError("process sets other than the global one need libhvdc's process "
                              "set support, which this build does not have yet")
