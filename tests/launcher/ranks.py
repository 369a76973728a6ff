#!/usr/bin/python3
"""ranks.py - any program runs under hvdcrun, not only libhvdc ones: prints
"rank R of N on HOST (local rank L)" from Open MPI's environment, no MPI library needed.
Used by tests/launcher/test_hvdcrun.py (one host) and tests/two_hosts.sh (two).
One write(2) for the whole line, so mpirun never interleaves two ranks' lines."""
import os
import socket

env = os.environ
line = "rank %s of %s on %s (local rank %s)\n" % (env.get("OMPI_COMM_WORLD_RANK", "?"),
                                                 env.get("OMPI_COMM_WORLD_SIZE", "?"),
                                                 socket.gethostname(),
                                                 env.get("OMPI_COMM_WORLD_LOCAL_RANK", "?"))
os.write(1, line.encode())
