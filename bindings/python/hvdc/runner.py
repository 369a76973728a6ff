"""hvdc.run: Horovod's horovod.run (horovod/runner/__init__.py): runs a Python function on every
rank of a new job started by hvdcrun, and returns each rank's result, in rank order.

    def train(lr):
        import hvdc.torch as hvd
        hvd.init()
        ...
        return hvd.rank(), loss

    results = hvdc.run(train, args=(0.1,), np=4, hosts="node1:2,node2:2")

How it travels, with no shared filesystem, as Horovod's does: the function and its arguments
are pickled (cloudpickle when installed, as Horovod does, so functions of __main__, lambdas
and closures go too; plain pickle otherwise) into HVDC_RUN_FUNC, which hvdcrun passes to every
rank with -x; each rank runs `python -m hvdc.run_task`, which calls the function and sends its
pickled result back over TCP to this process, which listens on every IPv4 address it has
(HVDC_RUN_ADDRS; the ranks try them in turn) and checks a per-job secret. (Not through the
job's output: mpirun forwards a rank's stdout in pieces that may split a line.) A rank that
raises makes the job fail: run raises RuntimeError with hvdcrun's exit status, as Horovod does.
Main thread (results are taken by a second thread).
"""
import base64
import os
import pickle
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import threading
import warnings

try:
    import cloudpickle as _pickler
except ImportError:
    _pickler = pickle

_CONNECT_S = 10  # a rank's wait for each of the addresses


def _local_ipv4():
    """This host's IPv4 addresses, the loopback last (Linux: SIOCGIFADDR per interface)."""
    import fcntl
    found = []
    for _, name in socket.if_nameindex():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            found.append(socket.inet_ntoa(packed[20:24]))
        except OSError:
            pass
        finally:
            s.close()
    return sorted(set(found) or {"127.0.0.1"}, key=lambda a: a.startswith("127."))


class _Results:
    """A listening socket where the ranks send their results: rank -> pickled bytes."""

    def __init__(self):
        self.secret = secrets.token_hex(16)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.by_rank = {}
        self.arrived = threading.Condition()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def addresses(self):
        return ",".join("%s:%d" % (a, self.port) for a in _local_ipv4())

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                data = b""
                while True:
                    part = conn.recv(1 << 20)
                    if not part:
                        break
                    data += part
            head, _, body = data.partition(b"\n")
            words = head.decode(errors="replace").split()
            if len(words) == 2 and words[0] == self.secret and words[1].isdigit():
                with self.arrived:
                    self.by_rank[int(words[1])] = body
                    self.arrived.notify_all()

    def wait_for(self, n, timeout=10.0):
        """Every rank sent its result before it exited; the last may still be on its way in."""
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.by_rank) >= n, timeout)

    def close(self):
        self.sock.close()


def _hvdcrun():
    """The launcher: $HVDCRUN, hvdcrun on PATH, or the source tree's build/hvdcrun."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("HVDCRUN"), shutil.which("hvdcrun"),
                  os.path.normpath(os.path.join(here, "..", "..", "..", "build", "hvdcrun"))]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise RuntimeError("hvdc.run: no hvdcrun found (set $HVDCRUN, put hvdcrun on PATH, or "
                       "build libhvdc: scripts/setup.sh)")


def _pickled(func, args, kwargs):
    if _pickler is pickle and getattr(func, "__module__", None) == "__main__":
        raise ValueError("hvdc.run: %s is defined in __main__, which the ranks cannot import; "
                         "install cloudpickle (Debian: python3-cloudpickle; pip install "
                         "cloudpickle), as Horovod requires, or move it into a module"
                         % getattr(func, "__name__", func))
    try:
        return base64.b64encode(_pickler.dumps((func, tuple(args), kwargs))).decode()
    except Exception as e:  # noqa: BLE001 - said with what to do about it
        raise ValueError("hvdc.run: the function and its arguments must pickle: %s%s"
                         % (e, "" if _pickler is not pickle else
                            " (functions of __main__ and lambdas need cloudpickle: Debian "
                            "python3-cloudpickle, or pip install cloudpickle)"))


def _launcher_args(np, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                   disable_cache, output_filename, verbose, use_gloo, use_mpi, mpi_args,
                   network_interface, elastic):
    argv = ["-np", str(np)]
    for flag, value in (("-H", hosts), ("--hostfile", hostfile),
                        ("--start-timeout", start_timeout), ("-p", ssh_port),
                        ("-i", ssh_identity_file), ("--output-filename", output_filename),
                        ("--mpi-args", mpi_args), ("--network-interfaces", network_interface)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, value in (("--disable-cache", disable_cache), ("--verbose", verbose),
                        ("--gloo", use_gloo), ("--mpi", use_mpi)):
        if value:
            argv.append(flag)
    for flag, value in elastic:
        if value is not None:
            argv += [flag] + [str(v) for v in (value if isinstance(value, (list, tuple))
                                               else [value])]
    return argv


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None,
        output_filename=None, verbose=None, use_gloo=None, use_mpi=None, mpi_args=None,
        network_interface=None, executable=None, np=None, min_np=None, max_np=None):
    """Horovod's run: func(*args, **kwargs) on num_proc ranks; returns the list of their
    results, indexed by rank. The arguments are horovodrun's flags (np, min_np and max_np are
    Horovod's deprecated names for num_proc, min_num_proc and max_num_proc)."""
    if np is not None:
        if num_proc == 1:
            num_proc = np
        warnings.warn("np is deprecated, use num_proc instead", DeprecationWarning)
    if min_np is not None:
        min_num_proc = min_num_proc if min_num_proc is not None else min_np
        warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning)
    if max_np is not None:
        max_num_proc = max_num_proc if max_num_proc is not None else max_np
        warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning)
    if hosts is not None and hostfile is not None:
        raise ValueError("Argument hosts and hostfile only allow one provided.")
    if use_gloo and use_mpi:
        raise ValueError("Argument use_gloo and use_mpi only allow one set True.")
    elastic = (("--min-np", min_num_proc), ("--max-np", max_num_proc),
               ("--slots-per-host", slots), ("--reset-limit", reset_limit),
               ("--blacklist-cooldown-range", cooldown_range))
    argv = [_hvdcrun()] + _launcher_args(num_proc, hosts, hostfile, start_timeout, ssh_port,
                                         ssh_identity_file, disable_cache, output_filename,
                                         verbose, use_gloo, use_mpi, None,
                                         network_interface, elastic)
    # mpirun tags each line with its rank, whole: the results' lines stay apart from the rest
    argv += ["-x", "HVDC_RUN_FUNC", "-x", "HVDC_RUN_ADDRS", "-x", "PYTHONPATH",
             executable or sys.executable, "-m", "hvdc.run_task"]
    results = _Results()
    env = dict(os.environ, HVDC_RUN_FUNC=_pickled(func, args, kwargs or {}),
               HVDC_RUN_ADDRS="%s@%s" % (results.secret, results.addresses()))
    env.setdefault("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    try:
        code = subprocess.run(argv, env=env).returncode
        results.wait_for(num_proc if code == 0 else 0)
    finally:
        results.close()
    if code != 0:
        raise RuntimeError("hvdcrun failed with exit code %d" % code)
    missing = [r for r in range(num_proc) if r not in results.by_rank]
    if missing:
        raise RuntimeError("hvdc.run: ranks %s sent no result" % missing)
    return [pickle.loads(results.by_rank[r]) for r in range(num_proc)]


def task():
    """A rank (hvdc/run_task.py): call the function from HVDC_RUN_FUNC, send its result back."""
    func, args, kwargs = pickle.loads(base64.b64decode(os.environ["HVDC_RUN_FUNC"]))
    result = _pickler.dumps(func(*args, **kwargs))
    secret, _, addresses = os.environ["HVDC_RUN_ADDRS"].partition("@")
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    tried = []
    for address in addresses.split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=_CONNECT_S) as conn:
                conn.sendall(("%s %s\n" % (secret, rank)).encode() + result)
            return
        except OSError as e:
            tried.append("%s (%s)" % (address, e))
    raise RuntimeError("hvdc.run: rank %s could not send its result to the process that "
                       "started the job: %s" % (rank, "; ".join(tried)))
