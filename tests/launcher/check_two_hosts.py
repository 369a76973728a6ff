#!/usr/bin/python3
"""check_two_hosts.py - hvdcrun --check across the two namespaced hosts of tests/two_hosts.sh
(node1 10.77.0.1 on veth-node1, node2 10.77.0.2 on veth-node2; hvdcrun runs on node1 and
reaches node2 through tests/netns/netns_agent.sh, the launch agent the stage gives mpirun). No
--network-interfaces: the check must find the network itself.

  green      --check -np 4 -H node1:2,node2:2 PROGRAM: every row ok, 10.77.0.0/24 picked with
             NCCL_SOCKET_IFNAME==veth-node1,veth-node2; then the program runs on 4 ranks and the
             ranks on node2 see that NCCL_SOCKET_IFNAME
  link-down  node2's link down (ip -n node2 link set veth-node2 down): exit status 1 within 15 s,
             the table's FAIL row and the last line name node1–node2 and the step (network);
             the link is up again afterwards whatever happens

Prints hvdcrun's output (the closing note quotes it). Needs root and the stage's namespaces.
Usage: check_two_hosts.py --build BUILD --netns DIR --wrap WORDS SCENARIO
  WORDS: the stage's command prefix that runs a command on node1 (shell words, quoted)
"""
import argparse
import os
import shlex
import subprocess
import sys
import time

PAIR = "node1\u2013node2"
BOUND_S = 15.0
# One write(2) per rank: mpirun forwards each rank's output as it reads it, so a line printed in
# pieces can come out cut by another rank's.
SHOW = ("import os, socket; os.write(1, ('rank %s %s %s\\n' % (os.environ['OMPI_COMM_WORLD_RANK'],"
        " socket.gethostname(), os.environ.get('NCCL_SOCKET_IFNAME'))).encode())")


def run(opts, extra, timeout):
    agent = os.path.join(opts.netns, "netns_agent.sh")
    argv = shlex.split(opts.wrap) + [
        os.path.join(opts.build, "hvdcrun"), "--check", "-np", "4", "-H", "node1:2,node2:2",
        "--mpi-args", "--mca plm_rsh_agent %s --mca btl tcp,vader,self" % agent] + extra
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - t0
    print(r.stdout + r.stderr, end="")
    print("# hvdcrun --check exit status %d after %.1f s" % (r.returncode, took))
    return r, took


def row(out, step, where):
    for line in out.splitlines():
        parts = line.split(None, 3)
        if parts[:2] == [step, where]:
            return parts[2], (parts[3] if len(parts) > 3 else "")
    return None, ""


def green(opts):
    r, _ = run(opts, ["python3", "-c", SHOW], 120)
    problems = []
    for step, where in (("reach", "node1"), ("reach", "node2"), ("versions", "node1,node2"),
                        ("network", PAIR), ("all-reduce", PAIR)):
        result, detail = row(r.stdout, step, where)
        if result != "ok":
            problems.append("%s %s: %s %s" % (step, where, result, detail))
    if "as node2" not in row(r.stdout, "reach", "node2")[1]:
        problems.append("node2 was not reached as node2")
    if "10.77.0.0/24 (node1 veth-node1, node2 veth-node2)" not in row(r.stdout, "network", PAIR)[1]:
        problems.append("the network row does not show 10.77.0.0/24 on veth-node1/veth-node2")
    if "NCCL_SOCKET_IFNAME==veth-node1,veth-node2" not in r.stdout:
        problems.append("no NCCL_SOCKET_IFNAME==veth-node1,veth-node2 picked")
    ranks = sorted(line for line in r.stdout.splitlines() if line.startswith("rank "))
    want = ["rank %d %s =veth-node1,veth-node2" % (i, "node1" if i < 2 else "node2")
            for i in range(4)]
    if ranks != want:
        problems.append("the program's ranks said %s, expected %s" % (ranks, want))
    if r.returncode != 0:
        problems.append("exit status %d" % r.returncode)
    return problems


def link_down(opts):
    subprocess.run(["ip", "-n", "node2", "link", "set", "veth-node2", "down"], check=True)
    try:
        r, took = run(opts, [], 60)
    finally:
        subprocess.run(["ip", "-n", "node2", "link", "set", "veth-node2", "up"], check=True)
    problems = []
    if r.returncode != 1:
        problems.append("exit status %d, expected 1" % r.returncode)
    if took > BOUND_S:
        problems.append("took %.1f s, bound %g s" % (took, BOUND_S))
    if row(r.stdout, "network", PAIR)[0] != "FAIL":
        problems.append("no FAIL row 'network %s'" % PAIR)
    if "at step network, %s:" % PAIR not in r.stdout:
        problems.append("the last line does not name step network and %s" % PAIR)
    return problems


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--netns", required=True)
    p.add_argument("--wrap", required=True)
    p.add_argument("scenario", choices=["green", "link-down"])
    opts = p.parse_args()
    problems = green(opts) if opts.scenario == "green" else link_down(opts)
    for problem in problems:
        print("FAIL: " + problem)
    if not problems:
        print("PASS: hvdcrun --check %s" % opts.scenario)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
