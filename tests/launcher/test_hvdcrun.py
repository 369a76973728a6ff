#!/usr/bin/python3
"""test_hvdcrun.py - hvdcrun's parts without a cluster: Slurm's host list and task counts, -H,
hostfiles, the discovery script's answer, the blacklist, option parsing, the mpirun command it
builds; then build/hvdcrun itself: every bad input exits 2 with a message naming what was
wrong, --dry-run prints the command, and a Python program runs under it (rank and size from
Open MPI's environment).

Usage: test_hvdcrun.py BUILD_DIR      (meson: suite launcher; ~2 s)
The verdict is the exit status (unittest's).
"""
import os
import subprocess
import sys
import tempfile
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher"))
import hvdcrun_elastic as elastic  # noqa: E402
import hvdcrun_hosts as hosts      # noqa: E402
import hvdcrun_mpirun as mpirun    # noqa: E402
from hvdcrun_hosts import UsageError  # noqa: E402

BUILD = None  # set from argv
HVDCRUN = None


class SlurmLists(unittest.TestCase):
    def test_nodelist(self):
        cases = {
            "node[1-3,7]": ["node1", "node2", "node3", "node7"],
            "gpu-[01-02,10]": ["gpu-01", "gpu-02", "gpu-10"],
            "a,b[2-3],c": ["a", "b2", "b3", "c"],
            "n[1-2]-ib[0-1]": ["n1-ib0", "n1-ib1", "n2-ib0", "n2-ib1"],
            "node[009-011]": ["node009", "node010", "node011"],
            "single": ["single"],
        }
        for text, want in cases.items():
            self.assertEqual(hosts.expand_nodelist(text), want, text)

    def test_nodelist_bad(self):
        for text in ("node[3-1]", "node[1-", "node]1[", "node[a-b]", "a,,b", "n[[1]]", ""):
            with self.assertRaises(UsageError, msg=text) as e:
                hosts.expand_nodelist(text)
            self.assertIn("SLURM_JOB_NODELIST", str(e.exception))

    def test_tasks_per_node(self):
        self.assertEqual(hosts.expand_tasks_per_node("2(x3),1"), [2, 2, 2, 1])
        self.assertEqual(hosts.expand_tasks_per_node("4"), [4])
        self.assertEqual(hosts.expand_tasks_per_node("1,3(x2)"), [1, 3, 3])
        for text in ("2(x)", "x", "2(3)", "", "2,"):
            with self.assertRaises(UsageError, msg=text):
                hosts.expand_tasks_per_node(text)

    def test_slurm_hosts(self):
        env = {"SLURM_JOB_NODELIST": "node[1-3,7]", "SLURM_TASKS_PER_NODE": "2(x3),1"}
        self.assertEqual(hosts.slurm_hosts(env),
                         [("node1", 2), ("node2", 2), ("node3", 2), ("node7", 1)])
        self.assertIsNone(hosts.slurm_hosts({}))
        with self.assertRaises(UsageError) as e:  # 4 nodes, 3 counts
            hosts.slurm_hosts({"SLURM_JOB_NODELIST": "node[1-4]", "SLURM_TASKS_PER_NODE": "2(x3)"})
        self.assertIn("names 4 nodes", str(e.exception))
        with self.assertRaises(UsageError) as e:
            hosts.slurm_hosts({"SLURM_JOB_NODELIST": "node1"})
        self.assertIn("SLURM_TASKS_PER_NODE is not", str(e.exception))


class HostLists(unittest.TestCase):
    def test_dash_h(self):
        self.assertEqual(hosts.parse_hosts("node1:2,node2:2"), [("node1", 2), ("node2", 2)])
        self.assertEqual(hosts.parse_hosts("node1,10.0.0.2:4"), [("node1", 1), ("10.0.0.2", 4)])
        for text, words in (("node1:0", "at least 1"), ("node1:x", "not a whole number"),
                            ("node1:2,node1:2", "listed twice"), ("a,,b", "empty host"),
                            ("bad/name:1", "not a host name")):
            with self.assertRaises(UsageError, msg=text) as e:
                hosts.parse_hosts(text)
            self.assertIn(words, str(e.exception))

    def test_hostfile(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "hosts")
            with open(path, "w") as f:
                f.write("# the cluster\nnode1 slots=2\n\nnode2  slots = 4 max_slots=8  # big\n"
                        "node3\n")
            self.assertEqual(hosts.parse_hostfile(path),
                             [("node1", 2), ("node2", 4), ("node3", 1)])
            for text, words in (("node1 slots=0\n", "at least 1"),
                                ("node1 cpus=2\n", "not 'host slots=N'"),
                                ("# nothing\n", "lists no hosts")):
                with open(path, "w") as f:
                    f.write(text)
                with self.assertRaises(UsageError, msg=text) as e:
                    hosts.parse_hostfile(path)
                self.assertIn(words, str(e.exception))
            with self.assertRaises(UsageError) as e:
                hosts.parse_hostfile(os.path.join(d, "missing"))
            self.assertIn("cannot read", str(e.exception))

    def test_take_slots(self):
        h = [("a", 2), ("b", 2), ("c", 4)]
        self.assertEqual(hosts.take_slots(h, 3), [("a", 2), ("b", 1)])
        self.assertEqual(hosts.take_slots(h, 8), h)
        self.assertEqual(hosts.take_slots(h, 2), [("a", 2)])


class Discovery(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(elastic.parse_discovery("node1:2\n\nnode2\n", 3),
                         {"node1": 2, "node2": 3})
        for text in ("node1:0", "node1:x", "node1 2", "a:b:c"):
            with self.assertRaises(ValueError, msg=text):
                elastic.parse_discovery(text, 1)

    def test_blacklist(self):
        b = elastic.Blacklist((10.0, 300.0))
        first = b.add("node2", 1000.0)
        self.assertTrue(20.0 <= first <= 30.0, first)  # 10 * 2^1 + up to 10
        self.assertTrue(b.blocked("node2", 1000.0 + first - 0.1))
        self.assertFalse(b.blocked("node2", 1000.0 + first + 0.1))
        self.assertFalse(b.blocked("node1", 1000.0))
        second = b.add("node2", 2000.0)
        self.assertTrue(40.0 <= second <= 50.0, second)
        for _ in range(10):
            self.assertLessEqual(b.add("node2", 3000.0), 300.0)
        # without --blacklist-cooldown-range, horovodrun's default: out for the rest of the job
        forever = elastic.Blacklist(None)
        self.assertEqual(forever.add("node2", 1000.0), float("inf"))
        self.assertTrue(forever.blocked("node2", 1e12))

    def test_host_change(self):
        """What makes a healthy job stop at its next commit or host check (horovodrun's host
        updates): a host of the job gone, or fewer slots on it, or more usable slots."""
        run = [("a", 2), ("b", 2)]
        self.assertIsNone(elastic.host_change(run, {"a": 2, "b": 2}, run, 4))
        self.assertIn("host b left", elastic.host_change(run, {"a": 2}, [("a", 2)], 4))
        self.assertIn("fewer slots on b:1", elastic.host_change(run, {"a": 2, "b": 1}, run, 4))
        grown = run + [("c", 2)]
        self.assertIn("6 slots are usable", elastic.host_change(run, {"a": 2, "b": 2, "c": 2},
                                                                grown, 4))


class Usable(unittest.TestCase):
    def test_hosts_left_out(self):
        """Discovered hosts that do not resolve, or are in their cool-down, are not used;
        the oldest hosts come first and --max-np caps the slots."""
        d = elastic.ElasticDriver(types.SimpleNamespace(blacklist_cooldown_range=[1.0, 2.0]))
        d.max_np = None
        self.assertEqual(d.usable({"localhost": 2, "no-such-host.invalid": 2}),
                         [("localhost", 2)])
        d.blacklist.add("localhost", time.monotonic())
        self.assertEqual(d.usable({"localhost": 2, "127.0.0.1": 3}), [("127.0.0.1", 3)])
        d.max_np = 2
        self.assertEqual(d.usable({"127.0.0.1": 3}), [("127.0.0.1", 2)])


def parse(argv):
    import importlib.util
    spec = importlib.util.spec_from_file_location("hvdcrun_main",
                                                  os.path.join(HERE, "..", "..", "launcher",
                                                               "hvdcrun.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_args(argv)


class Command(unittest.TestCase):
    def command(self, argv, env=None, hosts_=None, np=None, cpus=64):
        args = parse(argv)
        where = hosts_ or [("localhost", args.np)]
        argv_, run_env, shown = mpirun.mpirun_command(args, where, np or args.np,
                                                      env if env is not None else {}, cpus=cpus)
        return argv_, run_env, shown

    def test_program_keeps_its_options(self):
        args = parse(["-np", "2", "--verbose", "./prog", "-np", "5", "--verbose"])
        self.assertEqual(args.np, 2)
        self.assertEqual(args.command, ["./prog", "-np", "5", "--verbose"])
        args = parse(["-np", "2", "--", "-weird-name"])
        self.assertEqual(args.command, ["-weird-name"])

    def test_defaults(self):
        argv, _, shown = self.command(["-np", "2", "./prog", "x"])
        self.assertEqual(argv[:5], ["mpirun", "-np", "2", "-H", "localhost:2"])
        i = argv.index("--bind-to")
        self.assertEqual(argv[i + 1], "none")
        self.assertNotIn("--oversubscribe", argv)
        self.assertNotIn("mpi_yield_when_idle", argv)  # 64 cpus: no need
        self.assertEqual(argv[-2:], ["./prog", "x"])
        if os.geteuid() == 0:
            self.assertEqual(shown.get("OMPI_ALLOW_RUN_AS_ROOT"), "1")
            self.assertEqual(shown.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), "1")

    def test_small_machine_yields_only_for_blocking_mpi(self):
        # 2 ranks x 2 threads > 2 cores: libhvdc's own waits yield; MPI must only where the
        # background thread blocks inside MPI_Allreduce
        argv, _, _ = self.command(["-np", "2", "./prog"], cpus=2)
        self.assertNotIn("mpi_yield_when_idle", argv)
        for env in ({"HVD_CPU_ALLREDUCE": "mpi"}, {"HOROVOD_CPU_ALLREDUCE": "MPI"}):
            argv, _, _ = self.command(["-np", "2", "./prog"], cpus=2, env=env)
            self.assertIn("mpi_yield_when_idle", argv, env)
        argv, _, _ = self.command(["-np", "2", "-x", "HVD_CPU_ALLREDUCE=mpi", "./prog"], cpus=2)
        self.assertIn("mpi_yield_when_idle", argv)
        argv, _, _ = self.command(["-np", "2", "./prog"], cpus=4, env={"HVD_CPU_ALLREDUCE": "mpi"})
        self.assertNotIn("mpi_yield_when_idle", argv)  # a core per thread: no need
        argv, _, _ = self.command(["-np", "3", "./prog"], cpus=2)  # more ranks than cores
        self.assertIn("mpi_yield_when_idle", argv)

    def test_oversubscribe(self):
        argv, _, _ = self.command(["-np", "4", "--oversubscribe", "./prog"],
                                  hosts_=[("localhost", 2)])
        self.assertIn("--oversubscribe", argv)
        self.assertIn("mpi_yield_when_idle", argv)
        self.assertEqual(argv[argv.index("-H") + 1], "localhost:2")

    def test_user_binding_wins(self):
        argv, _, _ = self.command(["-np", "2", "--mpi-args", "--bind-to core --map-by slot:PE=2",
                                   "./prog"])
        self.assertEqual(argv.count("--bind-to"), 1)
        self.assertEqual(argv[argv.index("--bind-to") + 1], "core")
        self.assertEqual(argv.count("--map-by"), 1)

    def test_every_hvd_variable_travels(self):
        env = {"HVD_FUSION_THRESHOLD": "1M", "HOROVOD_CYCLE_TIME": "2", "PATH": "/bin",
               "UNRELATED": "1"}
        argv, run_env, _ = self.command(["-np", "2", "-x", "MY_VAR=3", "-x",
                                         "HVD_FUSION_THRESHOLD=0", "./prog"], env=env)
        xs = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
        for name in ("HVD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "PATH", "MY_VAR"):
            self.assertIn(name, xs)
        self.assertNotIn("UNRELATED", xs)
        self.assertEqual(run_env["HVD_FUSION_THRESHOLD"], "0")  # -x VAR=value wins
        self.assertEqual(run_env["MY_VAR"], "3")

    def test_horovod_flags(self):
        _, run_env, _ = self.command(["-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms",
                                      "2.5", "--log-level", "DEBUG", "--no-stall-check",
                                      "--stall-check-shutdown-time-seconds", "60",
                                      "--hierarchical-allreduce", "--timeline-filename", "t.json",
                                      "--autotune", "--autotune-log-file", "at.csv", "./prog"])
        self.assertEqual(run_env["HVD_FUSION_THRESHOLD"], str(32 << 20))
        self.assertEqual(run_env["HVD_CYCLE_TIME"], "2.5")
        self.assertEqual(run_env["HVD_LOG_LEVEL"], "debug")
        self.assertEqual(run_env["HVD_STALL_CHECK_DISABLE"], "1")
        self.assertEqual(run_env["HVD_STALL_SHUTDOWN_TIME"], "60.0")
        self.assertEqual(run_env["HVD_HIERARCHICAL_ALLREDUCE"], "1")
        self.assertEqual(run_env["HVD_TIMELINE"], os.path.abspath("t.json"))
        self.assertEqual(run_env["HVD_AUTOTUNE"], "1")
        self.assertEqual(run_env["HVD_AUTOTUNE_LOG"], os.path.abspath("at.csv"))

    def test_ssh_and_network(self):
        argv, _, _ = self.command(["-np", "2", "-p", "2222", "--network-interfaces",
                                   "10.0.0.0/24", "./prog"])
        joined = " ".join(argv)
        self.assertIn("--mca plm_rsh_args -p 2222", joined)
        self.assertIn("--mca btl_tcp_if_include 10.0.0.0/24", joined)
        self.assertIn("--mca oob_tcp_if_include 10.0.0.0/24", joined)


def hvdcrun(*argv, env=None):
    e = dict(os.environ)
    for k in [k for k in e if k.startswith(("SLURM_", "HVD_", "HOROVOD_"))]:
        del e[k]
    e.update(env or {})
    return subprocess.run([HVDCRUN] + list(argv), capture_output=True, text=True, timeout=60,
                          env=e)


class BadInput(unittest.TestCase):
    """Each: exit status 2, a message naming what was wrong, nothing started."""

    def test_each(self):
        topo = os.path.join(BUILD, "examples", "topology")
        with tempfile.TemporaryDirectory() as d:
            notexec = os.path.join(d, "script.sh")
            hostfile = os.path.join(d, "hosts")
            for path, text in ((notexec, "echo hi\n"), (hostfile, "localhost slots=0\n")):
                with open(path, "w") as f:
                    f.write(text)
            cases = [
                (["-np", "2", "-H", "no-such-host.invalid:2", topo], "unknown host 'no-such-host.invalid'"),
                (["-np", "2", "-H", "localhost:0", topo], "slots must be at least 1"),
                (["-np", "3", "-H", "localhost:2", topo], "-np 3 is more than the 2 slots"),
                (["-np", "2", os.path.join(d, "missing"), "x"], "does not exist"),
                (["-np", "2", "no-such-program-hvdc"], "is not on PATH"),
                (["-np", "2", notexec], "is not an executable file"),
                (["-np", "2", "--hostfile", hostfile, topo], "slots must be at least 1"),
                (["-np", "2", "-H", "localhost:2", "--hostfile", hostfile, topo], "both given"),
                (["-np", "0", topo], "not a whole number >= 1"),
                (["--no-such-option", topo], "unknown option --no-such-option"),
                ([topo], "how many ranks?"),
                (["-np", "2", "--min-np", "3", "--max-np", "2", topo], "more than --max-np"),
                (["-np", "2", "--host-discovery-script", notexec, topo], "not an executable file"),
                (["-np", "2", "-x", "HVDC_TEST_UNSET_VARIABLE", topo], "is not set here"),
            ]
            for argv, words in cases:
                r = hvdcrun(*argv)
                with self.subTest(argv=argv):
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertIn(words, r.stderr)
                    self.assertNotIn("Traceback", r.stderr)
            r = hvdcrun(topo, env={"SLURM_JOB_NODELIST": "node[2-1]", "SLURM_TASKS_PER_NODE": "1"})
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("goes down", r.stderr)
            # elastic mode: the directory it made for the commits is gone again
            self.assertEqual([f for f in os.listdir(".") if f.startswith("hvdc-elastic-")], [])


class HorovodrunFlags(unittest.TestCase):
    """Every flag of horovodrun 0.28.1's parser, in the order horovod/runner/launch.py
    (parse_args) declares it, given to hvdcrun --dry-run: what each becomes in the mpirun
    command and the ranks' environment, or the one line that refuses it (exit status 2). None
    may end in argparse's generic 'unrecognized arguments'."""

    # horovodrun 0.28.1's option strings, in launch.py's order
    OPTIONS = """-v --version -np --num-proc -cb --check-build --disable-cache --start-timeout
        --network-interfaces --network-interface --output-filename --verbose --config-file -p
        --ssh-port -i --ssh-identity-file --fusion-threshold-mb --cycle-time-ms --cache-capacity
        --hierarchical-allreduce --no-hierarchical-allreduce --hierarchical-allgather
        --no-hierarchical-allgather --autotune --no-autotune --autotune-log-file
        --autotune-warmup-samples --autotune-steps-per-sample --autotune-bayes-opt-max-samples
        --autotune-gaussian-process-noise --min-np --min-num-proc --max-np --max-num-proc
        --slots-per-host --elastic-timeout --reset-limit --blacklist-cooldown-range
        --timeline-filename --timeline-mark-cycles --no-timeline-mark-cycles --no-stall-check
        --stall-check --stall-check-warning-time-seconds --stall-check-shutdown-time-seconds
        --mpi-threads-disable --no-mpi-threads-disable --mpi-args --tcp --binding-args
        --num-nccl-streams --thread-affinity --gloo-timeout-seconds --log-level
        --log-with-timestamp --log-without-timestamp -prefix-timestamp
        --prefix-output-with-timestamp --log-hide-timestamp --no-log-hide-timestamp -H --hosts
        -hostfile --hostfile --host-discovery-script --gloo --mpi --jsrun""".split()

    # (flags, words the dry run prints) ; words "EXIT2: ..." expect a refusal with them
    FLAGS = [
        (["-v"], "hvdcrun"),
        (["-np", "2"], "mpirun -np 2 "),
        (["--version"], "hvdcrun"),
        (["--num-proc", "2"], "mpirun -np 2 "),
        (["-cb"], "Collectives:"),
        (["--check-build"], "Collectives:"),
        (["--disable-cache"], "mpirun -np 2 "),            # no cache: checks run every time
        (["--start-timeout", "45"], "--mca orte_startup_timeout 45"),
        (["--network-interfaces", "lo"], "--mca btl_tcp_if_include lo"),
        (["--network-interface", "lo", "--network-interface", "127.0.0.0/8"],
         "--mca btl_tcp_if_include lo,127.0.0.0/8"),
        (["--output-filename", "outdir"], "--output-filename " + os.path.abspath("outdir")),
        (["--verbose"], "mpirun -np 2 "),
        (["--config-file", "CONFIG"], "HVD_FUSION_THRESHOLD=8388608"),
        (["-p", "2222"], "--mca plm_rsh_args '-p 2222'"),
        (["--ssh-port", "2222"], "--mca plm_rsh_args '-p 2222'"),
        (["-i", "/k"], "--mca plm_rsh_args '-i /k'"),
        (["--ssh-identity-file", "/k"], "--mca plm_rsh_args '-i /k'"),
        (["--fusion-threshold-mb", "32"], "HVD_FUSION_THRESHOLD=33554432"),
        (["--cycle-time-ms", "2.5"], "HVD_CYCLE_TIME=2.5"),
        (["--cache-capacity", "2048"], "HVD_CACHE_CAPACITY=2048"),
        (["--hierarchical-allreduce"], "HVD_HIERARCHICAL_ALLREDUCE=1"),
        (["--no-hierarchical-allreduce"], "HVD_HIERARCHICAL_ALLREDUCE=0"),
        (["--hierarchical-allgather"], "HOROVOD_HIERARCHICAL_ALLGATHER=1"),
        (["--no-hierarchical-allgather"], "HOROVOD_HIERARCHICAL_ALLGATHER=0"),
        (["--autotune"], "HVD_AUTOTUNE=1"),
        (["--no-autotune"], "HVD_AUTOTUNE=0"),
        (["--autotune", "--autotune-log-file", "at.csv"],
         "HVD_AUTOTUNE_LOG=" + os.path.abspath("at.csv")),
        (["--autotune", "--autotune-warmup-samples", "5"], "HOROVOD_AUTOTUNE_WARMUP_SAMPLES=5"),
        (["--autotune", "--autotune-steps-per-sample", "7"],
         "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=7"),
        (["--autotune", "--autotune-bayes-opt-max-samples", "9"],
         "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=9"),
        (["--autotune", "--autotune-gaussian-process-noise", "0.5"],
         "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.5"),
        (["--min-np", "1"], "HVD_ELASTIC_DIR="),
        (["--min-num-proc", "1"], "HVD_ELASTIC_DIR="),
        (["--max-np", "2"], "HVD_ELASTIC_DIR="),
        (["--max-num-proc", "2"], "HVD_ELASTIC_DIR="),
        (["--min-np", "1", "--slots-per-host", "2"], "HVD_ELASTIC_DIR="),
        (["--min-np", "1", "--elastic-timeout", "30"], "HVD_ELASTIC_DIR="),
        (["--min-np", "1", "--reset-limit", "2"], "HVD_ELASTIC_DIR="),
        (["--min-np", "1", "--blacklist-cooldown-range", "10", "60"], "HVD_ELASTIC_DIR="),
        (["--timeline-filename", "t.json"], "HVD_TIMELINE=" + os.path.abspath("t.json")),
        (["--timeline-mark-cycles"], "HVD_TIMELINE_MARK_CYCLES=1"),
        (["--no-timeline-mark-cycles"], "HVD_TIMELINE_MARK_CYCLES=0"),
        (["--no-stall-check"], "HVD_STALL_CHECK_DISABLE=1"),
        (["--stall-check"], "HVD_STALL_CHECK_DISABLE=0"),
        (["--stall-check-warning-time-seconds", "30"], "HVD_STALL_CHECK_TIME=30.0"),
        (["--stall-check-shutdown-time-seconds", "90"], "HVD_STALL_SHUTDOWN_TIME=90.0"),
        (["--mpi-threads-disable"], "HOROVOD_MPI_THREADS_DISABLE=1"),
        (["--no-mpi-threads-disable"], "HOROVOD_MPI_THREADS_DISABLE=0"),
        (["--mpi-args=--mca btl_base_verbose 0"], "--mca btl_base_verbose 0"),
        (["--tcp"], "NCCL_IB_DISABLE=1"),
        (["--binding-args", "--bind-to core --map-by socket"], "--bind-to core --map-by socket"),
        (["--num-nccl-streams", "2"], "HOROVOD_NUM_NCCL_STREAMS=2"),
        (["--thread-affinity", "1"], "HVD_THREAD_AFFINITY=1"),
        (["--gloo-timeout-seconds", "60"], "HOROVOD_GLOO_TIMEOUT_SECONDS=60"),
        (["--log-level", "FATAL"], "HVD_LOG_LEVEL=fatal"),
        (["--log-with-timestamp"], "HVD_LOG_HIDE_TIME=0"),
        (["--log-without-timestamp"], "HVD_LOG_HIDE_TIME=1"),
        (["-prefix-timestamp"], "--timestamp-output"),
        (["--prefix-output-with-timestamp"], "--timestamp-output"),
        (["--log-hide-timestamp"], "HVD_LOG_HIDE_TIME=1"),
        (["--no-log-hide-timestamp"], "HVD_LOG_HIDE_TIME=0"),
        (["-H", "localhost:2"], "-H localhost:2"),
        (["--hosts", "localhost:2"], "-H localhost:2"),
        (["-hostfile", "HOSTFILE"], "-H localhost:2"),
        (["--hostfile", "HOSTFILE"], "-H localhost:2"),
        (["--host-discovery-script", "DISCOVER"], "HVD_ELASTIC_DIR="),
        (["--gloo"], "EXIT2: --gloo: hvdcrun runs libhvdc on MPI"),
        (["--mpi"], "mpirun -np 2 "),
        (["--jsrun"], "EXIT2: --jsrun: hvdcrun starts the ranks with Open MPI's mpirun"),
    ]

    def test_every_flag(self):
        with tempfile.TemporaryDirectory() as d:
            files = {"CONFIG": ("config.yaml", "params:\n  fusion_threshold_mb: 8\n"),
                     "HOSTFILE": ("hosts", "localhost slots=2\n"),
                     "DISCOVER": ("discover.sh", "#!/bin/sh\necho localhost:2\n")}
            for word, (name, text) in files.items():
                with open(os.path.join(d, name), "w") as f:
                    f.write(text)
                os.chmod(os.path.join(d, name), 0o755)
            seen = set()
            for flags, words in self.FLAGS:
                flags = [os.path.join(d, files[f][0]) if f in files else f for f in flags]
                seen.update(f.split("=")[0] for f in flags if f in self.OPTIONS or
                            f.split("=")[0] in self.OPTIONS)
                argv = ["--dry-run"] + flags
                if not any(f in flags for f in ("-v", "--version", "-cb", "--check-build")):
                    argv += ([] if {"-np", "--num-proc"} & set(flags) else
                             ["-np", "2"]) + ["python3", "-c", "pass"]
                r = hvdcrun(*argv)
                with self.subTest(flags=flags):
                    self.assertNotIn("unrecognized arguments", r.stderr)
                    self.assertNotIn("Traceback", r.stderr)
                    if words.startswith("EXIT2: "):
                        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                        self.assertIn(words[len("EXIT2: "):], r.stderr)
                        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                    else:
                        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                        self.assertIn(words, r.stdout, r.stderr)
            # every option string of horovodrun's parser was given at least once
            self.assertEqual(sorted(set(self.OPTIONS) - seen), [])
            self.assertEqual(len(self.OPTIONS), 69)

    def test_abbreviations_and_unknown(self):
        """horovodrun's argparse takes an unambiguous prefix of a long option."""
        r = hvdcrun("--dry-run", "-np", "2", "--fusion-threshold", "4", "python3", "-c", "pass")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("HVD_FUSION_THRESHOLD=4194304", r.stdout)
        r = hvdcrun("--dry-run", "-np", "2", "--autotune-", "python3", "-c", "pass")
        self.assertEqual(r.returncode, 2)
        self.assertIn("is ambiguous", r.stderr)
        r = hvdcrun("--dry-run", "-np", "2", "--no-such-flag", "python3", "-c", "pass")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option --no-such-flag (neither hvdcrun nor horovodrun", r.stderr)

    def test_config_file(self):
        """Horovod's YAML keys; flags on the command line win over the file, wherever given."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.yaml")
            with open(path, "w") as f:
                f.write("controller: mpi\nparams:\n  fusion_threshold_mb: 8\n  cycle_time_ms: 3\n"
                        "  cache_capacity: 512\n  hierarchical_allreduce: true\n"
                        "autotune:\n  enabled: true\n  log_file: at.csv\n  warmup_samples: 2\n"
                        "timeline:\n  filename: tl.json\n  mark_cycles: true\n"
                        "stall_check:\n  enabled: false\n  warning_time_seconds: 20\n"
                        "library_options:\n  num_nccl_streams: 2\n  thread_affinity: 0\n"
                        "logging:\n  level: DEBUG\n  with_timestamp: true\n")
            r = hvdcrun("--dry-run", "-np", "2", "--cycle-time-ms", "7", "--config-file", path,
                        "python3", "-c", "pass")
            self.assertEqual(r.returncode, 0, r.stderr)
            for words in ("HVD_FUSION_THRESHOLD=8388608", "HVD_CYCLE_TIME=7.0",
                          "HVD_CACHE_CAPACITY=512", "HVD_HIERARCHICAL_ALLREDUCE=1",
                          "HVD_AUTOTUNE=1", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES=2",
                          "HVD_TIMELINE_MARK_CYCLES=1", "HVD_STALL_CHECK_DISABLE=1",
                          "HVD_STALL_CHECK_TIME=20.0", "HOROVOD_NUM_NCCL_STREAMS=2",
                          "HVD_THREAD_AFFINITY=0", "HVD_LOG_LEVEL=debug", "HVD_LOG_HIDE_TIME=0"):
                self.assertIn(words, r.stdout)
            for text, words in (("params: [1]\n", "'params' must be a mapping"),
                                ("params:\n  fusion_mb: 1\n", "params has no key 'fusion_mb'"),
                                ("controller: gloo\n", "--gloo: hvdcrun runs libhvdc on MPI"),
                                ("params:\n  cycle_time_ms: -1\n", "must be a number >= 0"),
                                ("autotune:\n  gaussian_process_noise: 2\n", "must be in [0, 1]"),
                                ("{{", "is not YAML")):
                with open(path, "w") as f:
                    f.write(text)
                r = hvdcrun("--dry-run", "-np", "2", "--config-file", path, "python3", "-c", "pass")
                with self.subTest(text=text):
                    self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                    self.assertIn(words, r.stderr)


class OwnFlags(unittest.TestCase):
    def test_diagnostics_flags(self):
        """hvdcrun's own --report and --host-timeout, beside horovodrun's flags."""
        r = hvdcrun("--dry-run", "-np", "2", "--report", "5", "--host-timeout", "2.5",
                    "python3", "-c", "pass")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("HVD_REPORT=5.0", r.stdout)
        self.assertIn("HVD_HOST_TIMEOUT=2.5", r.stdout)
        r = hvdcrun("--dry-run", "-np", "2", "--host-timeout", "-1", "python3", "-c", "pass")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("'-1' is not a number >= 0", r.stderr)


class Runs(unittest.TestCase):
    def test_dry_run_and_slurm(self):
        r = hvdcrun("--dry-run", "-np", "2", "python3", "-c", "pass")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--bind-to none", r.stdout)
        self.assertIn("-np 2 -H localhost:2", r.stdout)
        # inside a Slurm allocation, no -np: its nodes and tasks
        r = hvdcrun("--dry-run", "python3", "-c", "pass",
                    env={"SLURM_JOB_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "3"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("-np 3 -H localhost:3", r.stdout)

    def test_python_program(self):
        script = os.path.join(HERE, "ranks.py")
        r = hvdcrun("-np", "3", "python3", script)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = sorted(line for line in r.stdout.splitlines() if line.startswith("rank "))
        self.assertEqual([line.split()[:4] for line in lines],
                         [["rank", str(i), "of", "3"] for i in range(3)], r.stdout)

    def test_output_filename(self):
        """horovodrun --output-filename with MPI hands the directory to mpirun: each rank's
        stdout and stderr in DIR/1/rank.N/ (Open MPI's layout), and on the terminal too."""
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "logs")
            r = hvdcrun("-np", "2", "--output-filename", out, "python3", "-c",
                        "import os, sys; r = os.environ['OMPI_COMM_WORLD_RANK']; "
                        "print('out of rank', r); print('err of rank', r, file=sys.stderr)")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for rank in (0, 1):
                with open(os.path.join(out, "1", "rank.%d" % rank, "stdout")) as f:
                    self.assertEqual(f.read(), "out of rank %d\n" % rank)
                with open(os.path.join(out, "1", "rank.%d" % rank, "stderr")) as f:
                    self.assertEqual(f.read(), "err of rank %d\n" % rank)
            self.assertIn("out of rank 1", r.stdout)

    def test_check_build(self):
        r = hvdcrun("--check-build")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("libhvdc:  " + os.path.realpath(os.path.join(BUILD, "libhvdc")), r.stdout)
        self.assertIn("HVD_FUSION_THRESHOLD", r.stdout)
        self.assertRegex(r.stdout, r"\[X\] autotune +fusion threshold")
        self.assertIn("HVD_AUTOTUNE_LOG", r.stdout)

    def test_autotune_runs(self):
        r = hvdcrun("--dry-run", "-np", "2", "--autotune", "python3", "-c", "pass")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("HVD_AUTOTUNE", r.stdout)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_hvdcrun.py BUILD_DIR [unittest args]")
    BUILD = os.path.abspath(sys.argv.pop(1))
    HVDCRUN = os.path.join(BUILD, "hvdcrun")
    unittest.main(verbosity=2)
