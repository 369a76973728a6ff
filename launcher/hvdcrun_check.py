"""hvdcrun_check - `hvdcrun --check`: a pre-flight check of the hosts a real launch would use
(-H, --hostfile or the Slurm allocation), so that a wrong interface, a firewall or a host that
is down is named before a job hangs on it. Each step is bounded; a failure names its step and
its host or pair of hosts:

  reach       every host answers through the launch agent mpirun would use (ssh with -p/-i,
              --mca plm_rsh_agent from --mpi-args, srun inside a Slurm allocation; this host
              directly) and runs hvdcrun_probe.py with this Python                  REACH_S
  versions    libhvdc, Open MPI (the one libhvdc loads), CUDA and NCCL agree on every host
  gpus        with --gpu: every host has at least as many GPUs as the ranks it gets
  network     every pair of hosts connects both ways over TCP; a network counts for a pair
              when each connection came from the network it went to (horovodrun's rule, which
              weeds out routes through other networks and NATs); of the networks every pair
              shares one is picked (hvdcrun_network.pick_network)                   CONNECT_S
  all-reduce  a 256 KiB all-reduce between every pair of hosts, one rank each, under mpirun
              with the picked network (one host: its ranks), in rounds of disjoint pairs
                                                                                  ALLREDUCE_S each
Prints one table, then 'all green' (exit 0) or the first failure (exit 1). With a program after
the options, a green check goes on to launch it on the picked network: Open MPI's
btl/oob_tcp_if_include and NCCL_SOCKET_IFNAME (each host's interface names on it).

Runs in the hvdcrun process: its main thread, plus a thread per probe reading its output.
"""
import base64
import copy
import ipaddress
import json
import os
import queue
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import hvdcrun_hosts as hosts_mod
import hvdcrun_mpirun as mpirun
import hvdcrun_network as network
from hvdcrun_hosts import UsageError, say

REACH_S = 10.0      # horovodrun gives ssh 10 s to connect
CONNECT_S = 3.0     # one TCP connection between two probes
ALLREDUCE_S = 20.0  # mpirun's start across two hosts and one small all-reduce
DASH = "\u2013"     # node1–node2: a pair (host names may hold '-')

ALLREDUCE = r"""
import ctypes, os, socket, sys, time
t0 = time.monotonic()
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib.hvd_last_error.restype = ctypes.c_char_p
def check(status, what):
    if status != 0:
        print("%s on %s failed: %s" % (what, socket.gethostname(), lib.hvd_last_error().decode()))
        sys.exit(1)
check(lib.hvd_init(), "hvd_init")
rank, size = ctypes.c_int(), ctypes.c_int()
check(lib.hvd_rank(ctypes.byref(rank)) or lib.hvd_size(ctypes.byref(size)), "hvd_rank")
n = 1 << 16
buf = (ctypes.c_int32 * n)(*[(i % 7 + 1) * (rank.value + 1) for i in range(n)])
check(lib.hvd_allreduce(b"hvdcrun.check", buf, buf, ctypes.c_size_t(n), 2, 0), "hvd_allreduce")
total = size.value * (size.value + 1) // 2
wrong = [i for i in range(n) if buf[i] != (i % 7 + 1) * total]
check(lib.hvd_shutdown(), "hvd_shutdown")
if wrong:
    print("rank %d on %s: wrong sum at %d elements, first %d" % (rank.value, socket.gethostname(),
                                                                 len(wrong), wrong[0]))
    sys.exit(1)
os.write(1, b"ALLREDUCE-OK %d %.2f\n" % (rank.value, time.monotonic() - t0))
"""


class Table:
    """The rows, printed once at the end: step, host(s), ok/FAIL/skip, what was seen."""

    def __init__(self):
        self.rows = []

    def add(self, step, where, ok, detail):
        self.rows.append((step, where, {True: "ok", False: "FAIL", None: "skip"}[ok], detail))

    def first_failure(self):
        return next((r for r in self.rows if r[2] == "FAIL"), None)

    def print(self):
        width = max([len("host(s)")] + [len(r[1]) for r in self.rows])
        print("%-10s  %-*s  %-6s %s" % ("step", width, "host(s)", "result", "detail"))
        for step, where, result, detail in self.rows:
            print("%-10s  %-*s  %-6s %s" % (step, width, where, result, detail))
        sys.stdout.flush()


# ---- reaching the hosts ----------------------------------------------------------------------

def mca_value(mpi_args, name):
    for i in range(len(mpi_args) - 2):
        if mpi_args[i] in ("--mca", "-mca") and mpi_args[i + 1] == name:
            return mpi_args[i + 2]
    return os.environ.get("OMPI_MCA_" + name)


def launch_agent(args):
    """(kind, words): how mpirun would start its daemon on another host. 'srun' inside a Slurm
    allocation (Open MPI's plm slurm) unless an rsh agent is named; else 'rsh' with the agent
    (plm_rsh_agent, default ssh) and its arguments (plm_rsh_args, -p, -i)."""
    mpi_args = shlex.split(args.mpi_args or "")
    agent = mca_value(mpi_args, "plm_rsh_agent")
    if agent is None and "SLURM_JOB_ID" in os.environ and shutil.which("srun"):
        return "srun", ["srun", "--nodes=1", "--ntasks=1", "--overlap", "--kill-on-bad-exit=1"]
    words = shlex.split((agent or "ssh").split(":")[0])
    words += shlex.split(mca_value(mpi_args, "plm_rsh_args") or "")
    words += ["-p", str(args.ssh_port)] if args.ssh_port else []
    words += ["-i", args.ssh_identity_file] if args.ssh_identity_file else []
    if os.path.basename(words[0]) == "ssh":  # no password prompt, and a bounded connect
        words += ["-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % REACH_S]
    return "rsh", words


def probe_command(agent, host, argv):
    """argv run on host: directly here, as srun's own argv, or as one shell line for rsh."""
    kind, words = agent
    if hosts_mod.is_this_machine(host):
        return argv, "directly (this host)"
    if kind == "srun":
        return words + ["--nodelist=" + host] + argv, "through srun"
    return words + [host, " ".join(shlex.quote(a) for a in argv)], \
        "through " + os.path.basename(words[0])


class Probe:
    """hvdcrun_probe.py running on one host, and the lines it printed."""

    def __init__(self, host, argv, via):
        self.host, self.via, self.t0 = host, via, time.monotonic()
        self.lines, self.err, self.hello = queue.Queue(), [], None
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True).start()

    def _read(self, stream, is_out):
        for line in stream:
            if is_out and line.startswith("HVDCRUN-PROBE "):
                self.lines.put(line[len("HVDCRUN-PROBE "):])
            elif line.strip():
                self.err = (self.err + [line.strip()])[-3:]
        if is_out:
            self.lines.put(None)  # the end

    def wait(self, key, deadline):
        """The probe's next message's key, or None when it ended or the deadline passed."""
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self.lines.put(None)
                return None
            message = json.loads(line)
            if key in message:
                return message[key]

    def why_not(self, limit_s):
        """Why no answer came: the agent's exit status and last words, or the time limit."""
        code = self.proc.poll()
        if code is None:
            return "no answer within %g s" % limit_s
        words = ("; ".join(self.err)) or "nothing on stderr"
        return "exit status %d: %s" % (code, words)

    def send(self, obj):
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def stop(self):
        """Ends the probe: one that answered exits when its input ends, one that never did
        (an agent still waiting on its host) is killed with its process group at once."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2 if self.hello is not None else 0)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def start_probes(args, names, library):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "hvdcrun_probe.py"), "rb") as f:
        source = base64.b64encode(f.read()).decode()
    boot = "import base64, sys; exec(base64.b64decode(sys.argv.pop(1)))"
    token = secrets.token_hex(8)
    deadline = REACH_S + CONNECT_S + 60
    agent = launch_agent(args)
    probes = {}
    for host in names:
        argv = [sys.executable, "-c", boot, source, library, token, str(deadline)]
        probes[host] = Probe(host, *probe_command(agent, host, argv))
    return probes


# ---- the steps ------------------------------------------------------------------------------

def step_reach(probes, table):
    """{host: its hello} of the hosts that answered."""
    deadline = time.monotonic() + REACH_S
    reached = {}
    for host, p in probes.items():
        hello = p.wait("hello", deadline)
        if hello is None:
            table.add("reach", host, False, "%s: %s" % (p.via, p.why_not(REACH_S)))
            continue
        reached[host] = p.hello = hello
        table.add("reach", host, True, "%.2f s, %s, as %s" % (time.monotonic() - p.t0, p.via,
                                                            hello["host"]))
    return reached


def version_texts(v):
    """What must agree, from a host's answer: libhvdc's version, the MPI library it loads, the
    CUDA it was built with (where it lives may differ) and the NCCL it runs with."""
    cuda = v.get("cuda", "no").replace("yes, ", "").split(" (")[0]
    return [("libhvdc", "libhvdc " + v.get("version", "?")),
            ("MPI", v.get("mpi", "no MPI").replace("yes, ", "")),
            ("CUDA", "no CUDA" if cuda.startswith("no") else cuda),
            ("NCCL", "NCCL " + v["nccl_running"] if "nccl_running" in v else "no NCCL")]


def step_versions(reached, table):
    """The versions every host reports must be the same."""
    broken = {h: r["versions"]["error"] for h, r in reached.items() if "error" in r["versions"]}
    for host, why in broken.items():
        table.add("versions", host, False, why)
    hosts = [h for h in reached if h not in broken]
    if not hosts:
        return
    texts = {h: version_texts(reached[h]["versions"]) for h in hosts}
    differ = []
    for i, (label, _) in enumerate(texts[hosts[0]]):
        seen = {}
        for h in hosts:
            seen.setdefault(texts[h][i][1], []).append(h)
        if len(seen) > 1:
            differ.append("%s differs: %s" % (label, "; ".join(
                "%s on %s" % (v, ",".join(hs)) for v, hs in seen.items())))
    same = ", ".join(t for _, t in texts[hosts[0]])
    where = ",".join(hosts) if len(hosts) <= 3 else "all %d hosts" % len(hosts)
    table.add("versions", where, not differ, "; ".join(differ) if differ else same)


def step_gpus(args, reached, ranks, table):
    if not args.gpu:
        table.add("gpus", "-", None, "no GPU job asked for (--gpu: one GPU per rank)")
        return
    for host, hello in reached.items():
        v, need = hello["versions"], ranks[host]
        if "gpus" not in v:
            table.add("gpus", host, False, "libhvdc there has no GPU backend (%s)"
                      % v.get("cuda", "cuda: ?"))
        elif v["gpus"] < need:
            table.add("gpus", host, False, "%d GPUs for %d ranks%s" % (
                v["gpus"], need, ": " + v["gpu_error"] if "gpu_error" in v else ""))
        else:
            table.add("gpus", host, True, "%d GPUs for %d ranks (driver %s)" % (
                v["gpus"], need, v.get("driver", "?")))


def outside_addresses(hello):
    return [(n, a, p) for n, a, p in hello["interfaces"] if not a.startswith("127.")]


def probe_pairs(probes, reached):
    """{(a, b): {network: (a's interface, b's interface)}} for every ordered pair: the networks
    on which a reached b, the connection coming from a's address on that network; and
    {(a, b): why} where it reached none."""
    for a, p in probes.items():
        if a in reached:
            p.send({"timeout": CONNECT_S, "targets": [
                [b, addr, reached[b]["port"]] for b in reached if b != a
                for _, addr, _ in outside_addresses(reached[b])]})
    deadline = time.monotonic() + CONNECT_S + 5
    links, why = {}, {}
    for a in reached:
        results = probes[a].wait("probes", deadline) or []
        mine = {network.network_of(addr, pre): (n, addr) for n, addr, pre in
                outside_addresses(reached[a])}
        for b in reached:
            if b == a:
                continue
            theirs = {addr: (n, network.network_of(addr, pre))
                      for n, addr, pre in outside_addresses(reached[b])}
            links[a, b], failures = {}, []
            for host, addr, ok, seen, reason, secs in results:
                if host != b:
                    continue
                name, net = theirs[addr]
                if ok and net in mine and mine[net][1] == seen:
                    links[a, b][net] = (mine[net][0], name)
                else:
                    failures.append("%s: %s" % (addr, reason if not ok else
                                                "came from %s, not from %s" % (seen, net)))
            if not links[a, b]:
                why[a, b] = "; ".join(failures) or "%s has no interface up but loopback" % b
    return links, why


def step_network(args, probes, reached, table):
    """(picked network, {host: its interface on it}, {(a, b): the networks a pair shares});
    no network picked (None) after a FAIL row."""
    names = list(reached)
    if len(probes) < 2:
        table.add("network", ",".join(probes), None, "one host: no network between hosts")
        return None, {}, {}
    if len(names) < 2:
        table.add("network", "-", None, "not run: fewer than two hosts reached")
        return None, {}, {}
    links, why = probe_pairs(probes, reached)
    common, pairs = None, {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = pairs[a, b] = set(links[a, b]) & set(links[b, a])
            common = both if common is None else common & both
            if both:
                table.add("network", a + DASH + b, True, ", ".join(
                    "%s (%s %s, %s %s)" % (n, a, links[a, b][n][0], b, links[a, b][n][1])
                    for n in sorted(both)))
            else:
                told = ["%s to %s: %s" % (x, y, why[x, y]) for x, y in ((a, b), (b, a))
                        if (x, y) in why] or ["each reached the other on different networks"]
                table.add("network", a + DASH + b, False, "no TCP connection both ways within "
                          "%g s: %s" % (CONNECT_S, "; ".join(told)))
    if any(not nets for nets in pairs.values()):
        return None, {}, pairs
    preferred = [a[4][0] for h in names for a in resolve(h)]
    picked = network.pick_network(allowed_networks(args, common, links), preferred)
    if picked is None:
        table.add("network", "all hosts", False, "no network joins every pair%s" % (
            " among --network-interfaces %s" % args.network_interfaces
            if args.network_interfaces else ""))
        return None, {}, pairs
    ifaces = {a: links[a, b][picked][0] for a in names for b in names if a != b}
    return picked, ifaces, pairs


def allowed_networks(args, common, links):
    """The shared networks --network-interfaces allows (all of them without it)."""
    if not args.network_interfaces:
        return common
    names, nets = network.split_interfaces(args.network_interfaces)
    keep = set()
    for net in common:
        used = {i for pair in links.values() if net in pair for i in pair[net]}
        if used & set(names) or any(ipaddress.ip_network(net).overlaps(ipaddress.ip_network(n))
                                    for n in nets):
            keep.add(net)
    return keep


def resolve(host):
    try:
        return socket.getaddrinfo(host.strip("[]"), None, socket.AF_INET)
    except (socket.gaierror, UnicodeError):
        return []


def rounds(names):
    """Every pair once, in rounds of disjoint pairs (the circle method: n-1 rounds)."""
    ring = list(names) + ([None] if len(names) % 2 else [])
    out = []
    for _ in range(len(ring) - 1):
        pairs = [(ring[i], ring[-1 - i]) for i in range(len(ring) // 2)]
        out.append([p for p in pairs if None not in p])
        ring = [ring[0], ring[-1]] + ring[1:-1]
    return out


def start_allreduce(args, job_hosts, net, nccl_names, library):
    """mpirun of the check's all-reduce on job_hosts [(host, ranks)], kept on network net (and
    NCCL on the interfaces nccl_names, as the job will be)."""
    a = copy.copy(args)
    a.command = [sys.executable, "-c", ALLREDUCE, library]
    a.network_interfaces = net or args.network_interfaces
    env = dict(os.environ)
    if net and nccl_names:
        for k, v in network.network_settings(net, nccl_names)[1].items():
            env.setdefault(k, v)
    np = sum(n for _, n in job_hosts)
    argv, run_env, _ = mpirun.mpirun_command(a, job_hosts, np, env)
    return subprocess.Popen(argv, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True), time.monotonic()


def finish_allreduce(proc, t0, deadline, np):
    """(ok, detail) of one all-reduce run."""
    try:
        out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return False, "no result within %g s (mpirun stopped)" % ALLREDUCE_S
    # Each rank's own words, wherever they land: mpirun forwards the ranks' output as it reads
    # it, and two ranks' lines can come out run together.
    good = set(int(r) for r in re.findall(r"ALLREDUCE-OK (\d+) ", out))
    if proc.returncode == 0 and good == set(range(np)):
        return True, "%d ranks, 256 KiB int32 sum correct, %.2f s" % (np, time.monotonic() - t0)
    said = [line.strip() for line in out.splitlines() if line.strip() and line[0] not in "-*"]
    return False, "mpirun exit status %d: %s" % (proc.returncode, " | ".join(said[-3:]) or
                                                 "no output")


def step_allreduce(args, names, reached, picked, ifaces, pairs, ranks, library, table):
    if len(names) == 1:
        if names[0] in reached:
            proc, t0 = start_allreduce(args, [(names[0], ranks[names[0]])], None, [], library)
            ok, detail = finish_allreduce(proc, t0, t0 + ALLREDUCE_S, ranks[names[0]])
            table.add("all-reduce", names[0], ok, detail)
        return
    order = {h: i for i, h in enumerate(names)}
    rows = {}
    for pairs_now in rounds(names):
        running = []
        for a, b in (sorted(p, key=order.get) for p in pairs_now):
            nets = pairs.get((a, b)) or pairs.get((b, a)) or set()
            net = picked if picked in nets else network.pick_network(nets)
            if net is None:
                rows[a, b] = (None, "not run: %s" % (
                    "a host was not reached" if a not in reached or b not in reached
                    else "no network between them"))
                continue
            nccl_names = [ifaces[h] for h in (a, b)] if net == picked else []
            running.append((a, b, net) + start_allreduce(args, [(a, 1), (b, 1)], net,
                                                         nccl_names, library))
        deadline = time.monotonic() + ALLREDUCE_S
        for a, b, net, proc, t0 in running:
            ok, detail = finish_allreduce(proc, t0, deadline, 2)
            rows[a, b] = (ok, detail + ", on " + net)
    for (a, b), (ok, detail) in sorted(rows.items(), key=lambda r: (order[r[0][0]],
                                                                    order[r[0][1]])):
        table.add("all-reduce", a + DASH + b, ok, detail)


# ---- hvdcrun --check ----------------------------------------------------------------------------

def run_steps(args, names, ranks, library):
    """(table, picked network, {host: interface on it})."""
    table = Table()
    probes = start_probes(args, names, library)
    try:
        reached = step_reach(probes, table)
        step_versions(reached, table)
        step_gpus(args, reached, ranks, table)
        picked, ifaces, pairs = step_network(args, probes, reached, table)
    finally:
        for p in probes.values():
            p.stop()
    step_allreduce(args, names, reached, picked, ifaces, pairs, ranks, library, table)
    return table, picked, ifaces


def checked_hosts(args):
    """(hosts, where they came from, np) as a launch would take them, or UsageError."""
    if (args.min_np or args.max_np or args.host_discovery_script) is not None:
        raise UsageError("--check checks the hosts of a fixed launch (-H, --hostfile or a Slurm "
                         "allocation); leave out --min-np, --max-np and --host-discovery-script")
    where, what = hosts_mod.static_hosts(args)
    np = args.np or sum(s for _, s in where)
    hosts_mod.check_np(np, where, what, args.oversubscribe)
    hosts_mod.check_resolvable(where, what)
    mpirun.check_mpirun(args.mpirun)
    if args.command:
        mpirun.check_program(args.command)
    network.split_interfaces(args.network_interfaces)
    return where, what, np


def main(args, library, launch):
    """hvdcrun --check [options] [PROGRAM ...]: the table and verdict; with a program, a green
    check launches it (launch(args, hosts, np, env)) on the network picked."""
    try:
        where, what, np = checked_hosts(args)
        if library is None:
            raise UsageError("--check: libhvdc not found (hvdcrun --check-build says where it "
                             "looked)")
    except UsageError as e:
        say(str(e))
        return 2
    t0 = time.monotonic()
    ranks = dict(hosts_mod.take_slots(where, np))
    names = [h for h, _ in where if h in ranks]
    print("hvdcrun --check: %d host%s from %s (%s), %d ranks, libhvdc %s" % (
        len(names), "s" * (len(names) != 1), what, hosts_mod.hosts_text(where), np, library))
    sys.stdout.flush()
    table, picked, ifaces = run_steps(args, names, ranks, library)
    table.print()
    failed = table.first_failure()
    took = time.monotonic() - t0
    if failed:
        print("hvdcrun --check: FAILED after %.1f s at step %s, %s: %s" % (took, failed[0],
                                                                            failed[1], failed[3]))
        return 1
    env = dict(os.environ)
    if picked:
        mca, nccl = network.network_settings(picked, ifaces.values())
        print("network: %s, for Open MPI %s and NCCL %s" % (
            picked, " ".join(mca), " ".join("%s=%s" % kv for kv in nccl.items())))
        if not args.network_interfaces:
            args.network_interfaces = picked
        for k, v in nccl.items():
            env.setdefault(k, v)
    print("hvdcrun --check: all green after %.1f s" % took)
    sys.stdout.flush()
    return launch(args, where, np, env) if args.command else 0
