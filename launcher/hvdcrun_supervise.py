"""hvdcrun_supervise - ends a job whose host libhvdc found lost, where mpirun would not.

libhvdc's host watch names a host that stopped answering (down, frozen, cut off) on the ranks
that remain, which fail and exit. mpirun then aborts the job, but its abort waits for the lost
host's daemon to confirm, which never comes (Open MPI 4.1, seen with the link cut and with every
process of the host stopped). So hvdcrun reads the ranks' stderr, as mpirun forwards it, and
when a rank names a lost host it gives mpirun LOST_GRACE_S to end by itself, then stops it.

    mpirun stderr ──> echo ──> "host 'node2' (ranks 2-3) is lost" ──> GRACE ──> SIGKILL

A plain run (run) has mpirun as its child with stderr piped: stdout, stdin and the terminal
stay mpirun's own; signals that reach hvdcrun alone are passed on to it. Elastic mode
(hvdcrun_elastic.py) uses the Guard in its own echo threads and blames the host, so the next run
leaves it out. Standard library only.
"""
import os
import re
import signal
import subprocess
import sys
import threading

# libhvdc's words (runtime/watch.c): a host whose heartbeat stopped, or a rank on the same host
# as its watcher whose process stopped answering.
LOST_HOST = re.compile(r"host '([^']+)' \(ranks? [0-9,-]+\) is lost")
LOST_RANK = re.compile(r"rank \d+ \(host '([^']+)', pid \d+\) stopped answering")
LOST_GRACE_S = 10.0  # for mpirun to end the job itself once a rank named a lost host


def lost_host(line):
    """The host a libhvdc line names as lost, or None."""
    m = LOST_HOST.search(line) or LOST_RANK.search(line)
    return m.group(1) if m else None


def descendants(pid):
    """The processes below pid on this machine (from /proc), children first."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        parent_of[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parent_of.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


class Guard:
    """Stops proc LOST_GRACE_S after the first line naming a lost host, unless it ended."""

    def __init__(self, proc, say):
        self.proc = proc
        self.say = say
        self.lost = None      # the first host named lost
        self.stopped = False  # the guard had to stop mpirun
        self.timer = None

    def scan(self, line):
        host = lost_host(line)
        if host and self.lost is None:
            self.lost = host
            self.timer = threading.Timer(LOST_GRACE_S, self.expire)
            self.timer.daemon = True
            self.timer.start()
        return host

    def expire(self):
        if self.proc.poll() is not None:
            return
        self.stopped = True
        self.say("host '%s' is lost (libhvdc's host watch) and mpirun has not ended the job "
                 "%g s later (it waits for that host's daemon): stopping it and its processes "
                 "here" % (self.lost, LOST_GRACE_S))
        # mpirun is aborting already: a SIGTERM now makes it crash in its forced termination
        # (Open MPI 4.1), so mpirun and what it started here (ranks, launch agents) are killed
        for pid in [self.proc.pid] + descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def cancel(self):
        if self.timer:
            self.timer.cancel()


def run(cmd, env, say):
    """Runs mpirun (cmd) to its end, stopping it when a host is lost; its exit status (1 when
    the guard stopped it, 128 + N when a signal N ended it)."""
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, errors="replace")
    guard = Guard(proc, say)

    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    # Ctrl-C reaches mpirun too (one process group): mpirun decides; hvdcrun waits for it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, forward)
    def echo():
        for line in iter(proc.stderr.readline, ""):
            sys.stderr.write(line)
            sys.stderr.flush()
            guard.scan(line)

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    rc = proc.wait()
    guard.cancel()
    reader.join(timeout=2)  # a process of the lost host's launch agent may still hold the pipe
    if not reader.is_alive():
        proc.stderr.close()
    if guard.stopped:
        return 1
    return 128 - rc if rc < 0 else rc
