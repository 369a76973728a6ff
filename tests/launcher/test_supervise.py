#!/usr/bin/python3
"""test_supervise.py - hvdcrun's guard against a job that a lost host left running
(launcher/hvdcrun_supervise.py): it knows libhvdc's lines naming a lost host, stops mpirun and
what it started once the grace period passes, and leaves a job that ends by itself alone.
Fake mpiruns (shell one-liners) stand in for the real one; the grace is shortened.

Usage: test_supervise.py      (meson: suite launcher; ~3 s). The verdict is the exit status.
"""
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher"))
import hvdcrun_supervise as supervise  # noqa: E402

# the two lines libhvdc's host watch writes (libhvdc/src/runtime/watch.c)
LOST = ("[hvdc error rank 0] host 'node2' (ranks 2-3) is lost: rank 3 sent no heartbeat for "
        "29.9 s (HVD_HOST_TIMEOUT=30): the host is down, frozen or cut off from the network, or "
        "rank 3's process is stopped")
STOPPED = ("[hvdc error rank 2] rank 1 (host 'gpu-07.cluster', pid 4711) stopped answering: no "
           "heartbeat for 30.0 s (HVD_HOST_TIMEOUT=30); its process is stopped (SIGSTOP, or a "
           "debugger)")


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


class LostLines(unittest.TestCase):
    def test_names_the_host(self):
        self.assertEqual(supervise.lost_host(LOST), "node2")
        self.assertEqual(supervise.lost_host(STOPPED), "gpu-07.cluster")
        self.assertEqual(supervise.lost_host("host 'n1' (rank 0) is lost: ..."), "n1")

    def test_other_lines_name_nothing(self):
        for line in ("rank 2 (pid 7) died: its process on the same node as rank 1 is gone",
                     "stall: for 60 s (HVD_STALL_CHECK_TIME=60) the others have waited",
                     "host 'node2' is lost (libhvdc's host watch) and mpirun has not ended"):
            self.assertIsNone(supervise.lost_host(line), line)


class Guarding(unittest.TestCase):
    def setUp(self):
        self.grace = supervise.LOST_GRACE_S
        supervise.LOST_GRACE_S = 0.3
        self.said = []

    def tearDown(self):
        supervise.LOST_GRACE_S = self.grace

    def test_stops_a_job_that_does_not_end(self):
        # a "mpirun" with a child of its own (a rank), neither of which ends
        proc = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE,
                                text=True)
        child = int(proc.stdout.readline())
        guard = supervise.Guard(proc, self.said.append)
        self.assertEqual(guard.scan(LOST), "node2")
        self.assertEqual(guard.scan(STOPPED), "gpu-07.cluster")  # named, for elastic's blame
        self.assertEqual(guard.lost, "node2", "the first lost host arms it, once")
        proc.wait(timeout=5)
        self.assertTrue(guard.stopped)
        deadline = time.monotonic() + 2
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(alive(child), "what mpirun started is stopped too")
        self.assertIn("host 'node2' is lost", self.said[0])

    def test_leaves_a_job_that_ends(self):
        proc = subprocess.Popen(["sh", "-c", "exit 3"])
        guard = supervise.Guard(proc, self.said.append)
        guard.scan(LOST)
        self.assertEqual(proc.wait(timeout=5), 3)
        time.sleep(0.5)
        self.assertFalse(guard.stopped)
        self.assertEqual(self.said, [])

    def test_run_ends_with_status_1(self):
        # run() echoes the fake mpirun's stderr and stops it: status 1, within the grace
        started = time.monotonic()
        rc = supervise.run(["sh", "-c", 'echo "$LINE" >&2; sleep 60'],
                           dict(os.environ, LINE=LOST), self.said.append)
        self.assertEqual(rc, 1)
        self.assertLess(time.monotonic() - started, 5)

    def test_run_passes_the_status_on(self):
        self.assertEqual(
            supervise.run(["sh", "-c", "exit 7"], dict(os.environ), self.said.append), 7)
        self.assertEqual(supervise.run(["sh", "-c", "kill -TERM $$"], dict(os.environ),
                                       self.said.append), 128 + 15)


if __name__ == "__main__":
    unittest.main(verbosity=1)
