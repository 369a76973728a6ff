"""hvdc: Python bindings of libhvdc, a data-parallel training runtime in the spirit of Horovod.

The framework modules sit beside each other (today ``hvdc.torch``); ``hvdc.common`` is what they
share: loading libhvdc, start-up and topology, handles, errors and process sets. Negotiation,
fusion and the collectives themselves run in libhvdc's C core; Python only hands it buffers.

    import hvdc.torch as hvd      # in place of: import horovod.torch as hvd

hvdc.run (hvdc/runner.py) is horovod.run: a function run on every rank of a new job, each
rank's result returned.
"""

__version__ = "0.1.0"

from hvdc.runner import run  # noqa: E402,F401
