"""hvdcrun_elastic - hvdcrun's elastic mode: run the job, and when it fails, start it again on the
hosts that are up (restart-based, like torchrun's elastic agent; MPI cannot shrink a running
job in Open MPI 4).

    discover hosts ─> enough slots? ─no─> wait (--elastic-timeout) ─> still not: exit 1
          │ yes                   ^
          v                       │ back-off 1, 2, 4 .. 10 s; blacklist the failed host
    mpirun on them ──fails────────┘ (a rank killed by a signal, a lost daemon, a host that
          │                         libhvdc names lost: hvdcrun_supervise.py ends that run)
          │                         at most --max-restarts times
          ├─ exits 0 after a stop request (DIR/stop.ack) ─> restart on the hosts now usable
          └─ exits 0 ─> done          (every restart counts against --reset-limit)

During a healthy run discovery runs every --discovery-interval seconds; as in horovodrun,
more usable slots than the job has (up to --max-np) or a host of the job gone from the answer
make hvdcrun write DIR/stop.request, which the program's next commit (hvd_elastic_commit) or
host check (hvdc.torch's State.check_host_updates) answers by stopping every rank after
writing a commit; hvdcrun then starts the job again on the hosts usable now.

mpirun stays in hvdcrun's process group, so a signal to the group (Ctrl-C, timeout(1)) reaches
it directly; a signal to hvdcrun alone is passed on to it, and no restart follows.

Runs in the hvdcrun process: a thread per mpirun output stream (echoed, and scanned for the
host that failed) and the main thread's loop. Standard library only.
"""
import datetime
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import hvdcrun_hosts as hosts_mod
import hvdcrun_mpirun as mpirun_mod
import hvdcrun_supervise
from hvdcrun_hosts import UsageError, hosts_text, say, take_slots


class Blacklist:
    """Hosts that failed, each left out until its cool-down ends (Horovod's rule: MIN * 2^n +
    up to MIN seconds for its n-th failure, at most MAX); without a range (cooldown None), for
    the rest of the job, as horovodrun without --blacklist-cooldown-range."""

    def __init__(self, cooldown):
        self.low, self.high = (cooldown[0], max(cooldown)) if cooldown else (None, None)
        self.until = {}   # host -> time.monotonic() when it may be used again
        self.failures = {}

    def add(self, host, now):
        """Returns the cool-down in seconds (inf: for good)."""
        n = self.failures.get(host, 0) + 1
        self.failures[host] = n
        if self.low is None:
            delay = float("inf")
        else:
            delay = min(self.high, max(self.low, self.low * (1 << n) + random.uniform(0, self.low)))
        self.until[host] = now + delay
        return delay

    def blocked(self, host, now):
        return self.until.get(host, 0) > now


def parse_discovery(text, default_slots):
    """Horovod's discovery contract: one 'host' or 'host:slots' per line -> {host: slots}.
    Raises ValueError naming the first bad line."""
    hosts = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)(?::([0-9]+))?", line)
        if not m or (m.group(2) is not None and int(m.group(2)) < 1):
            raise ValueError("'%s' is not 'host' or 'host:slots' with slots >= 1" % line)
        hosts[m.group(1)] = int(m.group(2)) if m.group(2) else default_slots
    return hosts


# mpirun's words (Open MPI 4.1) for a rank killed by a signal (the OOM killer, a crash, a
# preempted machine), and for a host whose daemon it lost. A rank that merely exits non-zero is
# not blamed on its host: that is the program's error, or its reaction to another rank's death.
RANK_KILLED = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal")
DAEMON_LOST = [re.compile(p) for p in (
    r"Remote daemon: \S+ on node (\S+)",
    r"ORTE daemon .* on node (\S+)",
    r"lost communication with .* on node (\S+)",
)]


def limit_text(n):
    return "no limit" if n == float("inf") else str(n)


def ordinal(n):
    return "%d%s" % (n, "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


def host_change(run_hosts, found, usable, np):
    """Why the job on run_hosts (np ranks) should restart, now that discovery found `found`
    and `usable` ([(host, slots)], up to --max-np) are usable; None if it should not: a host
    of the job gone from the answer (or fewer slots on it), or more usable slots than np."""
    gone = [h for h, _ in run_hosts if h not in found]
    if gone:
        return "host %s left the discovery answer" % ", ".join(gone)
    fewer = ["%s:%d" % (h, found[h]) for h, slots in run_hosts if found[h] < slots]
    if fewer:
        return "the discovery answer has fewer slots on %s" % ", ".join(fewer)
    more = sum(s for _, s in usable)
    if more > np:
        return "%d slots are usable (%s), the job has %d" % (more, hosts_text(usable), np)
    return None


class ElasticDriver:
    def __init__(self, args):
        self.args = args
        self.order = []          # hosts in the order they were first seen (low ranks first)
        self.unknown = set()     # discovered hosts that do not resolve
        self.blacklist = Blacklist(args.blacklist_cooldown_range)
        self.failed_hosts = set()
        self.proc = None
        self.stopping = False    # a signal asked hvdcrun to stop: no more restarts
        self.wake = threading.Event()  # set by a signal: ends a back-off or a wait early
        self.made_dir = False

    # ---- hosts ----------------------------------------------------------------------------

    def discover(self):
        """{host: slots} now up, per the script (or the fixed -H/--hostfile/Slurm hosts)."""
        a = self.args
        if not a.host_discovery_script:
            return dict(self.fixed)
        try:
            r = subprocess.run([a.host_discovery_script], capture_output=True, text=True,
                               timeout=60)
        except subprocess.TimeoutExpired:
            raise RuntimeError("--host-discovery-script %s ran for more than 60 s"
                               % a.host_discovery_script)
        except OSError as e:
            raise RuntimeError("--host-discovery-script %s cannot run: %s"
                               % (a.host_discovery_script, e.strerror))
        if r.returncode != 0:
            raise RuntimeError("--host-discovery-script %s exited with status %d: %s"
                               % (a.host_discovery_script, r.returncode,
                                  r.stderr.strip()[-300:]))
        try:
            return parse_discovery(r.stdout, a.slots_per_host)
        except ValueError as e:
            raise RuntimeError("--host-discovery-script %s printed %s"
                               % (a.host_discovery_script, e))

    def usable(self, found):
        """[(host, slots)] usable now, oldest hosts first, at most --max-np slots in all. A new
        host this machine cannot resolve is left out (said once): mpirun would fail on it."""
        now = time.monotonic()
        for h in found:
            if h not in self.order:
                self.order.append(h)
                try:
                    hosts_mod.check_resolvable([(h, 1)], "discovered hosts")
                except UsageError as e:
                    say("%s; left out" % e)
                    self.unknown.add(h)
        hosts = [(h, found[h]) for h in self.order
                 if h in found and h not in self.unknown and not self.blacklist.blocked(h, now)]
        return take_slots(hosts, self.max_np) if self.max_np else hosts

    def wait_for_slots(self, want, why):
        """Discovers until `want` slots are usable or --elastic-timeout passes; returns the
        hosts (maybe fewer than want: the caller decides)."""
        deadline = time.monotonic() + self.args.elastic_timeout
        said = False
        while True:
            try:
                hosts = self.usable(self.discover())
            except RuntimeError as e:
                say("discovery failed: %s" % e)
                hosts = []
            have = sum(s for _, s in hosts)
            if have >= want or time.monotonic() >= deadline or self.stopping:
                return hosts
            if not said:
                say("%s: %d usable slots (%s), waiting up to %g s for %d"
                    % (why, have, hosts_text(hosts) or "none", self.args.elastic_timeout, want))
                said = True
            self.wake.wait(min(self.args.discovery_interval or 1.0, 5.0))

    # ---- one run ------------------------------------------------------------------------------

    def echo(self, stream, out):
        for line in iter(stream.readline, ""):
            out.write(line)
            out.flush()
            m = RANK_KILLED.search(line)
            if m and int(m.group(1)) < len(self.rank_hosts):
                self.failed_hosts.add(self.rank_hosts[int(m.group(1))])
            elif m:
                self.blame(m.group(2))
            for pattern in DAEMON_LOST:
                m = pattern.search(line)
                if m:
                    self.blame(m.group(1))
            lost = self.guard.scan(line)  # libhvdc named a lost host: mpirun may never end
            if lost:
                self.blame(lost)

    def blame(self, node):
        """The host of this run that mpirun calls node (it says the machine's own name, which
        may differ from ours: localhost, an alias, an address)."""
        node = node.rstrip(".,")
        ours = list(dict.fromkeys(self.rank_hosts))
        for h in ours:
            if h == node or h.split(".")[0] == node.split(".")[0]:
                self.failed_hosts.add(h)
                return
        if hosts_mod.is_this_machine(node):
            self.failed_hosts.update(h for h in ours if hosts_mod.is_this_machine(h))

    def launch(self, hosts, np, restarts):
        extra = {"HVD_ELASTIC_DIR": self.dir, "HVD_ELASTIC_RESTART": str(restarts)}
        cmd, env, shown = mpirun_mod.mpirun_command(self.args, hosts, np, os.environ, extra)
        if self.args.verbose:
            print(mpirun_mod.show_command(cmd, shown), flush=True)
        self.failed_hosts = set()
        self.rank_hosts = [h for h, slots in hosts for _ in range(slots)]  # --map-by slot
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        self.guard = hvdcrun_supervise.Guard(self.proc, say)
        self.readers = [threading.Thread(target=self.echo, args=(s, o), daemon=True)
                        for s, o in ((self.proc.stdout, sys.stdout),
                                     (self.proc.stderr, sys.stderr))]
        for t in self.readers:
            t.start()

    def watch(self, np, run_hosts):
        """Waits for mpirun; meanwhile, with a discovery script, asks the job to stop at its
        next commit or host check when the hosts changed (horovodrun's host updates). Returns
        mpirun's exit status."""
        asked = False
        while True:
            try:
                return self.finish(self.proc.wait(timeout=self.args.discovery_interval or 1.0))
            except subprocess.TimeoutExpired:
                pass
            if not self.args.host_discovery_script or asked or self.stopping:
                continue
            try:
                found = self.discover()
                hosts = self.usable(found)
            except RuntimeError as e:
                say("discovery failed (the job goes on): %s" % e)
                continue
            why = host_change(run_hosts, found, hosts, np)
            if why:
                with open(os.path.join(self.dir, "stop.request"), "w") as f:
                    f.write(why + "\n")
                say("%s: asking the job to stop at its next commit or host check, to restart "
                    "it on %s" % (why, hosts_text(hosts) or "the hosts usable then"))
                asked = True

    def finish(self, rc):
        self.guard.cancel()
        for t in self.readers:
            t.join(timeout=5)  # a rank still holding the pipe must not hold hvdcrun
        return rc

    # ---- signals -----------------------------------------------------------------------------

    def on_signal(self, signum, frame):
        """SIGINT, SIGTERM, SIGHUP: no more restarts; mpirun gets the signal (again, when it came
        to the whole process group: mpirun takes a second one as 'abort now')."""
        self.stopping = True
        self.wake.set()
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def kill_after(self, seconds):
        """mpirun must end: SIGKILL if the signal did not do it (its ranks end with it)."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    # ---- the loop ------------------------------------------------------------------------------

    def setup(self):
        a = self.args
        self.fixed = None
        if not a.host_discovery_script:
            hosts, _ = hosts_mod.static_hosts(a)
            self.fixed = dict(hosts)
        elif not (os.path.isfile(a.host_discovery_script) and
                  os.access(a.host_discovery_script, os.X_OK)):
            raise UsageError("--host-discovery-script '%s' is not an executable file"
                             % a.host_discovery_script)
        self.np = a.np
        self.min_np = a.min_np or a.np or 1
        self.max_np = a.max_np  # None: every usable slot, as horovodrun
        if a.min_np and a.max_np and a.min_np > a.max_np:
            raise UsageError("--min-np %d is more than --max-np %d" % (a.min_np, a.max_np))
        if self.np and ((a.min_np and self.np < a.min_np) or (a.max_np and self.np > a.max_np)):
            raise UsageError("-np %d is outside --min-np %d .. --max-np %s"
                             % (self.np, self.min_np, self.max_np or "unlimited"))
        for name, value in (("--max-restarts", a.max_restarts), ("--reset-limit", a.reset_limit)):
            if value is not None and value < 0:
                raise UsageError("%s must be >= 0, got %d" % (name, value))
        # hvdcrun's cap on failures; with horovodrun's --reset-limit alone, that one decides
        self.max_restarts = a.max_restarts if a.max_restarts is not None else \
            (3 if a.reset_limit is None else float("inf"))
        if a.blacklist_cooldown_range and a.blacklist_cooldown_range[0] > \
                a.blacklist_cooldown_range[1]:
            raise UsageError("--blacklist-cooldown-range %g %g: MIN_S is more than MAX_S"
                             % tuple(a.blacklist_cooldown_range))
        if a.elastic_dir:
            self.dir = os.path.abspath(a.elastic_dir)
            try:
                os.makedirs(self.dir, exist_ok=True)
            except OSError as e:
                raise UsageError("--elastic-dir '%s': %s" % (a.elastic_dir, e.strerror))
            commit = os.path.join(self.dir, "commit.hvdc")
            if os.path.exists(commit):
                when = datetime.datetime.fromtimestamp(os.path.getmtime(commit))
                say("%s holds a commit (written %s): the job continues from it"
                    % (self.dir, when.strftime("%Y-%m-%d %H:%M:%S")))
        else:
            self.dir = tempfile.mkdtemp(prefix="hvdc-elastic-", dir=os.getcwd())
            self.made_dir = True
        if not os.access(self.dir, os.W_OK):
            raise UsageError("elastic directory '%s' is not writable" % self.dir)
        try:
            found = self.discover()
        except RuntimeError as e:
            raise UsageError(str(e))
        hosts_mod.check_resolvable(sorted(found.items()), "discovered hosts")
        mpirun_mod.check_mpirun(a.mpirun)

    def run(self):
        a = self.args
        try:
            self.setup()
        except UsageError:
            self.cleanup(2)
            raise
        if a.dry_run:
            hosts = self.usable(self.discover())
            np = sum(s for _, s in hosts) or self.np
            cmd, _, shown = mpirun_mod.mpirun_command(a, hosts, np, os.environ,
                                                      {"HVD_ELASTIC_DIR": self.dir,
                                                       "HVD_ELASTIC_RESTART": "0"})
            print(mpirun_mod.show_command(cmd, shown))
            return self.cleanup(0)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, self.on_signal)
        restarts, changes, want = 0, 0, self.np or self.min_np
        why, ended = "starting", None
        while True:
            hosts = self.wait_for_slots(want, why)
            have = sum(s for _, s in hosts)
            if self.stopping:
                return self.cleanup(130)
            if have < self.min_np:
                say("only %d usable slots (%s) after waiting %g s (--elastic-timeout); "
                    "--min-np is %d: giving up.%s" % (have, hosts_text(hosts) or "none",
                                                      a.elastic_timeout, self.min_np,
                                                      self.keep_note()))
                return self.cleanup(1)
            # every usable slot (usable() stops at --max-np), as horovodrun starts its workers
            np, first = have, restarts + changes == 0
            run_hosts = take_slots(hosts, np)
            say("run %d: np %d on %s%s" % (
                restarts + changes + 1, np, hosts_text(run_hosts), "" if first else
                " (%d restarts after failures, at most %s; %d host changes; %.1f s after the "
                "last run ended)" % (restarts, limit_text(self.max_restarts), changes,
                                     time.monotonic() - ended)))
            for f in ("stop.request", "stop.ack"):
                try:
                    os.unlink(os.path.join(self.dir, f))
                except FileNotFoundError:
                    pass
            t0 = time.monotonic()
            self.launch(run_hosts, np, restarts + changes)
            rc = self.watch(np, run_hosts)
            ended = time.monotonic()
            if self.stopping:
                self.kill_after(10)
                say("stopped by a signal; mpirun exited with status %d.%s"
                    % (rc, self.keep_note()))
                return self.cleanup(130)
            if rc == 0 and not os.path.exists(os.path.join(self.dir, "stop.ack")):
                say("the job finished after %d restarts and %d host changes" % (restarts,
                                                                               changes))
                return self.cleanup(0)
            if rc == 0:
                changes += 1
                want, why = 1, "host change"
                say("the job stopped at a commit as asked, after %.1f s; restarting it on the "
                    "hosts usable now" % (ended - t0))
            else:
                for h in sorted(self.failed_hosts):
                    delay = self.blacklist.add(h, ended)
                    say("host %s failed: left out %s (--blacklist-cooldown-range)"
                        % (h, "for the rest of the job" if delay == float("inf")
                           else "for %.0f s" % delay))
                if restarts >= self.max_restarts:
                    say("mpirun exited with status %d; %d restarts done (--max-restarts): "
                        "giving up.%s" % (rc, restarts, self.keep_note()))
                    return self.cleanup(rc if 0 < rc < 128 else 1)
            if a.reset_limit is not None and restarts + changes + (rc != 0) > a.reset_limit:
                say("the job would be reset a %s time (--reset-limit %d): giving up.%s"
                    % (ordinal(restarts + changes + (rc != 0)), a.reset_limit,
                       self.keep_note()))
                return self.cleanup(rc if 0 < rc < 128 else 1)
            if rc == 0:
                continue
            restarts += 1
            backoff = min(10.0, 2.0 ** (restarts - 1))
            say("mpirun exited with status %d after %.1f s%s; restarting in %.0f s"
                % (rc, ended - t0, " (failed: %s)" % ", ".join(sorted(self.failed_hosts))
                   if self.failed_hosts else "", backoff))
            self.wake.wait(backoff)
            want, why = self.min_np, "restarting"

    def keep_note(self):
        if os.path.exists(os.path.join(self.dir, "commit.hvdc")):
            self.made_dir = False  # keep it: it holds the last commit
            return " The last commit is in %s: run again with --elastic-dir %s to continue " \
                   "from it." % (self.dir, self.dir)
        return ""

    def cleanup(self, rc):
        if self.made_dir and rc == 0:
            for f in ("commit.hvdc", "stop.request", "stop.ack"):
                try:
                    os.unlink(os.path.join(self.dir, f))
                except FileNotFoundError:
                    pass
            try:
                os.rmdir(self.dir)
            except OSError:
                pass
        elif self.made_dir and not os.listdir(self.dir):
            os.rmdir(self.dir)
        return rc

