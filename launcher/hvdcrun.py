#!/usr/bin/python3
"""hvdcrun - starts a libhvdc job: builds and runs the mpirun command, like horovodrun.

    hvdcrun -np 4 -H node1:2,node2:2 ./train              any program: C, python3 train.py, ...
    hvdcrun -np 4 --hostfile hosts ./train                 lines "host slots=N"
    hvdcrun ./train                                        inside a Slurm allocation: its nodes
    hvdcrun --check-build                                  what this build of libhvdc has
    hvdcrun --check -np 4 -H node1:2,node2:2 [./train]     check the hosts first (one table)
    hvdcrun -np 4 --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh ./train   # elastic

What it adds to mpirun (hvdcrun_mpirun.py): the settings a root user and an oversubscribed
node need, ranks left unbound (--bind-to none: each rank's background thread needs a core of
its own, which Open MPI's default binding to one core takes away), libhvdc's settings from
Horovod's flags, -x for every HVD_*/HOROVOD_*/NCCL_* variable, and checks of the hosts
(hvdcrun_hosts.py), slots and program before anything starts (a bad one: a message saying what
was wrong and what was expected, exit status 2). A plain run then runs mpirun as its child,
with the exit status and the terminal mpirun's own, and ends the job when libhvdc names a lost
host and mpirun does not (hvdcrun_supervise.py).

Elastic mode (--min-np, --max-np or --host-discovery-script; hvdcrun_elastic.py): restart-based,
like torchrun's elastic agent: when a rank fails the job ends, and hvdcrun starts it again on
the hosts its discovery script reports, where the program restores its last commit
(hvd_elastic_restore, in HVD_ELASTIC_DIR).

Python 3 standard library only, run by Debian's /usr/bin/python3 (the interpreter
scripts/setup.sh installs), not whatever python3 is first on PATH, so that it behaves the same
in every directory and under ssh. meson writes build/hvdcrun (which uses the build tree's
libhvdc and the modules in launcher/) and installs bin/hvdcrun (the installed libhvdc, and the
modules in share/hvdc/launcher); pip install . installs it in the environment's bin/, run by the
environment's Python, which finds the modules and libhvdc inside the hvdc package. Runs in one
process: the main thread, and threads that echo mpirun's output.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys

VERSION = "@VERSION@"
LIBHVDC = "@LIBHVDC@"            # the libhvdc.so this launcher belongs to (filled in by meson)
LIBHVDC_REL = "@LIBHVDC_REL@"    # the same, relative to this file once installed
LAUNCHER_DIR = "@LAUNCHER_DIR@"  # where the hvdcrun_*.py modules are (filled in by meson)
LAUNCHER_DIR_REL = "@LAUNCHER_DIR_REL@"
HERE = os.path.dirname(os.path.abspath(__file__))


def module_dir():
    """The hvdcrun_*.py modules: where meson put them, in the hvdc package of this Python (pip
    install .), else beside this file (the source)."""
    for d in (LAUNCHER_DIR, LAUNCHER_DIR_REL and os.path.join(HERE, LAUNCHER_DIR_REL),
              *package_dirs("_launcher")):
        if d and "@" not in d and os.path.isfile(os.path.join(d, "hvdcrun_hosts.py")):
            return d
    return HERE


def package_dirs(sub):
    """sub inside the hvdc package this Python would import, found without importing it."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("hvdc")
    except (ImportError, ValueError):
        return []
    return [os.path.join(d, sub) for d in (spec.submodule_search_locations or [])] if spec else []


sys.dont_write_bytecode = True  # no __pycache__ in the source tree or a read-only install
sys.path.insert(0, module_dir())
import hvdcrun_horovod as horovod  # noqa: E402  (after the path is set)
import hvdcrun_hosts as hosts    # noqa: E402
import hvdcrun_mpirun as mpirun  # noqa: E402
import hvdcrun_network as network  # noqa: E402
from hvdcrun_hosts import UsageError, say  # noqa: E402


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


def options():
    """hvdcrun's options: every flag of horovodrun 0.28.1 (its own names and aliases, see
    hvdcrun_horovod.py), and hvdcrun's own."""
    p = Parser(prog="hvdcrun", usage="hvdcrun [options] PROGRAM [ARGS...]", allow_abbrev=False,
               description="Runs PROGRAM as a libhvdc job under mpirun (like horovodrun).",
               epilog="Examples: hvdcrun -np 4 -H node1:2,node2:2 ./train;  hvdcrun -np 2 "
                      "python3 train.py;  hvdcrun --check-build.  docs/running.md has "
                      "more.")
    p.add_argument("-v", "--version", action="version", version="hvdcrun " + VERSION)
    g = p.add_argument_group("where")
    g.add_argument("-np", "--num-proc", dest="np", type=positive_int,
                   help="number of ranks (default: every slot of the hosts)")
    g.add_argument("-H", "--hosts", help="host:slots,host:slots,... (default: localhost:NP, "
                   "or the Slurm allocation's nodes)")
    g.add_argument("-hostfile", "--hostfile", dest="hostfile",
                   help="a file of lines 'host slots=N'")
    g.add_argument("--oversubscribe", action="store_true",
                   help="allow more ranks than slots (ranks then yield the CPU when idle)")
    g.add_argument("-p", "--ssh-port", type=positive_int, help="ssh port of the other hosts")
    g.add_argument("-i", "--ssh-identity-file", help="ssh key for the other hosts")
    g.add_argument("--network-interfaces", "--network-interface", dest="network_interfaces",
                   action=horovod.Interfaces,
                   help="interfaces or CIDR networks the hosts reach each other on (Open MPI's "
                        "btl_tcp_if_include and oob_tcp_if_include; names also NCCL_SOCKET_IFNAME),"
                        " e.g. eth0 or 10.0.0.0/24; given several times, all of them")
    g.add_argument("--mpi-args", help="more mpirun arguments, as one quoted string")
    g.add_argument("-x", action="append", default=[], metavar="VAR[=VALUE]",
                   help="also pass this environment variable to every rank")
    g.add_argument("--mpirun", default=os.environ.get("HVDCRUN_MPIRUN", "mpirun"),
                   help="the mpirun to run (default: mpirun on PATH, or $HVDCRUN_MPIRUN)")
    horovod.add_options(p)
    g = p.add_argument_group("libhvdc's diagnostics (hvdcrun's own; docs/troubleshooting.md)")
    g.add_argument("--report", type=non_negative, metavar="SECONDS",
                   help="HVD_REPORT: rank 0 prints every SECONDS which rank the others wait for, "
                        "steps/s, bus bandwidth")
    g.add_argument("--host-timeout", type=non_negative, metavar="SECONDS",
                   help="HVD_HOST_TIMEOUT: a host silent this long is lost (default 30; 0: never)")
    g = p.add_argument_group("elastic training (see docs/elastic.md)")
    g.add_argument("--min-np", "--min-num-proc", dest="min_np", type=positive_int,
                   help="fewest ranks to run on; a failure leaving fewer ends the job "
                        "(default: -np)")
    g.add_argument("--max-np", "--max-num-proc", dest="max_np", type=positive_int,
                   help="most ranks (default: no limit, as horovodrun)")
    g.add_argument("--host-discovery-script",
                   help="prints the hosts that are up, one 'host:slots' per line")
    g.add_argument("--slots-per-host", type=positive_int, default=1,
                   help="slots of a discovered host printed without ':slots' (default 1)")
    g.add_argument("--reset-limit", type=int,
                   help="most times the job may be restarted on another set of ranks, after a "
                        "failure or a host change, before it gives up (horovodrun's; default: "
                        "no limit)")
    g.add_argument("--max-restarts", type=int,
                   help="most restarts after failures (hvdcrun's own; default 3, or no limit "
                        "when --reset-limit is given)")
    g.add_argument("--blacklist-cooldown-range", nargs=2, type=non_negative,
                   metavar=("MIN_S", "MAX_S"),
                   help="a failed host is left out for MIN_S * 2^failures + up to MIN_S "
                        "seconds, at most MAX_S (default: for the rest of the job, as "
                        "horovodrun)")
    g.add_argument("--elastic-timeout", type=non_negative,
                   default=non_negative(os.environ.get("HOROVOD_ELASTIC_TIMEOUT", "600")),
                   help="seconds to wait for --min-np slots (default $HOROVOD_ELASTIC_TIMEOUT, "
                        "else 600)")
    g.add_argument("--discovery-interval", type=non_negative, default=1.0,
                   help="seconds between discovery runs during a run (default 1)")
    g.add_argument("--scale-up", action="store_true",
                   help="kept for older scripts: hosts that appear now always make the job "
                        "grow at its next commit or host check, as in horovodrun")
    g.add_argument("--elastic-dir", help="where the program commits (HVD_ELASTIC_DIR; on a "
                   "filesystem every host shares; default: a new hvdc-elastic-* here)")
    g = p.add_argument_group("output")
    g.add_argument("--verbose", action="store_true", help="print the mpirun command(s)")
    g.add_argument("--dry-run", action="store_true", help="print the mpirun command, run nothing")
    g.add_argument("-cb", "--check-build", action="store_true",
                   help="print what this build of libhvdc has, and exit")
    g.add_argument("--check", action="store_true",
                   help="check the hosts first (reached through the launch agent, versions, "
                        "the network every pair shares, an all-reduce per pair) and print one "
                        "table; with a PROGRAM, launch it on the network found if all is green")
    g.add_argument("--gpu", action="store_true",
                   help="with --check: each rank uses a GPU, so every host needs as many GPUs "
                        "as the ranks it gets")
    return p


def option_action(p, word):
    """The action of option word (without '=value'): exact, or an unambiguous prefix of one
    long option, as horovodrun's argparse allows (--fusion-threshold for
    --fusion-threshold-mb). None if unknown; UsageError if ambiguous."""
    action = p._option_string_actions.get(word)
    if action is not None or not word.startswith("--"):
        return action
    matches = sorted({a for name, a in p._option_string_actions.items()
                      if name.startswith(word) and name.startswith("--")},
                     key=lambda a: a.option_strings)
    if len(matches) > 1:
        names = sorted(n for a in matches for n in a.option_strings if n.startswith(word))
        raise UsageError("option %s is ambiguous: %s" % (word, ", ".join(names)))
    return matches[0] if matches else None


def parse_args(argv):
    """hvdcrun's options, then the program and its arguments (which are the program's own,
    even when they look like hvdcrun's: the first word that is no option or option value
    starts the program; '--' may separate them too). args.given holds the dests given on the
    command line (they win over --config-file, as in horovodrun)."""
    p = options()
    i, command, words, given = 0, [], [], set()
    while i < len(argv):
        a = argv[i]
        if a == "--":
            command = argv[i + 1:]
            break
        if not a.startswith("-") or a == "-":
            command = argv[i:]
            break
        name, eq, value = a.partition("=")
        try:
            action = option_action(p, name)
        except UsageError as e:
            p.error(str(e))
        if action is None:
            p.error("unknown option %s (neither hvdcrun nor horovodrun 0.28 has it)" % a)
        given.add(action.dest)
        takes = 0 if action.nargs == 0 else (action.nargs if isinstance(action.nargs, int) else 1)
        full = action.option_strings[-1] if name not in action.option_strings else name
        words += ([full + eq + value] if eq else [full]) + argv[i + 1:i + 1 + (0 if eq else takes)]
        i += 1 + (0 if eq else takes)
    args = p.parse_args(words)
    args.command = command
    args.given = given
    return args


# ---- --check-build ----------------------------------------------------------------------

def check_build(args):
    path, info = mpirun.build_info((LIBHVDC, LIBHVDC_REL), HERE)
    found = shutil.which(args.mpirun)
    version = "not found"
    if found:
        try:
            out = subprocess.run([found, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
            version = out.splitlines()[0] if out else "?"
        except (OSError, subprocess.SubprocessError) as e:
            version = "cannot run: %s" % e
    print("hvdcrun %s (%s)" % (VERSION, os.path.realpath(__file__)))
    print("  mpirun:   %s (%s)" % (found or args.mpirun, version))
    if path is None:
        print("  libhvdc:  not found (looked for: %s)"
              % ", ".join(mpirun.library_candidates((LIBHVDC, LIBHVDC_REL), HERE)))
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


# ---- checks before a run --------------------------------------------------------------------

def check_settings(args, env):
    """--autotune only where the library has it; -x NAME only for a variable that is set; a
    warning for an HVD_*/HOROVOD_* variable the library does not read (a typo runs with
    defaults). The library is asked only when there is something to check."""
    for x in args.x:
        name, eq, _ = x.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError("-x '%s': expected VAR or VAR=VALUE" % x)
        if not eq and name not in env:
            raise UsageError("-x %s: %s is not set here; give -x %s=VALUE or set it"
                             % (name, name, name))
    ours = sorted(n for n in env if n.startswith(("HVD_", "HOROVOD_")))
    if not args.autotune and not ours:
        return
    _, info = mpirun.build_info((LIBHVDC, LIBHVDC_REL), HERE)
    if args.autotune and info.get("autotune", "no") == "no":
        raise UsageError("--autotune: this libhvdc has no autotuning (hvdcrun --check-build: "
                         "autotune: no); set --fusion-threshold-mb and --cycle-time-ms instead")
    # the Horovod variables libhvdc does not use: rank 0 names them itself at hvd_init
    known = info.get("environment", "").split() + info.get("horovod_not_used", "").split()
    for name in ours:
        if info and name not in known and name != "HVD_ELASTIC_RESTART":  # hvdcrun's own
            say("warning: %s is set but this libhvdc reads no such variable (it reads: %s)"
                % (name, " ".join(sorted(known))))


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `hvdcrun --check-build | head`: no traceback
    args = parse_args(argv)
    if args.check_build:
        return check_build(args)
    if args.check:
        import hvdcrun_check
        library, _ = mpirun.build_info((LIBHVDC, LIBHVDC_REL), HERE)
        return hvdcrun_check.main(args, library, launch)
    try:
        if args.config_file:
            horovod.apply_config(args, args.given)
        horovod.check(args)
        if args.host_discovery_script and (args.hosts or args.hostfile):
            raise UsageError("--host-discovery-script with %s: give one (the discovery script "
                             "says where the ranks run)" % ("-H" if args.hosts else "--hostfile"))
        mpirun.check_program(args.command)
        check_settings(args, os.environ)
        network.split_interfaces(args.network_interfaces)  # a malformed value: exit status 2
        if (args.min_np or args.max_np or args.host_discovery_script) is not None:
            import hvdcrun_elastic
            return hvdcrun_elastic.ElasticDriver(args).run()
        where, what = hosts.static_hosts(args)
        np = args.np or sum(s for _, s in where)
        hosts.check_np(np, where, what, args.oversubscribe)
        hosts.check_resolvable(where, what)
        mpirun.check_mpirun(args.mpirun)
    except UsageError as e:
        say(str(e))
        return 2
    return launch(args, where, np, os.environ)


def launch(args, where, np, env):
    cmd, env, shown = mpirun.mpirun_command(args, where, np, env)
    if args.verbose or args.dry_run:
        print(mpirun.show_command(cmd, shown), flush=True)
    if args.dry_run:
        return 0
    import hvdcrun_supervise
    return hvdcrun_supervise.run(cmd, env, say)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
