"""hvdcrun_horovod - horovodrun 0.28.1's flags (horovod/runner/launch.py) and its --config-file,
so that a launch script written for horovodrun runs under hvdcrun unchanged.

Each flag does what horovodrun's does, or, where hvdcrun cannot, stops with one line naming the
flag and why (exit status 2). horovodrun turns its tuning flags into HOROVOD_* variables for the
ranks (config_parser.set_env_from_args); hvdcrun does the same, and libhvdc reads them: the
ones it honours under its own HVD_* names, and rank 0 names at hvd_init each one it does not
use, with why (libhvdc/src/runtime/horovod_env.c). The flags that change how the job starts
become mpirun's own (--output-filename, --timestamp-output, binding, orte_startup_timeout).

    horovodrun flag                        hvdcrun
    --fusion-threshold-mb, --cycle-time-ms, --cache-capacity, --[no-]hierarchical-allreduce,
    --timeline-filename, --[no-]timeline-mark-cycles, --[no-]autotune, --autotune-log-file,
    --[no-]stall-check, --stall-check-*-seconds, --log-level, --log-with(out)-timestamp,
    --thread-affinity                      libhvdc's HVD_* settings (honoured)
    --[no-]hierarchical-allgather, --autotune-{warmup-samples,steps-per-sample,
    bayes-opt-max-samples,gaussian-process-noise}, --[no-]mpi-threads-disable,
    --num-nccl-streams, --gloo-timeout-seconds
                                           their HOROVOD_* variable, as horovodrun sets it;
                                           rank 0 says libhvdc does not use it, and why
    --tcp                                  NCCL_IB_DISABLE=1 (as horovodrun)
    --output-filename, -prefix-timestamp, --binding-args, --start-timeout
                                           mpirun's --output-filename, --timestamp-output,
                                           the binding, --mca orte_startup_timeout
    --config-file                          Horovod's YAML keys; command-line flags win
    --disable-cache, --mpi                 accepted: hvdcrun keeps no cache; it runs on MPI
    --gloo, --jsrun                        refused: hvdcrun starts ranks with Open MPI's mpirun

Runs in the hvdcrun process (its main thread). Python 3 standard library, and PyYAML for
--config-file only (Debian: python3-yaml).
"""
import argparse
import os
import re
import shlex
import sys

from hvdcrun_hosts import UsageError

LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")  # horovodrun's, any case


def whole(text):
    """horovodrun's type=int, with a message naming what was expected."""
    if not re.fullmatch(r"-?[0-9]+", text.strip()):
        raise argparse.ArgumentTypeError("'%s' is not a whole number" % text)
    return int(text)


def number(text):
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("'%s' is not a number" % text)


def log_level(text):
    if text.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError("'%s' is not one of %s (any case)"
                                         % (text, ", ".join(l.upper() for l in LOG_LEVELS)))
    return text.lower()


class Interfaces(argparse.Action):
    """--network-interface, given several times, or --network-interfaces a,b: the union, in
    the order given (horovodrun's NicAction)."""

    def __call__(self, parser, args, values, option_string=None):
        have = [n for n in (getattr(args, self.dest, None) or "").split(",") if n]
        for name in values.split(","):
            if name and name not in have:
                have.append(name)
        setattr(args, self.dest, ",".join(have))


def flag_pair(g, name, dest, help_on, help_off=argparse.SUPPRESS):
    """--name sets dest True, --no-name sets it False (horovodrun's override bool actions)."""
    g.add_argument("--" + name, dest=dest, action="store_const", const=True, default=None,
                   help=help_on)
    g.add_argument("--no-" + name, dest=dest, action="store_const", const=False, help=help_off)


def add_options(p):
    """horovodrun's flags that hvdcrun's own groups do not hold (see hvdcrun.options)."""
    g = p.add_argument_group("horovodrun's tuning flags (libhvdc settings; docs/configuration.md)")
    g.add_argument("--fusion-threshold-mb", type=number,
                   help="HVD_FUSION_THRESHOLD in MiB (0: no fusion)")
    g.add_argument("--cycle-time-ms", type=number, help="HVD_CYCLE_TIME")
    g.add_argument("--cache-capacity", type=whole, help="HVD_CACHE_CAPACITY (0: no cache)")
    flag_pair(g, "hierarchical-allreduce", "hierarchical_allreduce",
              "HVD_HIERARCHICAL_ALLREDUCE=1: inside each node, then across nodes")
    flag_pair(g, "hierarchical-allgather", "hierarchical_allgather",
              "HOROVOD_HIERARCHICAL_ALLGATHER (libhvdc has no two-level allgather; rank 0 says so)")
    flag_pair(g, "autotune", "autotune",
              "HVD_AUTOTUNE=1: rank 0 tunes the fusion threshold, cycle time and shared-memory "
              "step during the first steps")
    g.add_argument("--autotune-log-file", help="HVD_AUTOTUNE_LOG: rank 0 writes every trial (CSV)")
    for name, kind in (("warmup-samples", whole), ("steps-per-sample", whole),
                       ("bayes-opt-max-samples", whole), ("gaussian-process-noise", number)):
        g.add_argument("--autotune-" + name, type=kind,
                       help="HOROVOD_AUTOTUNE_%s (not used by libhvdc's grid search)"
                       % name.upper().replace("-", "_"))
    g.add_argument("--timeline-filename", help="HVD_TIMELINE: rank 0 writes a Chrome trace")
    flag_pair(g, "timeline-mark-cycles", "timeline_mark_cycles", "HVD_TIMELINE_MARK_CYCLES=1")
    g.add_argument("--no-stall-check", dest="no_stall_check", action="store_const", const=True,
                   default=None, help="HVD_STALL_CHECK_DISABLE=1: no stall report or stop")
    g.add_argument("--stall-check", dest="no_stall_check", action="store_const", const=False,
                   help=argparse.SUPPRESS)
    g.add_argument("--stall-check-warning-time-seconds", type=number,
                   help="HVD_STALL_CHECK_TIME")
    g.add_argument("--stall-check-shutdown-time-seconds", type=number,
                   help="HVD_STALL_SHUTDOWN_TIME")
    flag_pair(g, "mpi-threads-disable", "mpi_threads_disable",
              "HOROVOD_MPI_THREADS_DISABLE (libhvdc needs MPI_THREAD_MULTIPLE; rank 0 says so)")
    g.add_argument("--num-nccl-streams", type=whole,
                   help="HOROVOD_NUM_NCCL_STREAMS (libhvdc uses one; rank 0 says so)")
    g.add_argument("--thread-affinity", type=whole,
                   help="HVD_THREAD_AFFINITY: the background thread's CPU")
    g.add_argument("--gloo-timeout-seconds", type=whole,
                   help="HOROVOD_GLOO_TIMEOUT_SECONDS (no Gloo here; rank 0 says so)")
    g.add_argument("--tcp", dest="tcp_flag", action="store_true",
                   help="TCP only: NCCL_IB_DISABLE=1")
    g.add_argument("--log-level", type=log_level, help="HVD_LOG_LEVEL: TRACE .. FATAL")
    g.add_argument("--log-with-timestamp", dest="log_with_timestamp", action="store_const",
                   const=True, default=None, help=argparse.SUPPRESS)
    g.add_argument("--log-without-timestamp", "--log-hide-timestamp", dest="log_with_timestamp",
                   action="store_const", const=False,
                   help="libhvdc's log lines carry no time (its default; "
                        "--log-with-timestamp adds it)")
    g.add_argument("--no-log-hide-timestamp", dest="log_with_timestamp", action="store_const",
                   const=True, help=argparse.SUPPRESS)
    g = p.add_argument_group("horovodrun's start-up flags")
    g.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp",
                   dest="prefix_output_with_timestamp", action="store_true",
                   help="timestamp each output line (mpirun --timestamp-output)")
    g.add_argument("--output-filename",
                   help="also write each rank's stdout and stderr under this directory "
                        "(mpirun --output-filename: DIR/1/rank.N/stdout, as horovodrun with MPI)")
    g.add_argument("--binding-args",
                   help="mpirun's binding arguments in place of --bind-to none --map-by slot, "
                        "e.g. '--bind-to core --map-by socket'")
    g.add_argument("--start-timeout", type=whole,
                   help="seconds mpirun may take to start every rank (its orte_startup_timeout; "
                        "default $HOROVOD_START_TIMEOUT, else no limit)")
    g.add_argument("--disable-cache", action="store_true",
                   help="accepted: hvdcrun checks the hosts on every run, it keeps no cache")
    g.add_argument("--config-file", help="Horovod's YAML settings file; command-line flags win")
    g.add_argument("--gloo", dest="use_gloo", action="store_true", help="refused: MPI only")
    g.add_argument("--mpi", dest="use_mpi", action="store_true", help="accepted: the default")
    g.add_argument("--jsrun", dest="use_jsrun", action="store_true", help="refused: mpirun only")


# ---- --config-file ----------------------------------------------------------------------------

# Horovod's YAML sections and keys (config_parser.set_args_from_config) -> hvdcrun's option dest
CONFIG_KEYS = {
    "params": {"fusion_threshold_mb": "fusion_threshold_mb", "cycle_time_ms": "cycle_time_ms",
               "cache_capacity": "cache_capacity",
               "hierarchical_allreduce": "hierarchical_allreduce",
               "hierarchical_allgather": "hierarchical_allgather"},
    "autotune": {"enabled": "autotune", "log_file": "autotune_log_file",
                 "warmup_samples": "autotune_warmup_samples",
                 "steps_per_sample": "autotune_steps_per_sample",
                 "bayes_opt_max_samples": "autotune_bayes_opt_max_samples",
                 "gaussian_process_noise": "autotune_gaussian_process_noise"},
    "timeline": {"filename": "timeline_filename", "mark_cycles": "timeline_mark_cycles"},
    "stall_check": {"enabled": "no_stall_check",
                    "warning_time_seconds": "stall_check_warning_time_seconds",
                    "shutdown_time_seconds": "stall_check_shutdown_time_seconds"},
    "library_options": {"mpi_threads_disable": "mpi_threads_disable",
                        "num_nccl_streams": "num_nccl_streams",
                        "thread_affinity": "thread_affinity",
                        "gloo_timeout_seconds": "gloo_timeout_seconds"},
    "logging": {"level": "log_level", "with_timestamp": "log_with_timestamp"},
}
NON_NEGATIVE = ("fusion_threshold_mb", "cycle_time_ms", "cache_capacity",
                "autotune_warmup_samples", "autotune_steps_per_sample",
                "autotune_bayes_opt_max_samples", "stall_check_warning_time_seconds",
                "stall_check_shutdown_time_seconds", "num_nccl_streams", "thread_affinity",
                "gloo_timeout_seconds")


def load_config(path):
    """The YAML file's mapping, or UsageError saying what is wrong."""
    try:
        import yaml
    except ImportError:
        raise UsageError("--config-file needs PyYAML, which this Python (%s) lacks (Debian: "
                         "apt-get install python3-yaml)" % sys.executable)
    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except OSError as e:
        raise UsageError("--config-file: cannot read '%s': %s" % (path, e.strerror))
    except yaml.YAMLError as e:
        raise UsageError("--config-file '%s' is not YAML: %s" % (path, str(e).replace("\n", " ")))
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise UsageError("--config-file '%s': expected a mapping of Horovod's sections "
                         "(params, autotune, timeline, stall_check, library_options, logging, "
                         "controller)" % path)
    return config


def apply_config(args, given):
    """Horovod's set_args_from_config: the file's values for every option not given on the
    command line (given: the dests that were)."""
    config = load_config(args.config_file)
    where = "--config-file %s" % args.config_file
    controller = config.get("controller")
    if controller is not None and not args.use_gloo and not args.use_mpi:
        if str(controller).lower() == "gloo":
            args.use_gloo = True
        elif str(controller).lower() == "mpi":
            args.use_mpi = True
        else:
            raise UsageError("%s: controller '%s' is not one of mpi, gloo" % (where, controller))
    for section, keys in CONFIG_KEYS.items():
        values = config.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise UsageError("%s: '%s' must be a mapping of %s" % (where, section,
                                                                  ", ".join(keys)))
        # Horovod: a section present without 'enabled' means autotune off, stall check on
        if section == "autotune" and "autotune" not in given:
            args.autotune = bool(values.get("enabled", False))
        if section == "stall_check" and "no_stall_check" not in given:
            args.no_stall_check = not values.get("enabled", True)
        for key, value in values.items():
            if key not in keys:
                raise UsageError("%s: %s has no key '%s' (Horovod's: %s)"
                                 % (where, section, key, ", ".join(keys)))
            dest = keys[key]
            if dest in given or value is None or key == "enabled":
                continue
            if dest == "log_level":
                value = log_level(str(value))
            setattr(args, dest, value)


def check(args):
    """horovodrun's validate_config_args, and the flags hvdcrun refuses."""
    for dest in NON_NEGATIVE:
        value = getattr(args, dest, None)
        if value is not None and not (isinstance(value, (int, float)) and value >= 0):
            raise UsageError("--%s %s: must be a number >= 0" % (dest.replace("_", "-"), value))
    noise = args.autotune_gaussian_process_noise
    if noise is not None and not 0 <= noise <= 1:
        raise UsageError("--autotune-gaussian-process-noise %s: must be in [0, 1]" % noise)
    if args.use_gloo:
        raise UsageError("--gloo: hvdcrun runs libhvdc on MPI, which has no Gloo controller; "
                         "drop the flag (or use --mpi)")
    if args.use_jsrun:
        raise UsageError("--jsrun: hvdcrun starts the ranks with Open MPI's mpirun; inside an "
                         "LSF allocation give its hosts with -H or --hostfile")
    if [args.use_gloo, args.use_mpi, args.use_jsrun].count(True) > 1:
        raise UsageError("--gloo, --mpi and --jsrun: give one")


# ---- what the flags become ---------------------------------------------------------------------

def flag(value):
    return None if value is None else ("1" if value else "0")


def settings_env(args):
    """The ranks' environment from the flags: libhvdc's HVD_* names where it honours the
    setting, horovodrun's HOROVOD_* names (and NCCL_IB_DISABLE) where horovodrun sets them."""
    env = {}
    mb = args.fusion_threshold_mb
    values = {
        "HVD_FUSION_THRESHOLD": None if mb is None else str(int(mb * 1024 * 1024)),
        "HVD_CYCLE_TIME": None if args.cycle_time_ms is None else repr(float(args.cycle_time_ms)),
        "HVD_CACHE_CAPACITY": None if args.cache_capacity is None else str(args.cache_capacity),
        "HVD_HIERARCHICAL_ALLREDUCE": flag(args.hierarchical_allreduce),
        "HOROVOD_HIERARCHICAL_ALLGATHER": flag(args.hierarchical_allgather),
        "HVD_TIMELINE": args.timeline_filename and os.path.abspath(args.timeline_filename),
        "HVD_TIMELINE_MARK_CYCLES": flag(args.timeline_mark_cycles),
        "HVD_STALL_CHECK_DISABLE": flag(args.no_stall_check),
        "HVD_STALL_CHECK_TIME": None if args.stall_check_warning_time_seconds is None
        else repr(float(args.stall_check_warning_time_seconds)),
        "HVD_STALL_SHUTDOWN_TIME": None if args.stall_check_shutdown_time_seconds is None
        else repr(float(args.stall_check_shutdown_time_seconds)),
        "HOROVOD_MPI_THREADS_DISABLE": flag(args.mpi_threads_disable),
        "HOROVOD_NUM_NCCL_STREAMS": args.num_nccl_streams,
        "HVD_THREAD_AFFINITY": args.thread_affinity,
        "HOROVOD_GLOO_TIMEOUT_SECONDS": args.gloo_timeout_seconds,
        "NCCL_IB_DISABLE": "1" if args.tcp_flag else None,
        "HVD_LOG_LEVEL": args.log_level,
        "HVD_LOG_HIDE_TIME": None if args.log_with_timestamp is None
        else ("0" if args.log_with_timestamp else "1"),
    }
    if args.autotune:  # horovodrun sets the autotune variables only with --autotune
        values.update({
            "HVD_AUTOTUNE": "1",
            "HVD_AUTOTUNE_LOG": args.autotune_log_file and os.path.abspath(args.autotune_log_file),
            "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": args.autotune_warmup_samples,
            "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": args.autotune_steps_per_sample,
            "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": args.autotune_bayes_opt_max_samples,
            "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": args.autotune_gaussian_process_noise,
        })
    elif args.autotune is False:
        values["HVD_AUTOTUNE"] = "0"
    for name, value in values.items():
        if value is not None:
            env[name] = str(value)
    return env


def start_timeout(args, env):
    """--start-timeout, else $HOROVOD_START_TIMEOUT (horovodrun's order); None: no limit."""
    if args.start_timeout is not None:
        return args.start_timeout
    text = env.get("HOROVOD_START_TIMEOUT")
    if text is None:
        return None
    if not re.fullmatch(r"[0-9]+", text.strip()):
        raise UsageError("HOROVOD_START_TIMEOUT='%s': expected whole seconds" % text)
    return int(text)


def mpirun_args(args, env):
    """mpirun arguments for horovodrun's start-up flags: (args, binding given)."""
    out = []
    if args.output_filename:
        out += ["--output-filename", os.path.abspath(args.output_filename)]
    if args.prefix_output_with_timestamp:
        out.append("--timestamp-output")
    timeout = start_timeout(args, env)
    if timeout:
        out += ["--mca", "orte_startup_timeout", str(timeout)]
    binding = shlex.split(args.binding_args or "")
    return out + binding, bool(binding)
