#!/usr/bin/python3
"""hvdcrun - starts a libhvdc job: builds and runs the mpirun command, like horovodrun.

    hvdcrun -np 4 -H node1:2,node2:2 ./train              any program: C, python3 train.py, ...
    hvdcrun -np 4 --hostfile hosts ./train                 lines "host slots=N"
    hvdcrun ./train                                        inside a Slurm allocation: its nodes
    hvdcrun --check-build                                  what this build of libhvdc has
    hvdcrun -np 4 --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh ./train   # elastic

What it adds to mpirun: the settings a root user and an oversubscribed node need, ranks left
unbound (--bind-to none: each rank's background thread needs a core of its own, which Open MPI's
default binding to one core takes away), libhvdc's settings from Horovod's flags, -x for every
HVD_*/HOROVOD_* variable, and checks of the hosts, slots and program before anything starts
(a bad one: a message saying what was wrong and what was expected, exit status 2).

Elastic mode (--min-np, --max-np or --host-discovery-script): restart-based, like torchrun's
elastic agent. The job runs under mpirun's default policy, so when a rank dies every rank ends;
hvdcrun then blacklists the host that failed (for a cool-down period), asks the discovery script
which hosts are up, and starts the job again on them if at least --min-np slots remain, up to
--max-restarts times. The program restores its last commit (hvd_elastic_restore, with the
directory in HVD_ELASTIC_DIR). With --scale-up, new hosts in a healthy run make hvdcrun ask the
job to stop at its next commit (the file HVD_ELASTIC_DIR/stop.request, which hvd_elastic_commit
answers), and restart it on more slots.

This file is the whole launcher: Python 3 standard library only, run by Debian's /usr/bin/python3
(the interpreter scripts/setup.sh installs), not whatever python3 is first on PATH, so that it
behaves the same in every directory and under ssh. meson writes build/hvdcrun (which uses the
build tree's libhvdc) and installs bin/hvdcrun (which uses the installed one).
"""
import argparse
import ctypes
import ctypes.util
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys

VERSION = "@VERSION@"
LIBHVDC = "@LIBHVDC@"            # the libhvdc.so this launcher belongs to (filled in by meson)
LAUNCHER_DIR = "@LAUNCHER_DIR@"  # where hvdcrun_elastic.py is (filled in by meson)
PASSED_THROUGH = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "OMP_NUM_THREADS",
                  "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


class UsageError(Exception):
    """Bad input: the message says what was wrong and what was expected; exit status 2."""


def say(msg):
    print("hvdcrun: " + msg, file=sys.stderr, flush=True)


# ---- hosts ----------------------------------------------------------------------------------

def parse_slots(text, where):
    if not re.fullmatch(r"[0-9]+", text or ""):
        raise UsageError("%s: slots '%s' is not a whole number; expected host:slots with "
                         "slots >= 1, e.g. node1:4" % (where, text))
    slots = int(text)
    if slots < 1:
        raise UsageError("%s: slots must be at least 1, got %d" % (where, slots))
    return slots


def add_host(hosts, host, slots, where):
    if not re.fullmatch(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]", host):
        raise UsageError("%s: '%s' is not a host name" % (where, host))
    if any(h == host for h, _ in hosts):
        raise UsageError("%s: host '%s' is listed twice; give each host once with all its "
                         "slots" % (where, host))
    hosts.append((host, slots))


def parse_hosts(text, where="-H"):
    """'node1:2,node2:2' (a host without :slots has 1) -> [('node1', 2), ('node2', 2)]."""
    hosts = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise UsageError("%s '%s': an empty host; expected host:slots,host:slots,..."
                             % (where, text))
        host, sep, slots = item.rpartition(":") if ":" in item else (item, "", "1")
        add_host(hosts, host, parse_slots(slots, "%s '%s'" % (where, item)), where)
    return hosts


def parse_hostfile(path):
    """Horovod's (and Open MPI's) hostfile: 'host slots=N' per line, # comments."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise UsageError("--hostfile: cannot read '%s': %s" % (path, e.strerror))
    hosts = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = "--hostfile %s:%d" % (path, number)
        m = re.fullmatch(r"(\S+)(?:\s+slots\s*=\s*(\S+))?(?:\s+max[-_]slots\s*=\s*\S+)?", line)
        if not m:
            raise UsageError("%s: '%s' is not 'host slots=N'" % (where, line))
        add_host(hosts, m.group(1), parse_slots(m.group(2) or "1", where), where)
    if not hosts:
        raise UsageError("--hostfile: '%s' lists no hosts; expected lines 'host slots=N'" % path)
    return hosts


def expand_nodelist(text):
    """Slurm's compressed host list: 'node[1-3,7],gpu-[01-02]' -> node1 node2 node3 node7
    gpu-01 gpu-02 (zero padding kept; several bracket groups multiply out)."""
    names, depth, start = [], 0, 0
    for i, c in enumerate(text + ","):
        depth += (c == "[") - (c == "]")
        if depth < 0:
            raise UsageError("SLURM_JOB_NODELIST '%s': unbalanced ']'" % text)
        if c == "," and depth == 0:
            part = text[start:i].strip()
            if not part:
                raise UsageError("SLURM_JOB_NODELIST '%s': an empty name" % text)
            names += expand_one(part, text)
            start = i + 1
    if depth != 0:
        raise UsageError("SLURM_JOB_NODELIST '%s': unbalanced '['" % text)
    return names


def expand_one(part, whole):
    m = re.match(r"([^\[]*)\[([^\]]*)\](.*)", part)
    if not m:
        return [part]
    prefix, ranges, rest = m.groups()
    out = []
    for r in ranges.split(","):
        lo, _, hi = r.partition("-")
        if not re.fullmatch(r"[0-9]+", lo) or (hi and not re.fullmatch(r"[0-9]+", hi)):
            raise UsageError("SLURM_JOB_NODELIST '%s': bad range '%s'" % (whole, r))
        hi = hi or lo
        if int(hi) < int(lo):
            raise UsageError("SLURM_JOB_NODELIST '%s': range '%s' goes down" % (whole, r))
        for n in range(int(lo), int(hi) + 1):
            out += [prefix + str(n).zfill(len(lo)) + tail for tail in expand_one(rest, whole)]
    return out


def expand_tasks_per_node(text):
    """Slurm's SLURM_TASKS_PER_NODE: '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*([0-9]+)(?:\(x([0-9]+)\))?\s*", item)
        if not m:
            raise UsageError("SLURM_TASKS_PER_NODE '%s': '%s' is not N or N(xM)" % (text, item))
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def slurm_hosts(env):
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    tasks = env.get("SLURM_TASKS_PER_NODE")
    if not nodelist:
        return None
    if not tasks:
        raise UsageError("inside a Slurm allocation (SLURM_JOB_NODELIST is set) but "
                         "SLURM_TASKS_PER_NODE is not: give -np and -H, or run inside salloc/"
                         "sbatch with --ntasks-per-node")
    names, counts = expand_nodelist(nodelist), expand_tasks_per_node(tasks)
    if len(names) != len(counts):
        raise UsageError("Slurm: SLURM_JOB_NODELIST '%s' names %d nodes but "
                         "SLURM_TASKS_PER_NODE '%s' gives %d counts" % (nodelist, len(names),
                                                                       tasks, len(counts)))
    hosts = []
    for name, n in zip(names, counts):
        if n >= 1:
            add_host(hosts, name, n, "Slurm")
    return hosts


def check_resolvable(hosts, what):
    for host, _ in hosts:
        try:
            socket.getaddrinfo(host.strip("[]"), None)
        except (socket.gaierror, UnicodeError) as e:
            raise UsageError("%s: unknown host '%s' (this machine cannot resolve it: %s); "
                             "expected a host name or address every host can reach"
                             % (what, host, getattr(e, "strerror", e)))


def is_this_machine(host):
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return all(a[4][0].startswith("127.") or a[4][0] == "::1"
                   for a in socket.getaddrinfo(host.strip("[]"), None))
    except (socket.gaierror, UnicodeError):
        return False


def hosts_text(hosts):
    return ",".join("%s:%d" % h for h in hosts)


def take_slots(hosts, np):
    """The first np slots of hosts, in order: the -H value for mpirun."""
    out, left = [], np
    for host, slots in hosts:
        if left <= 0:
            break
        out.append((host, min(slots, left)))
        left -= slots
    return out


# ---- the program and the library ----------------------------------------------------------------

def check_program(command):
    if not command:
        raise UsageError("no program to run; usage: hvdcrun [options] PROGRAM [ARGS...]")
    prog = command[0]
    if "/" in prog:
        if not os.path.exists(prog):
            raise UsageError("program '%s' does not exist (every host needs it at this path)"
                             % prog)
        if os.path.isdir(prog) or not os.access(prog, os.X_OK):
            raise UsageError("program '%s' is not an executable file" % prog)
    elif shutil.which(prog) is None:
        raise UsageError("program '%s' is not on PATH (give its path, e.g. ./%s)" % (prog, prog))


def library_candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    if not LIBHVDC.startswith("@"):
        yield LIBHVDC
    yield os.path.join(here, "libhvdc", "libhvdc.so")                 # next to build/hvdcrun
    yield os.path.join(here, "..", "build", "libhvdc", "libhvdc.so")  # launcher/ in the source
    found = ctypes.util.find_library("hvdc")
    if found:
        yield found


def build_info():
    """(path, {key: value}) from the library's hvd_build_info(), or (None, {}) if none loads."""
    for path in library_candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.hvd_build_info.restype = ctypes.c_char_p
            text = lib.hvd_build_info().decode()
        except (OSError, AttributeError):
            continue
        info = {}
        for line in text.splitlines():
            key, _, value = line.partition(": ")
            info[key] = value
        return os.path.realpath(path), info
    return None, {}


# ---- the mpirun command ---------------------------------------------------------------------------

def settings_env(args):
    """libhvdc's settings from Horovod's flags."""
    env = {}
    if args.fusion_threshold_mb is not None:
        env["HVD_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["HVD_CYCLE_TIME"] = repr(args.cycle_time_ms)
    if args.timeline_filename:
        env["HVD_TIMELINE"] = os.path.abspath(args.timeline_filename)
    if args.timeline_mark_cycles:
        env["HVD_TIMELINE_MARK_CYCLES"] = "1"
    if args.hierarchical_allreduce is not None:
        env["HVD_HIERARCHICAL_ALLREDUCE"] = "1" if args.hierarchical_allreduce else "0"
    if args.no_stall_check:
        env["HVD_STALL_CHECK_TIME"] = "0"
    if args.stall_check_warning_time_seconds is not None:
        env["HVD_STALL_CHECK_TIME"] = repr(args.stall_check_warning_time_seconds)
    if args.stall_check_shutdown_time_seconds is not None:
        env["HVD_STALL_SHUTDOWN_TIME"] = repr(args.stall_check_shutdown_time_seconds)
    if args.log_level:
        env["HVD_LOG_LEVEL"] = args.log_level.lower()
    return env


def user_sets(mpi_args, *flags):
    return any(a in flags or any(a.startswith(f + "=") for f in flags) for a in mpi_args)


def user_sets_mca(mpi_args, name):
    return any(mpi_args[i] in ("--mca", "-mca") and mpi_args[i + 1] == name
               for i in range(len(mpi_args) - 1))


def mpirun_command(args, hosts, np, env, extra_env=()):
    """(argv, env) of the mpirun run for np ranks on hosts; env gains what mpirun needs."""
    mpi_args = shlex.split(args.mpi_args or "")
    run_env = dict(env)
    shown = {}  # variables set here, shown in front of the command by --verbose
    if os.geteuid() == 0:
        shown.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    shown.update(settings_env(args))
    shown.update(extra_env)
    run_env.update(shown)
    total = sum(s for _, s in hosts)
    argv = [args.mpirun, "-np", str(np), "-H", hosts_text(hosts)]
    if not user_sets(mpi_args, "--bind-to", "-bind-to"):
        argv += ["--bind-to", "none"]   # the background thread needs a core of its own
    if not user_sets(mpi_args, "--map-by", "-map-by"):
        argv += ["--map-by", "slot"]    # ranks fill the hosts in order: 0-1 on the first, ...
    if args.oversubscribe or np > total:
        argv.append("--oversubscribe")
    # Each rank has two busy threads at times (training, and the background thread spinning in
    # MPI); where this machine cannot give each a core, waiting ranks should yield it.
    local = sum(s for h, s in take_slots(hosts, np) if is_this_machine(h))
    if (args.oversubscribe or np > total or 2 * local > (os.cpu_count() or 1)) and \
            not user_sets_mca(mpi_args, "mpi_yield_when_idle"):
        argv += ["--mca", "mpi_yield_when_idle", "1"]
    rsh = []
    if args.ssh_port:
        rsh += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        rsh += ["-i", args.ssh_identity_file]
    if rsh:
        argv += ["--mca", "plm_rsh_args", " ".join(rsh)]
    if args.network_interfaces:
        for name in ("btl_tcp_if_include", "oob_tcp_if_include"):
            argv += ["--mca", name, args.network_interfaces]
    names = sorted(k for k in run_env if k.startswith(("HVD_", "HOROVOD_")))
    names += [k for k in PASSED_THROUGH if k in run_env and k not in names]
    names += [x for x in args.x if x.split("=", 1)[0] not in names]
    for name in names:
        argv += ["-x", name]
    argv += mpi_args + args.command
    return argv, run_env, shown


def show_command(argv, shown):
    return " ".join(["%s=%s" % (k, shlex.quote(v)) for k, v in shown.items()] +
                    [shlex.quote(a) for a in argv])


# ---- options ------------------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        say("%s (see hvdcrun --help)" % message)
        sys.exit(2)


def positive_int(text):
    if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
        raise argparse.ArgumentTypeError("'%s' is not a whole number >= 1" % text)
    return int(text)


def non_negative(text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("'%s' is not a number >= 0" % text)
    return value


def log_level(text):
    if text.lower() not in ("trace", "debug", "info", "warning", "error"):
        raise argparse.ArgumentTypeError("'%s' is not one of trace, debug, info, warning, "
                                         "error" % text)
    return text.lower()


def options():
    p = Parser(prog="hvdcrun", usage="hvdcrun [options] PROGRAM [ARGS...]", allow_abbrev=False,
               description="Runs PROGRAM as a libhvdc job under mpirun (like horovodrun).",
               epilog="Examples: hvdcrun -np 4 -H node1:2,node2:2 ./train;  hvdcrun -np 2 "
                      "python3 train.py;  hvdcrun --check-build.  README.md, 'Running', has "
                      "more.")
    p.add_argument("-v", "--version", action="version", version="hvdcrun " + VERSION)
    g = p.add_argument_group("where")
    g.add_argument("-np", "--num-proc", dest="np", type=positive_int,
                   help="number of ranks (default: every slot of the hosts)")
    g.add_argument("-H", "--hosts", help="host:slots,host:slots,... (default: localhost:NP, "
                   "or the Slurm allocation's nodes)")
    g.add_argument("--hostfile", help="a file of lines 'host slots=N'")
    g.add_argument("--oversubscribe", action="store_true",
                   help="allow more ranks than slots (ranks then yield the CPU when idle)")
    g.add_argument("-p", "--ssh-port", type=positive_int, help="ssh port of the other hosts")
    g.add_argument("-i", "--ssh-identity-file", help="ssh key for the other hosts")
    g.add_argument("--network-interfaces", "--network-interface", dest="network_interfaces",
                   help="interfaces or CIDR networks the hosts reach each other on (Open MPI's "
                        "btl_tcp_if_include and oob_tcp_if_include), e.g. eth0 or 10.0.0.0/24")
    g.add_argument("--mpi-args", help="more mpirun arguments, as one quoted string")
    g.add_argument("-x", action="append", default=[], metavar="VAR[=VALUE]",
                   help="also pass this environment variable to every rank")
    g.add_argument("--mpirun", default=os.environ.get("HVDCRUN_MPIRUN", "mpirun"),
                   help="the mpirun to run (default: mpirun on PATH, or $HVDCRUN_MPIRUN)")
    g = p.add_argument_group("libhvdc settings (passed as HVD_* variables)")
    g.add_argument("--fusion-threshold-mb", type=non_negative,
                   help="HVD_FUSION_THRESHOLD in MiB (0: no fusion)")
    g.add_argument("--cycle-time-ms", type=non_negative, help="HVD_CYCLE_TIME")
    g.add_argument("--timeline-filename", help="HVD_TIMELINE: rank 0 writes a Chrome trace")
    g.add_argument("--timeline-mark-cycles", action="store_true",
                   help="HVD_TIMELINE_MARK_CYCLES=1")
    g.add_argument("--hierarchical-allreduce", action="store_const", const=True,
                   help="HVD_HIERARCHICAL_ALLREDUCE=1")
    g.add_argument("--no-hierarchical-allreduce", dest="hierarchical_allreduce",
                   action="store_const", const=False)
    g.add_argument("--autotune", action="store_true",
                   help="Horovod's autotuning (refused unless the library has it)")
    g.add_argument("--autotune-log-file", help=argparse.SUPPRESS)
    g.add_argument("--no-stall-check", action="store_true", help="HVD_STALL_CHECK_TIME=0")
    g.add_argument("--stall-check-warning-time-seconds", type=non_negative,
                   help="HVD_STALL_CHECK_TIME")
    g.add_argument("--stall-check-shutdown-time-seconds", type=non_negative,
                   help="HVD_STALL_SHUTDOWN_TIME")
    g.add_argument("--log-level", type=log_level, help="HVD_LOG_LEVEL")
    g = p.add_argument_group("elastic training (see README.md, 'Elastic training')")
    g.add_argument("--min-np", type=positive_int,
                   help="fewest ranks to run on; a failure leaving fewer ends the job "
                        "(default: -np)")
    g.add_argument("--max-np", type=positive_int, help="most ranks (default: -np)")
    g.add_argument("--host-discovery-script",
                   help="prints the hosts that are up, one 'host:slots' per line")
    g.add_argument("--slots-per-host", type=positive_int, default=1,
                   help="slots of a discovered host printed without ':slots' (default 1)")
    g.add_argument("--max-restarts", "--reset-limit", dest="max_restarts", type=int,
                   default=3, help="restarts after failures before giving up (default 3)")
    g.add_argument("--blacklist-cooldown-range", nargs=2, type=non_negative,
                   metavar=("MIN_S", "MAX_S"), default=[10.0, 300.0],
                   help="a failed host is left out for MIN_S * 2^failures + up to MIN_S "
                        "seconds, at most MAX_S (default 10 300)")
    g.add_argument("--elastic-timeout", type=non_negative, default=600.0,
                   help="seconds to wait for --min-np slots (default 600)")
    g.add_argument("--discovery-interval", type=non_negative, default=1.0,
                   help="seconds between discovery runs during a run (default 1)")
    g.add_argument("--scale-up", action="store_true",
                   help="when more slots appear, stop at the next commit and restart bigger")
    g.add_argument("--elastic-dir", help="where the program commits (HVD_ELASTIC_DIR; on a "
                   "filesystem every host shares; default: a new hvdc-elastic-* here)")
    g = p.add_argument_group("output")
    g.add_argument("--verbose", action="store_true", help="print the mpirun command(s)")
    g.add_argument("--dry-run", action="store_true", help="print the mpirun command, run nothing")
    g.add_argument("--check-build", action="store_true",
                   help="print what this build of libhvdc has, and exit")
    return p


def parse_args(argv):
    """hvdcrun's options, then the program and its arguments (which are the program's own,
    even when they look like hvdcrun's: the first word that is no option or option value
    starts the program; '--' may separate them too)."""
    p = options()
    i, command = 0, []
    while i < len(argv):
        a = argv[i]
        if a == "--":
            command = argv[i + 1:]
            break
        if not a.startswith("-") or a == "-":
            command = argv[i:]
            break
        action = p._option_string_actions.get(a.split("=", 1)[0])
        if action is None:
            p.error("unknown option %s" % a)
        takes = 0 if action.nargs == 0 else (action.nargs if isinstance(action.nargs, int) else 1)
        i += 1 + (0 if "=" in a else takes)
    args = p.parse_args(argv[:i])
    args.command = command
    return args


# ---- --check-build --------------------------------------------------------------------------------

def check_build(args):
    path, info = build_info()
    mpirun = shutil.which(args.mpirun)
    version = "not found"
    if mpirun:
        try:
            out = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
            version = out.splitlines()[0] if out else "?"
        except (OSError, subprocess.SubprocessError) as e:
            version = "cannot run: %s" % e
    print("hvdcrun %s (%s)" % (VERSION, os.path.realpath(__file__)))
    print("  mpirun:   %s (%s)" % (mpirun or args.mpirun, version))
    if path is None:
        print("  libhvdc:  not found (looked for: %s)" % ", ".join(library_candidates()))
        return 1
    print("  libhvdc:  %s (version %s)" % (path, info.get("version", "?")))

    def row(label, value):
        yes = value.startswith("yes")
        detail = value[len("yes"):].lstrip(", ") if yes else value
        print("    [%s] %-26s %s" % ("X" if yes else " ", label, detail))

    print("  Collectives:")
    row("CPU ring", info.get("cpu_ring", "no"))
    row("shared-memory all-reduce", info.get("shm_allreduce", "no"))
    row("MPI", info.get("mpi", "no"))
    row("CUDA (GPU backend)", info.get("cuda", "no"))
    row("NCCL", info.get("nccl", "no"))
    row("autotune", info.get("autotune", "no"))
    print("  Frameworks:")
    python = shutil.which("python3")
    if python is None:
        row("Python binding", "no: no python3 on PATH")
    else:
        try:
            r = subprocess.run([python, "-c", "import hvdc, sys; sys.stdout.write(hvdc.__file__)"],
                               capture_output=True, text=True, timeout=60)
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            row("Python binding", "yes, %s" % r.stdout if r.returncode == 0 else
                "no: 'import hvdc' with %s: %s" % (python, last))
        except (OSError, subprocess.SubprocessError) as e:
            row("Python binding", "no: cannot run %s: %s" % (python, e))
    print("  Variables libhvdc reads: %s" % info.get("environment", "?"))
    return 0


# ---- the job's hosts --------------------------------------------------------------------------------

def static_hosts(args):
    given = [x for x in (args.hosts and "-H", args.hostfile and "--hostfile") if x]
    if len(given) > 1:
        raise UsageError("-H and --hostfile both given; use one")
    if args.hosts:
        return parse_hosts(args.hosts), "-H"
    if args.hostfile:
        return parse_hostfile(args.hostfile), "--hostfile"
    hosts = slurm_hosts(os.environ)
    if hosts is not None:
        return hosts, "Slurm (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE)"
    if args.np is None:
        raise UsageError("how many ranks? give -np N (and -H host:slots,... for several "
                         "hosts), or run inside a Slurm allocation")
    return [("localhost", args.np)], "localhost"


def check_np(np, hosts, what, oversubscribe):
    total = sum(s for _, s in hosts)
    if np > total and not oversubscribe:
        raise UsageError("-np %d is more than the %d slots of %s (%s); give more hosts or "
                         "slots, a smaller -np, or --oversubscribe" % (np, total, what,
                                                                      hosts_text(hosts)))


def check_settings(args, info):
    if args.autotune and info.get("autotune", "no") == "no":
        raise UsageError("--autotune: this libhvdc has no autotuning (hvdcrun --check-build: "
                         "autotune: no); set --fusion-threshold-mb and --cycle-time-ms instead")
    known = set(info.get("environment", "").split())
    for name in sorted(os.environ):
        if known and name.startswith(("HVD_", "HOROVOD_")) and name not in known:
            say("warning: %s is set but this libhvdc reads no such variable (it reads: %s)"
                % (name, " ".join(sorted(known))))


def main(argv):
    args = parse_args(argv)
    if args.check_build:
        return check_build(args)
    try:
        check_program(args.command)
        _, info = build_info()
        check_settings(args, info)
        elastic = (args.min_np or args.max_np or args.host_discovery_script) is not None
        if elastic:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))
                            if LAUNCHER_DIR.startswith("@") else LAUNCHER_DIR)
            import hvdcrun_elastic
            return hvdcrun_elastic.ElasticDriver(args, sys.modules[__name__]).run()
        hosts, what = static_hosts(args)
        np = args.np or sum(s for _, s in hosts)
        check_np(np, hosts, what, args.oversubscribe)
        check_resolvable(hosts, what)
        if shutil.which(args.mpirun) is None:
            raise UsageError("'%s' not found: install Open MPI (Debian: openmpi-bin) or pass "
                             "--mpirun PATH" % args.mpirun)
    except UsageError as e:
        say(str(e))
        return 2
    cmd, env, shown = mpirun_command(args, take_slots(hosts, np) if np <= sum(
        s for _, s in hosts) else hosts, np, os.environ)
    if args.verbose or args.dry_run:
        print(show_command(cmd, shown), flush=True)
    if args.dry_run:
        return 0
    os.execvpe(cmd[0], cmd, env)  # mpirun takes over: signals and exit status are its own
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
