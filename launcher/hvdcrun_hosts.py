"""hvdcrun_hosts - where hvdcrun's ranks go: the hosts and their slots from -H, --hostfile or a
Slurm allocation, checked before anything starts; also the error type and message helper every
part of hvdcrun uses.

    -H node1:2,node2:2                  -> [('node1', 2), ('node2', 2)]
    --hostfile: "node1 slots=2"         -> the same (Horovod's and Open MPI's format)
    SLURM_JOB_NODELIST=node[1-3,7]      -> node1 node2 node3 node7
    SLURM_TASKS_PER_NODE=2(x3),1        -> 2 2 2 1

Runs in the hvdcrun process (its main thread). Python 3 standard library only.
"""
import os
import re
import socket
import sys


class UsageError(Exception):
    """Bad input: the message says what was wrong and what was expected; exit status 2."""


def say(msg):
    print("hvdcrun: " + msg, file=sys.stderr, flush=True)


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
        host, _, slots = item.rpartition(":") if ":" in item else (item, "", "1")
        add_host(hosts, host, parse_slots(slots, "%s '%s'" % (where, item)), where)
    return hosts


def parse_hostfile(path):
    """Horovod's (and Open MPI's) hostfile: 'host slots=N' per line, # comments."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise UsageError("--hostfile: cannot read '%s': %s" % (path, e.strerror))
    except UnicodeDecodeError:
        raise UsageError("--hostfile: '%s' is not a text file of lines 'host slots=N'" % path)
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
        if depth < 0 or depth > 1:
            raise UsageError("SLURM_JOB_NODELIST '%s': unbalanced or nested brackets" % text)
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
        lo, _, hi = r.strip().partition("-")
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
    """[(host, slots)] of the Slurm allocation in env, or None outside one."""
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
    if not hosts:
        raise UsageError("Slurm: SLURM_TASKS_PER_NODE '%s' gives no node a task" % tasks)
    return hosts


def static_hosts(args, env=None):
    """(hosts, where they came from) for a run that is not elastic: -H, --hostfile, the Slurm
    allocation, else localhost with -np slots."""
    env = os.environ if env is None else env
    if args.hosts and args.hostfile:
        raise UsageError("-H and --hostfile both given; use one")
    if args.hosts:
        return parse_hosts(args.hosts), "-H"
    if args.hostfile:
        return parse_hostfile(args.hostfile), "--hostfile"
    hosts = slurm_hosts(env)
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
