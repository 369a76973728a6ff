#!/usr/bin/python3
"""test_hvdcrun_check.py - hvdcrun --check on one machine: the table's steps on this host (all
green, then a program launched after it), --gpu without a GPU (a FAIL naming the host and CUDA's
reason), hosts that cannot be reached (an agent that fails like ssh, one that never answers:
each named within the bound, the hung agent killed), --check refused in elastic mode; and its
parts: which launch agent a launch would use, the rounds of disjoint pairs, the versions that
must agree. Across two real hosts (all green, a link down): tests/two_hosts.sh.

The hosts that cannot be reached are documentation addresses (192.0.2.0/24) handed to a fake
agent that never touches the network.
Usage: test_hvdcrun_check.py BUILD_DIR      (meson: suite launcher; ~15 s, 10 of them the bound)
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
import hvdcrun_check as check  # noqa: E402

BUILD = None  # set from argv

FAKE_AGENT = """#!/bin/sh
# like ssh: options, then the host, then the command line
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
case "$1" in
192.0.2.1) echo "ssh: connect to host $1 port 22: No route to host" >&2; exit 255 ;;
192.0.2.2) echo $$ > "$(dirname "$0")/hung.pid"; exec sleep 600 ;;
esac
exit 1
"""


def hvdcrun(*argv, env=None, timeout=90):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("SLURM_", "HVD_", "HOROVOD_", "NCCL_"))}
    e.update(env or {})
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(BUILD, "hvdcrun")] + list(argv), capture_output=True,
                       text=True, timeout=timeout, env=e)
    return r, time.monotonic() - t0


def rows(out):
    """{(step, host(s)): (result, detail)} from the table."""
    found = {}
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[0] in ("reach", "versions", "gpus", "network", "all-reduce"):
            found[parts[0], parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "")
    return found


class OneHost(unittest.TestCase):
    def test_green_then_the_program(self):
        r, _ = hvdcrun("--check", "-np", "2", "python3", os.path.join(HERE, "ranks.py"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        t = rows(r.stdout)
        self.assertEqual(t["reach", "localhost"][0], "ok", r.stdout)
        self.assertRegex(t["versions", "localhost"][1], r"^libhvdc \d+\.\d+\.\d+, Open MPI v")
        self.assertEqual(t["gpus", "-"][0], "skip")
        self.assertEqual(t["all-reduce", "localhost"][0], "ok", r.stdout)
        self.assertIn("2 ranks, 256 KiB int32 sum correct", t["all-reduce", "localhost"][1])
        self.assertIn("hvdcrun --check: all green after", r.stdout)
        ranks = sorted(line.split()[1] for line in r.stdout.splitlines()
                       if line.startswith("rank "))
        self.assertEqual(ranks, ["0", "1"], r.stdout)  # then the program ran

    def test_gpu_job_without_gpus(self):
        r, _ = hvdcrun("--check", "--gpu", "-np", "2")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        result, detail = rows(r.stdout)["gpus", "localhost"]
        self.assertEqual(result, "FAIL", r.stdout)
        self.assertRegex(detail, r"^(0 GPUs for 2 ranks|libhvdc there has no GPU backend)")
        self.assertIn("FAILED after", r.stdout)
        self.assertIn("at step gpus, localhost:", r.stdout)

    def test_refused_in_elastic_mode(self):
        r, _ = hvdcrun("--check", "-np", "2", "--min-np", "1", "python3", "-c", "pass")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--check checks the hosts of a fixed launch", r.stderr)


class Unreachable(unittest.TestCase):
    def test_named_within_the_bound(self):
        with tempfile.TemporaryDirectory() as d:
            agent = os.path.join(d, "agent.sh")
            with open(agent, "w") as f:
                f.write(FAKE_AGENT)
            os.chmod(agent, 0o755)
            r, took = hvdcrun("--check", "-H", "localhost:1,192.0.2.1:1,192.0.2.2:1",
                              "--mpi-args", "--mca plm_rsh_agent " + agent)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            t = rows(r.stdout)
            self.assertEqual(t["reach", "localhost"][0], "ok", r.stdout)
            self.assertEqual(t["reach", "192.0.2.1"],
                             ("FAIL", "through agent.sh: exit status 255: ssh: connect to host "
                                      "192.0.2.1 port 22: No route to host"), r.stdout)
            self.assertEqual(t["reach", "192.0.2.2"],
                             ("FAIL", "through agent.sh: no answer within 10 s"), r.stdout)
            self.assertEqual(t["all-reduce", "localhost\u2013192.0.2.1"][0], "skip", r.stdout)
            self.assertIn("FAILED after", r.stdout)
            self.assertIn("at step reach, 192.0.2.1", r.stdout)
            self.assertLess(took, check.REACH_S + 5)
            with open(os.path.join(d, "hung.pid")) as f:
                hung = int(f.read())
            time.sleep(0.2)
            self.assertFalse(os.path.exists("/proc/%d" % hung), "the hung agent was left running")


class Parts(unittest.TestCase):
    def args(self, **kw):
        a = dict(mpi_args=None, ssh_port=None, ssh_identity_file=None)
        a.update(kw)
        return types.SimpleNamespace(**a)

    def test_launch_agent(self):
        kind, words = check.launch_agent(self.args(ssh_port=2222, ssh_identity_file="k"))
        self.assertEqual((kind, words[:5]), ("rsh", ["ssh", "-p", "2222", "-i", "k"]))
        self.assertIn("BatchMode=yes", words)
        kind, words = check.launch_agent(self.args(
            mpi_args="--mca plm_rsh_agent '/x/agent.sh -v' --mca plm_rsh_args -q"))
        self.assertEqual((kind, words), ("rsh", ["/x/agent.sh", "-v", "-q"]))
        self.assertEqual(check.probe_command(("rsh", ["ag"]), "192.0.2.9", ["p", "a b"])[0],
                         ["ag", "192.0.2.9", "p 'a b'"])
        self.assertEqual(check.probe_command(("rsh", ["ag"]), "localhost", ["p"])[0], ["p"])

    def test_srun_inside_an_allocation(self):
        with tempfile.TemporaryDirectory() as d:
            srun = os.path.join(d, "srun")
            with open(srun, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(srun, 0o755)
            saved = dict(os.environ)
            os.environ.update(SLURM_JOB_ID="7", PATH=d + ":" + os.environ["PATH"])
            try:
                kind, words = check.launch_agent(self.args())
                named = check.launch_agent(self.args(mpi_args="--mca plm_rsh_agent ssh"))
            finally:
                os.environ.clear()
                os.environ.update(saved)
            self.assertEqual(kind, "srun")
            self.assertEqual(check.probe_command((kind, words), "192.0.2.9", ["p"])[0][-2:],
                             ["--nodelist=192.0.2.9", "p"])
            self.assertEqual(named[0], "rsh")  # a named agent wins, as in Open MPI

    def test_rounds(self):
        for n in range(1, 8):
            names = ["h%d" % i for i in range(n)]
            seen = []
            for r in check.rounds(names):
                flat = [h for p in r for h in p]
                self.assertEqual(len(flat), len(set(flat)), r)  # disjoint within a round
                seen += [tuple(sorted(p)) for p in r]
            want = {(a, b) for i, a in enumerate(names) for b in names[i + 1:]}
            self.assertEqual(sorted(seen), sorted(want), n)
            self.assertLessEqual(len(check.rounds(names)), max(1, n - (n % 2 == 0)))

    def test_versions_must_agree(self):
        def hello(mpi, nccl):
            return {"versions": {"version": "0.1.0", "mpi": "yes, " + mpi,
                                 "cuda": "yes, CUDA 13.0 (/usr/local/cuda)",
                                 "nccl_running": nccl}}
        table = check.Table()
        check.step_versions({"a": hello("Open MPI v4.1.4", "2.28.9"),
                             "b": hello("Open MPI v4.1.4", "2.28.9")}, table)
        self.assertEqual(table.rows[-1], ("versions", "a,b", "ok", "libhvdc 0.1.0, Open MPI "
                                          "v4.1.4, CUDA 13.0, NCCL 2.28.9"))
        check.step_versions({"a": hello("Open MPI v4.1.4", "2.28.9"),
                             "b": hello("Open MPI v5.0.3", "2.28.9"),
                             "c": {"versions": {"error": "cannot load /x/libhvdc.so"}}}, table)
        self.assertEqual(table.rows[-2], ("versions", "c", "FAIL", "cannot load /x/libhvdc.so"))
        self.assertEqual(table.rows[-1][2:], ("FAIL", "MPI differs: Open MPI v4.1.4 on a; "
                                                      "Open MPI v5.0.3 on b"))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_hvdcrun_check.py BUILD_DIR [unittest args]")
    BUILD = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
