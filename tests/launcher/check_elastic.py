#!/usr/bin/python3
"""check_elastic.py - hvdcrun's elastic mode end to end with examples/train --elastic: ranks are
killed, hosts leave and come back in the discovery script's answer, and the job must go on from
its last commit, finish every step of every epoch exactly once (the optimizer's step count at
the end is epochs x steps per epoch) and reach the accuracy target.

  restart      one host: np 2; in epoch 2 (batch 40) rank 1 is killed; the host stays in the discovery
               answer (after its blacklist cool-down): hvdcrun restarts np 2 from the commit
  grow         one host: np 1, discovery says host:1; in epoch 1 it says host:2: the job stops at its next commit and goes on at np 2 (hvdcrun, like
               horovodrun, grows a job when hosts appear)
  shrink-grow  hosts A:2,B:2, np 4; in epoch 2 B leaves the discovery answer and B's ranks
               (--victim-ranks) are killed: hvdcrun restarts np 2 on A from the last commit;
               once that run has restored, B comes back: the job grows to np 4 again
  min-np       like shrink (or restart on one host) with --min-np the whole job: hvdcrun must
               give up with a message naming --min-np and a non-zero status, in time

Prints the figures (steps lost against the commit interval, kill-to-restored time, accuracy)
as '# elastic figures: ...' and ends with PASS or FAIL; the exit status is the verdict. Every
run is under --timeout (the process group is killed when it passes).

Usage: check_elastic.py SCENARIO --build BUILD_DIR [--hosts H:S,H:S] [--victim-ranks 1]
         [--wrap 'COMMAND WORDS'] [--hvdcrun-args 'ARGS'] [--epochs N] [--commit-every N]
         [--min-accuracy X] [--reference-accuracy X] [--timeout S] [--logs DIR]
Runs on the caller's thread, plus one thread that reads hvdcrun's output.
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

STEP = re.compile(r"^# step (\d+) epoch (\d+) batch (\d+)$")
RESTORED = re.compile(r"^# elastic: restored commit \d+ .*now (\d+)\): epoch (\d+), batch (\d+), "
                      r"position \d+, step (\d+)$")
STOPPED = re.compile(r"^# elastic: stopping at commit \(.*, step (\d+)\)")
RUN = re.compile(r"^hvdcrun: run (\d+): np (\d+) on (\S+)")
ACCURACY = re.compile(r"^final test accuracy: ([0-9.]+)$")
PER_EPOCH = re.compile(r"(\d+) steps per epoch$")


class Job:
    """hvdcrun under a deadline; its output lines with the time each arrived."""

    def __init__(self, cmd, log_path, timeout):
        self.lines = []  # (monotonic time, line)
        self.lock = threading.Lock()
        self.log = open(log_path, "w")
        self.deadline = time.monotonic() + timeout
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace", start_new_session=True)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in iter(self.proc.stdout.readline, ""):
            line = line.rstrip("\n")
            with self.lock:
                self.lines.append((time.monotonic(), line))
            self.log.write(line + "\n")
            self.log.flush()

    def find(self, pattern, start=0):
        """(index, time, match) of the first line from start that matches, or None."""
        with self.lock:
            for i in range(start, len(self.lines)):
                m = pattern.search(self.lines[i][1])
                if m:
                    return i, self.lines[i][0], m
        return None

    def wait_for(self, pattern, start=0):
        """Like find, but waits for the line (None when the job ends or the deadline passes)."""
        while True:
            hit = self.find(pattern, start)
            if hit or self.proc.poll() is not None or time.monotonic() > self.deadline:
                return hit or self.find(pattern, start)
            time.sleep(0.02)

    def finish(self):
        """The exit status, or None when the deadline passed (the group is then killed)."""
        try:
            rc = self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            rc = None
        self.reader.join(timeout=10)
        self.log.close()
        return rc


def rank_pids(elastic_dir, ranks):
    """The processes of this job's ranks numbered `ranks` (from their environment: every rank
    has OMPI_COMM_WORLD_RANK and the job's HVD_ELASTIC_DIR; mpirun has no rank)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(b"HVD_ELASTIC_DIR") == elastic_dir.encode() and \
                env.get(b"OMPI_COMM_WORLD_RANK", b"-").decode() in ranks:
            pids.append(int(pid))
    return pids


def scratch_dir(prefix, parent):
    """(a new directory, its commits/, its hosts file, its discover.sh printing that file)."""
    scratch = tempfile.mkdtemp(prefix=prefix, dir=parent)
    hosts_file = os.path.join(scratch, "hosts")
    discover = os.path.join(scratch, "discover.sh")
    with open(discover, "w") as f:
        f.write("#!/bin/sh\nexec cat '%s'\n" % hosts_file)
    os.chmod(discover, 0o755)
    return scratch, os.path.join(scratch, "commits"), hosts_file, discover


def write_hosts(path, hosts):
    with open(path + ".tmp", "w") as f:
        f.write("".join("%s:%d\n" % h for h in hosts))
    os.rename(path + ".tmp", path)  # the discovery script never sees half a file


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("scenario", choices=["restart", "grow", "shrink-grow", "min-np"])
    p.add_argument("--build", required=True)
    p.add_argument("--hosts", default="localhost:2")
    p.add_argument("--victim-ranks", default="1")
    p.add_argument("--wrap", default="")
    p.add_argument("--hvdcrun-args", default="")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--commit-every", type=int, default=25)
    p.add_argument("--min-accuracy", type=float, default=0.84)
    p.add_argument("--reference-accuracy", type=float)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--logs", default=None)
    a = p.parse_args()

    build = os.path.abspath(a.build)
    hosts = [(h, int(s)) for h, s in (x.split(":") for x in a.hosts.split(","))]
    total = sum(s for _, s in hosts)
    victims = a.victim_ranks.split(",")
    scratch, elastic_dir, hosts_file, discover = scratch_dir("check_elastic.", a.logs or build)

    s = a.scenario
    if s == "grow":   # one host, one slot of it first
        start_hosts, np, min_np, max_np = [(hosts[0][0], 1)], 1, 1, hosts[0][1]
    elif s == "min-np":
        start_hosts, np, min_np, max_np = hosts, total, total, total
    else:
        start_hosts, np, min_np, max_np = hosts, total, 1, total
    write_hosts(hosts_file, start_hosts)
    cmd = shlex.split(a.wrap) + [
        os.path.join(build, "hvdcrun"), "-np", str(np), "--min-np", str(min_np),
        "--max-np", str(max_np), "--host-discovery-script", discover,
        "--elastic-dir", elastic_dir, "--blacklist-cooldown-range", "0.5", "1",
        "--discovery-interval", "0.5", "--elastic-timeout", "3", "--max-restarts", "2",
    ] + shlex.split(a.hvdcrun_args) + [
        # The ranks run niced: with more busy threads than cores, mpirun (which forwards the
        # log), hvdcrun and this script would otherwise get the CPU only when the ranks block,
        # mostly in a commit's fsync, and every kill would land just after a commit.
        "nice", "-n", "10",
        os.path.join(build, "examples", "train"), "--elastic", "--epochs", str(a.epochs),
        "--commit-every", str(a.commit_every), "--log-every", "1",
        "--min-accuracy", str(a.min_accuracy)]
    log_path = os.path.join(scratch, "hvdcrun.log")
    print("# %s: %s" % (s, " ".join(shlex.quote(c) for c in cmd)), flush=True)
    print("# log: %s" % log_path, flush=True)
    job = Job(cmd, log_path, a.timeout)
    why, figures = [], []

    def fail(msg):
        why.append(msg)

    head = job.wait_for(PER_EPOCH)
    per_epoch = int(head[2].group(1)) if head else 0
    if s == "grow":
        hit = job.wait_for(re.compile(r"^# step (\d+) epoch 1 batch ([5-9]\d|\d{3,})$"))
        if not hit:
            fail("the first run never reached epoch 1, batch 50")
        else:
            write_hosts(hosts_file, hosts[:1])
            print("# %s now in the discovery answer" % hosts_text(hosts[:1]), flush=True)
    elif hosts:  # restart, shrink-grow, min-np: kill in epoch 2 (min-np: epoch 1)
        epoch = 1 if s == "min-np" else 2
        hit = job.wait_for(re.compile(r"^# step (\d+) epoch %d batch ([4-9]\d|\d{3,})$" % epoch))
        if not hit:
            fail("the first run never reached epoch %d, batch 40" % epoch)
        else:
            left = [(h, n) for h, n in hosts if s == "restart" or h != hosts[-1][0]]
            if s == "min-np" and len(hosts) == 1:
                left = [(hosts[0][0], hosts[0][1] - len(victims))]
            write_hosts(hosts_file, left)
            pids = rank_pids(elastic_dir, victims)
            t_kill = time.monotonic()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            seen = job.find(re.compile(r"^# step (\d+) epoch"), len(job.lines) - 1) or hit
            print("# killed ranks %s (pids %s) when the log had reached step %s; discovery now "
                  "says %s" % (a.victim_ranks, " ".join(map(str, pids)), seen[2].group(1),
                               hosts_text(left)), flush=True)
            if len(pids) != len(victims):
                fail("found %d processes for ranks %s" % (len(pids), a.victim_ranks))

    t_back, after = None, 0  # after: the grow is looked for after this line
    if s in ("restart", "shrink-grow") and not why:
        run1 = job.wait_for(RUN)
        run2 = job.wait_for(RUN, run1[0] + 1) if run1 else None
        restored = job.wait_for(RESTORED, run2[0] if run2 else 0)
        want = hosts if s == "restart" else hosts[:-1]
        if not run2 or run2[2].group(3) != hosts_text(want):
            fail("no restart on %s (got: %s)" % (hosts_text(want),
                                                run2[2].group(0) if run2 else "none"))
        elif not restored:
            fail("the restarted job restored no commit")
        else:
            steps_before = [int(m.group(1)) for _, line in job.lines[:run2[0]]
                            for m in [STEP.match(line)] if m]
            last, back = max(steps_before), int(restored[2].group(4))
            lost = last - back
            figures.append("steps lost %d (last step done %d, restored step %d; commit every "
                           "%d)" % (lost, last, back, a.commit_every))
            ended = job.find(re.compile(r"^hvdcrun: mpirun exited with status"))
            figures.append("kill to restored at np %s: %.1f s (mpirun ended %.1f s after the "
                           "kill, the next run started %.1f s after that, incl. a 1 s back-off)"
                           % (restored[2].group(1), restored[1] - t_kill,
                              (ended[1] if ended else float("nan")) - t_kill,
                              run2[1] - (ended[1] if ended else float("nan"))))
            after = restored[0] + 1
            if not 0 <= lost <= a.commit_every:
                fail("%d steps lost, more than the commit interval %d" % (lost, a.commit_every))
            if s == "shrink-grow":
                write_hosts(hosts_file, hosts)
                t_back = time.monotonic()
                print("# %s back in the discovery answer" % hosts_text(hosts), flush=True)
    if s in ("grow", "shrink-grow") and not why:
        stop = job.wait_for(STOPPED, after)
        run_big = job.wait_for(re.compile(r"^hvdcrun: run \d+: np %d on %s"
                                          % (total, re.escape(hosts_text(hosts)))),
                               stop[0] if stop else after)
        restored = job.wait_for(RESTORED, run_big[0] if run_big else 0)
        if not (stop and run_big and restored):
            fail("no scale-up to np %d on %s (stop at a commit: %s, run: %s, restored: %s)"
                 % (total, hosts_text(hosts), bool(stop), bool(run_big), bool(restored)))
        else:
            at, back = int(stop[2].group(1)), int(restored[2].group(4))
            figures.append("scale-up to np %d: stopped at step %d, restored step %d; %.1f s "
                           "from the stop to the restore%s" % (
                               total, at, back, restored[1] - stop[1],
                               "" if t_back is None else ", %.1f s from the host's return"
                               % (restored[1] - t_back)))
            if at != back:
                fail("the grown job restored step %d, not the stop's %d" % (back, at))

    rc = job.finish()
    lines = [line for _, line in job.lines]
    if rc is None:
        fail("hvdcrun was still running after %g s" % a.timeout)
    elif s == "min-np":
        msg = "--min-np is %d: giving up" % total
        if rc == 0 or not any(msg in line for line in lines):
            fail("expected a non-zero exit and '%s', got status %d" % (msg, rc))
        else:
            figures.append("gave up with status %d: %s" % (
                rc, next(line for line in lines if msg in line)))
    else:
        acc = [float(m.group(1)) for line in lines for m in [ACCURACY.match(line)] if m]
        steps = [int(m.group(1)) for line in lines for m in [STEP.match(line)] if m]
        if rc != 0:
            fail("hvdcrun exited with status %d" % rc)
        if not acc or acc[-1] < a.min_accuracy:
            fail("final accuracy %s, target %g" % (acc[-1] if acc else "none", a.min_accuracy))
        else:
            ref = "" if a.reference_accuracy is None else \
                "; uninterrupted run %.4f (difference %+.4f)" % (a.reference_accuracy,
                                                                 acc[-1] - a.reference_accuracy)
            figures.append("final accuracy %.4f (target %g)%s" % (acc[-1], a.min_accuracy, ref))
        if per_epoch and (not steps or steps[-1] != a.epochs * per_epoch):
            fail("the last step was %s, not %d epochs x %d steps" % (
                steps[-1] if steps else "none", a.epochs, per_epoch))
    for f in figures:
        print("# elastic figures: %s: %s" % (s, f), flush=True)
    if why:
        print("\n".join(line for line in lines if not STEP.match(line))[-3000:])
        print("FAIL %s: %s (log: %s)" % (s, "; ".join(why), log_path))
        return 1
    print("PASS %s" % s)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


def hosts_text(hosts):
    return ",".join("%s:%d" % h for h in hosts)


if __name__ == "__main__":
    sys.exit(main())
