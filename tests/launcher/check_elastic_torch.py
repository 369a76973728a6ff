#!/usr/bin/python3
"""check_elastic_torch.py - hvdcrun's elastic mode with a PyTorch script of the shape of
Horovod's elastic ImageNet example (elastic_torch.py: ElasticSampler, a TorchState subclass,
commit and check_host_updates), 2 epochs at np 4 on hosts A:2,B:2:

  in epoch 1 (the second), at batch 5 or later, B leaves the discovery answer and B's ranks
  (--victim-ranks) are killed: hvdcrun must restart on A at np 2 from the last commit; with
  --grow, once that run has resumed, B comes back and the job must stop at its next host
  check or commit and go on at np 4 again.

Then, checked from the script's output (rank 0's '# batch E B indices'): the committed history
of every epoch, i.e. each run's batches up to where the next run resumed (a failure rolls back
to the last commit; a stop for a host change commits where it stops), holds every sample of
the dataset exactly once, none skipped, none twice; the restarted runs resumed at np 2 (and 4)
and the state's reset() ran on each restart. Figures: '# elastic figures: ...'. The verdict
is the exit status; every run is under --timeout.

Usage: check_elastic_torch.py --build BUILD_DIR [--hosts A:2,B:2] [--victim-ranks 2,3] [--grow]
         [--python /usr/bin/python3] [--wrap 'WORDS'] [--hvdcrun-args 'ARGS'] [--timeout S]
         [--logs DIR]
Runs on the caller's thread, plus one thread that reads hvdcrun's output.
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_elastic import Job, hosts_text, rank_pids, scratch_dir, write_hosts  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = re.compile(r"^# batch (\d+) (\d+) ([\d,]+)$")
RESUMED = re.compile(r"^# resumed epoch (\d+) batch (\d+) np (\d+)$")
RESETS = re.compile(r"^# resets (\d+)$")
RUN = re.compile(r"^hvdcrun: run (\d+): np (\d+) on (\S+)")
SAMPLES, EPOCHS = 256, 2


def committed_history(lines):
    """{epoch: [sample indices]} of the batches no later run rolled back: each run's batches
    before the (epoch, batch) where the next run resumed."""
    runs = []  # [(resume point, [(epoch, batch, ids)])]
    for line in lines:
        m = RESUMED.match(line)
        if m:
            runs.append(((int(m.group(1)), int(m.group(2))), []))
            continue
        m = BATCH.match(line)
        if m and runs:
            runs[-1][1].append((int(m.group(1)), int(m.group(2)),
                                [int(i) for i in m.group(3).split(",")]))
    history = {}
    for k, (_, batches) in enumerate(runs):
        until = runs[k + 1][0] if k + 1 < len(runs) else (EPOCHS, 0)
        for epoch, batch, ids in batches:
            if (epoch, batch) < until:
                history.setdefault(epoch, []).extend(ids)
    return history, runs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--hosts", default="localhost:4")
    p.add_argument("--victim-ranks", default="2,3")
    p.add_argument("--grow", action="store_true")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--wrap", default="")
    p.add_argument("--hvdcrun-args", default="")
    p.add_argument("--timeout", type=float, default=150.0)
    p.add_argument("--logs", default=None)
    a = p.parse_args()

    build = os.path.abspath(a.build)
    hosts = [(h, int(s)) for h, s in (x.split(":") for x in a.hosts.split(","))]
    victims = a.victim_ranks.split(",")
    # what discovery says once the victims are gone: the last host, or its victims' slots
    left = hosts[:-1] if len(hosts) > 1 else [(hosts[0][0], hosts[0][1] - len(victims))]
    scratch, elastic_dir, hosts_file, discover = scratch_dir("check_elastic_torch.",
                                                             a.logs or build)
    write_hosts(hosts_file, hosts)
    total = sum(s for _, s in hosts)
    cmd = shlex.split(a.wrap) + [
        os.path.join(build, "hvdcrun"), "-np", str(total), "--min-np", "2", "--max-np",
        str(total), "--host-discovery-script", discover, "--elastic-dir", elastic_dir,
        "--blacklist-cooldown-range", "0.5", "1", "--discovery-interval", "0.5",
        "--elastic-timeout", "5", "-x", "PYTHONPATH", "-x", "HVDC_LIBRARY",
    ] + shlex.split(a.hvdcrun_args) + [
        "nice", "-n", "10", a.python, os.path.join(HERE, "elastic_torch.py"),
        "--epochs", str(EPOCHS), "--samples", str(SAMPLES)]
    os.environ.setdefault("PYTHONPATH", os.path.join(HERE, "..", "..", "bindings", "python"))
    os.environ.setdefault("HVDC_LIBRARY", os.path.join(build, "libhvdc", "libhvdc.so"))
    log_path = os.path.join(scratch, "hvdcrun.log")
    print("# %s" % " ".join(shlex.quote(c) for c in cmd), flush=True)
    print("# log: %s" % log_path, flush=True)
    job = Job(cmd, log_path, a.timeout)
    why, figures = [], []

    hit = job.wait_for(re.compile(r"^# batch 1 ([5-9]|\d{2,}) "))
    if not hit:
        why.append("the first run never reached epoch 1, batch 5")
    else:
        write_hosts(hosts_file, left)
        pids = rank_pids(elastic_dir, victims)
        t_kill = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        print("# killed ranks %s (pids %s) at epoch 1 batch %s; discovery now says %s"
              % (a.victim_ranks, " ".join(map(str, pids)), hit[2].group(1), hosts_text(left)),
              flush=True)
        if len(pids) != len(victims):
            why.append("found %d processes for ranks %s" % (len(pids), a.victim_ranks))
        run2 = job.wait_for(re.compile(r"^hvdcrun: run 2: np 2 on %s"
                                       % re.escape(hosts_text(left))))
        resumed = job.wait_for(RESUMED, run2[0] if run2 else 0)
        if not (run2 and resumed):
            why.append("no restart at np 2 on %s that resumed" % hosts_text(left))
        else:
            figures.append("kill to resumed at np 2: %.1f s" % (resumed[1] - t_kill))
            if a.grow:
                write_hosts(hosts_file, hosts)
                t_back = time.monotonic()
                run3 = job.wait_for(re.compile(r"^hvdcrun: run 3: np %d on %s"
                                               % (total, re.escape(hosts_text(hosts)))))
                again = job.wait_for(RESUMED, run3[0] if run3 else 0)
                if not (run3 and again):
                    why.append("no stop and restart at np %d once %s was back"
                               % (total, hosts_text(hosts)))
                else:
                    figures.append("host back to resumed at np %d: %.1f s"
                                   % (total, again[1] - t_back))
    rc = job.finish()
    lines = [line for _, line in job.lines]
    if rc != 0:
        why.append("hvdcrun exited with status %s" % rc)
    history, runs = committed_history(lines)
    want_runs = 3 if a.grow else 2
    if len(runs) != want_runs:
        why.append("%d runs resumed, expected %d" % (len(runs), want_runs))
    for epoch in range(EPOCHS):
        ids = history.get(epoch, [])
        twice = sorted({i for i in ids if ids.count(i) > 1})
        skipped = sorted(set(range(SAMPLES)) - set(ids))
        if twice or skipped or len(ids) != SAMPLES:
            why.append("epoch %d: %d samples trained, seen twice %s, skipped %s"
                       % (epoch, len(ids), twice[:10], skipped[:10]))
        else:
            figures.append("epoch %d: each of the %d samples trained exactly once across %d "
                           "runs" % (epoch, SAMPLES, len({k for k, (_, b) in enumerate(runs)
                                                          if any(e == epoch for e, _, _ in b)})))
    resets = [int(m.group(1)) for line in lines for m in [RESETS.match(line)] if m]
    if resets != list(range(len(runs))):
        why.append("the state's reset() counts at each run's start were %s, expected %s"
                   % (resets, list(range(len(runs)))))
    figures.append("runs resumed at %s" % ", ".join("epoch %d batch %d" % r for r, _ in runs))
    for f in figures:
        print("# elastic figures: torch: %s" % f, flush=True)
    if why:
        print("\n".join(line for line in lines if not BATCH.match(line))[-3000:])
        print("FAIL torch: %s (log: %s)" % ("; ".join(why), log_path))
        return 1
    print("PASS torch")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
