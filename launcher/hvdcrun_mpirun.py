"""hvdcrun_mpirun - the mpirun command hvdcrun runs, and what it checks first: the program, and
what this build of libhvdc has (hvd_build_info).

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (as root)
    mpirun -np 4 -H node1:2,node2:2 --bind-to none --map-by slot [--oversubscribe]
           [--mca mpi_yield_when_idle 1] [--mca plm_rsh_args "-p PORT"]
           [--mca btl_tcp_if_include NET --mca oob_tcp_if_include NET]
           [--output-filename DIR] [--timestamp-output] [--mca orte_startup_timeout S]
           -x HVD_... -x HOROVOD_... -x NCCL_... -x PATH ... [--mpi-args ...] PROGRAM ARGS
(the bracketed middle line: horovodrun's start-up flags, hvdcrun_horovod.py)

Why each: root and oversubscription are refused by Open MPI unless asked for; --bind-to none
because Open MPI binds each rank to one core at np <= 2, and libhvdc's background thread then
shares it with the training thread; yielding because ranks that spin while they wait starve
each other on a host with more ranks than slots or cores (with HVD_CPU_ALLREDUCE=mpi, also
with fewer cores than busy threads); -x because mpirun's environment does not reach other
hosts by itself, and hvd_init fails every rank when a must-agree setting differs between them.

Runs in the hvdcrun process (its main thread). Python 3 standard library only.
"""
import ctypes.util
import glob
import os
import shlex
import shutil
import subprocess
import sys

import hvdcrun_horovod as horovod
import hvdcrun_network as network
from hvdcrun_hosts import UsageError, hosts_text, is_this_machine, take_slots

# Every variable with these prefixes set where hvdcrun runs reaches every rank: libhvdc's
# settings under both names, and NCCL's (NCCL_SOCKET_IFNAME, NCCL_DEBUG, NCCL_IB_HCA, ...).
PASSED_PREFIXES = ("HVD_", "HOROVOD_", "NCCL_")
PASSED_THROUGH = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "OMP_NUM_THREADS",
                  "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


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


def check_mpirun(mpirun):
    if shutil.which(mpirun) is None:
        raise UsageError("'%s' not found: install Open MPI (Debian: openmpi-bin) or pass "
                         "--mpirun PATH" % mpirun)


# ---- what the library has ------------------------------------------------------------------

def library_candidates(configured, here):
    """Where libhvdc may be: the one meson configured this launcher for, the same relative to
    this file (an installed tree moved elsewhere, e.g. by DESTDIR), beside these modules in the
    hvdc package (pip install .: hvdc/_launcher/ and hvdc/lib/), the build tree, the system's."""
    path, rel = configured
    if path and "@" not in path:
        yield path
    if rel and "@" not in rel:
        yield os.path.normpath(os.path.join(here, rel))
    yield from sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                             "lib", "libhvdc.so.*")))
    yield os.path.join(here, "libhvdc", "libhvdc.so")                 # next to build/hvdcrun
    yield os.path.join(here, "..", "build", "libhvdc", "libhvdc.so")  # launcher/ in the source
    found = ctypes.util.find_library("hvdc")
    if found:
        yield found


# Loaded in a child process: a libhvdc built with a sanitizer aborts whatever loads it (ASan
# wants to be the first library of the process), and that must not be hvdcrun.
_BUILD_INFO = ("import ctypes, sys\n"
               "lib = ctypes.CDLL(sys.argv[1])\n"
               "lib.hvd_build_info.restype = ctypes.c_char_p\n"
               "sys.stdout.write(lib.hvd_build_info().decode())\n")


def build_info(configured, here):
    """(path, {key: value}) from the library's hvd_build_info(), or (None, {}) if none loads."""
    for path in library_candidates(configured, here):
        if "/" in path and not os.path.exists(path):
            continue
        try:
            r = subprocess.run([sys.executable, "-c", _BUILD_INFO, path], capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode != 0 or "version: " not in r.stdout:
            continue
        info = {}
        for line in r.stdout.splitlines():
            key, _, value = line.partition(": ")
            info[key] = value
        return os.path.realpath(path), info
    return None, {}


# ---- the command -----------------------------------------------------------------------------

def diagnostics_env(args):
    """libhvdc's diagnostics settings from hvdcrun's own flags (--report, --host-timeout)."""
    env = {}
    if args.report is not None:
        env["HVD_REPORT"] = repr(args.report)
    if args.host_timeout is not None:
        env["HVD_HOST_TIMEOUT"] = repr(args.host_timeout)
    return env


def user_sets(mpi_args, *flags):
    return any(a in flags or any(a.startswith(f + "=") for f in flags) for a in mpi_args)


def user_sets_mca(mpi_args, name):
    return any(mpi_args[i] in ("--mca", "-mca") and mpi_args[i + 1] == name
               for i in range(len(mpi_args) - 1))


def mpirun_command(args, hosts, np, env, extra_env=(), cpus=None):
    """(argv, env, shown) of the mpirun run for np ranks on hosts: env gains what mpirun needs,
    shown is what was added (printed in front of the command by --verbose)."""
    mpi_args = shlex.split(args.mpi_args or "")
    run_env = dict(env)
    shown = {}
    if os.geteuid() == 0:
        shown.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    shown.update(horovod.settings_env(args))
    shown.update(diagnostics_env(args))
    if args.network_interfaces:
        shown.update(network.nccl_env(args.network_interfaces, env))
    shown.update(extra_env)
    for x in args.x:  # -x VAR=value: this value, on every rank (mpirun's -x would do the same)
        name, eq, value = x.partition("=")
        if eq:
            shown[name] = value
    run_env.update(shown)
    total = sum(s for _, s in hosts)
    argv = [args.mpirun, "-np", str(np), "-H", hosts_text(take_slots(hosts, np)
                                                          if np <= total else hosts)]
    started, bound = horovod.mpirun_args(args, env)  # horovodrun's start-up flags
    if not bound and not user_sets(mpi_args, "--bind-to", "-bind-to"):
        argv += ["--bind-to", "none"]   # the background thread needs a core of its own
    if not bound and not user_sets(mpi_args, "--map-by", "-map-by"):
        argv += ["--map-by", "slot"]    # ranks fill the hosts in order: 0-1 on the first, ...
    argv += started
    if args.oversubscribe or np > total:
        argv.append("--oversubscribe")
    # Open MPI's yield_when_idle: a sched_yield in every MPI progress call that finds nothing.
    # Where ranks outnumber the slots or this host's cores, waiting ranks must give up the core.
    # Where only each rank's two threads (training, background) outnumber the cores, libhvdc's
    # own waits already yield to the training thread (base/poll.h) and MPI's yield only costs
    # small operations ~10 us each (benchmarks/results/archive/hvdcrun_yield_np2.txt); but a background
    # thread blocked inside MPI_Allreduce (HVD_CPU_ALLREDUCE=mpi) would spin the training
    # thread's core away: 1.5x the step there.
    local = sum(s for h, s in take_slots(hosts, np) if is_this_machine(h))
    cpus = cpus or os.cpu_count() or 1
    inside_mpi = any(run_env.get(v, "").strip().lower() == "mpi"
                     for v in ("HVD_CPU_ALLREDUCE", "HOROVOD_CPU_ALLREDUCE"))
    ranks_crowd = args.oversubscribe or np > total or local > cpus
    if (ranks_crowd or (2 * local > cpus and inside_mpi)) and \
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
    names = sorted(k for k in run_env if k.startswith(PASSED_PREFIXES))
    names += [k for k in PASSED_THROUGH if k in run_env and k not in names]
    names += [n for n in (x.partition("=")[0] for x in args.x) if n not in names]
    for name in names:
        argv += ["-x", name]
    argv += mpi_args + args.command
    return argv, run_env, shown


def show_command(argv, shown):
    return " ".join(["%s=%s" % (k, shlex.quote(v)) for k, v in shown.items()] +
                    [shlex.quote(a) for a in argv])
