#!/usr/bin/python3
"""test_hvdcrun_network.py - what reaches every rank, and the network hvdcrun keeps a job on:
NCCL_*, HVD_* and HOROVOD_* variables set where hvdcrun runs travel to every rank (-x); the
names given to --network-interfaces also become NCCL_SOCKET_IFNAME (as horovodrun sets it), a
CIDR network does not (NCCL takes names) and the user's own NCCL_SOCKET_IFNAME wins; a malformed
value exits 2; the choice of one network among those the hosts share (hvdcrun --check). Ends
with a real 2-rank run under build/hvdcrun whose ranks print what they received.

Usage: test_hvdcrun_network.py BUILD_DIR      (meson: suite launcher; ~3 s)
The verdict is the exit status (unittest's).
"""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher"))
import hvdcrun                     # noqa: E402  (launcher/hvdcrun.py: its options)
import hvdcrun_mpirun as mpirun    # noqa: E402
import hvdcrun_network as network  # noqa: E402
from hvdcrun_hosts import UsageError  # noqa: E402

BUILD = None  # set from argv


def command(env, network_interfaces=None, x=()):
    """The mpirun command for 2 ranks here, with only what these tests vary set (the options
    parsed by hvdcrun's own parser)."""
    words = ["-np", "2", "--mpirun", "mpirun"]
    words += ["--network-interfaces", network_interfaces] if network_interfaces else []
    for v in x:
        words += ["-x", v]
    args = hvdcrun.parse_args(words + ["./prog"])
    argv, run_env, _ = mpirun.mpirun_command(args, [("localhost", 2)], 2, env, cpus=64)
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-x"], argv, run_env


class PassedThrough(unittest.TestCase):
    def test_nccl_hvd_horovod_travel(self):
        env = {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0", "HVD_CYCLE_TIME": "2",
               "HOROVOD_FUSION_THRESHOLD": "0", "NCCLX": "no", "MY_NCCL_DEBUG": "no"}
        xs, _, run_env = command(env)
        for name in ("NCCL_DEBUG", "NCCL_IB_HCA", "HVD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD"):
            self.assertIn(name, xs)
        self.assertNotIn("NCCLX", xs)
        self.assertNotIn("MY_NCCL_DEBUG", xs)
        self.assertEqual(run_env["NCCL_DEBUG"], "INFO")

    def test_interface_names_set_nccl(self):
        xs, argv, run_env = command({}, "eth0,ib0")
        self.assertEqual(run_env["NCCL_SOCKET_IFNAME"], "eth0,ib0")
        self.assertIn("NCCL_SOCKET_IFNAME", xs)
        self.assertIn("btl_tcp_if_include eth0,ib0", " ".join(argv))

    def test_a_network_does_not(self):
        xs, argv, run_env = command({}, "10.0.0.0/24")
        self.assertNotIn("NCCL_SOCKET_IFNAME", run_env)
        self.assertIn("oob_tcp_if_include 10.0.0.0/24", " ".join(argv))
        _, _, run_env = command({}, "10.0.0.0/24,eth0")  # names and a network: the names
        self.assertEqual(run_env["NCCL_SOCKET_IFNAME"], "eth0")

    def test_users_own_value_wins(self):
        xs, _, run_env = command({"NCCL_SOCKET_IFNAME": "=ib0"}, "eth0")
        self.assertEqual(run_env["NCCL_SOCKET_IFNAME"], "=ib0")
        self.assertIn("NCCL_SOCKET_IFNAME", xs)
        _, _, run_env = command({}, "eth0", x=["NCCL_SOCKET_IFNAME=ib1"])  # -x VAR=value too
        self.assertEqual(run_env["NCCL_SOCKET_IFNAME"], "ib1")


class Values(unittest.TestCase):
    def test_split(self):
        self.assertEqual(network.split_interfaces("eth0, 10.1.2.3/16,veth-node1"),
                         (["eth0", "veth-node1"], ["10.1.0.0/16"]))
        for bad in ("10.0.0.0/33", "eth0;rm", "eth0,,eth1", "a b"):
            with self.assertRaises(UsageError, msg=bad):
                network.split_interfaces(bad)

    def test_this_hosts_interfaces(self):
        found = network.interfaces()
        self.assertIn(("lo", "127.0.0.1", 8), found)
        self.assertEqual(found[-1][0], "lo")  # loopback last

    def test_pick(self):
        shared = {"10.0.0.0/24": {}, "192.168.0.0/16": {}, "10.0.1.0/24": {}}
        self.assertEqual(network.pick_network(shared, ["192.168.3.4"]), "192.168.0.0/16")
        self.assertEqual(network.pick_network(shared, ["172.16.0.1"]), "10.0.0.0/24")
        self.assertIsNone(network.pick_network({}, ["10.0.0.1"]))
        mca, nccl = network.network_settings("10.0.0.0/24", ["veth-b", "veth-a", "veth-a"])
        self.assertEqual(nccl, {"NCCL_SOCKET_IFNAME": "=veth-a,veth-b"})
        self.assertEqual(mca[mca.index("btl_tcp_if_include") + 1], "10.0.0.0/24")


class Runs(unittest.TestCase):
    def run_hvdcrun(self, *argv, env=None):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "HVD_", "HOROVOD_", "NCCL_"))}
        e.update(env or {})
        return subprocess.run([os.path.join(BUILD, "hvdcrun")] + list(argv), capture_output=True,
                              text=True, timeout=60, env=e)

    def test_ranks_receive_them(self):
        # One write(2) per rank: a line printed in pieces can come out cut by the other rank's.
        show = ("import os; e = os.environ; os.write(1, ('rank %s %s %s %s\\n' % ("
                "e['OMPI_COMM_WORLD_RANK'], e.get('NCCL_SOCKET_IFNAME'), e.get('NCCL_DEBUG'), "
                "e.get('HOROVOD_CYCLE_TIME'))).encode())")
        r = self.run_hvdcrun("-np", "2", "--network-interfaces", "lo", "python3", "-c", show,
                             env={"NCCL_DEBUG": "WARN", "HOROVOD_CYCLE_TIME": "3"})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = sorted(line for line in r.stdout.splitlines() if line.startswith("rank "))
        self.assertEqual(lines, ["rank 0 lo WARN 3", "rank 1 lo WARN 3"], r.stdout)

    def test_malformed_value(self):
        r = self.run_hvdcrun("-np", "2", "--network-interfaces", "10.0.0.0/40", "python3", "-c",
                             "pass")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("'10.0.0.0/40' is not a network", r.stderr)
        self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_hvdcrun_network.py BUILD_DIR [unittest args]")
    BUILD = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
