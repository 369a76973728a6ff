"""The exception types of the bindings, named as Horovod names them.

- HorovodInternalError (a RuntimeError): a collective failed in the core: ranks disagreed about
  a tensor (the message names the tensor, what differed and on which ranks), a rank died, the
  job stalled or was shut down. Horovod raises this type from synchronize() for all of these.
- HvdcValueError: an argument the core refused on this rank alone (a bad root, a duplicate
  in-flight name, ...). It is a ValueError, as Python-side checks raise, and also a
  HorovodInternalError, as Horovod raises for what its C++ core refuses; either catches it.
"""


class HorovodInternalError(RuntimeError):
    """A collective failed inside libhvdc (mismatch across ranks, a dead rank, a stall, shutdown)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's elastic-mode signal. In libhvdc, State.commit() and State.check_host_updates()
    raise it on every rank when hvdcrun asked the job to stop (the hosts changed: one gone from
    the discovery answer, or more usable slots); hvdc.torch.elastic.run then shuts down and
    exits 0, and hvdcrun restarts the job on the hosts there are."""

    def __init__(self, skip_sync=False):
        super().__init__()
        self.skip_sync = skip_sync


class HvdcValueError(ValueError, HorovodInternalError):
    """An argument libhvdc's core refused on this rank, before anything was sent."""
