#!/usr/bin/env bash
# slurm_two_hosts.sh - Slurm for real on the two namespaced hosts of tests/two_hosts.sh: Debian's
# slurmctld (on node1) and a slurmd on each of node1 and node2, authenticated by munge, all
# started here and stopped here; then what a Slurm user runs:
#   1. sbatch -N 2 --ntasks-per-node 2 of a script that runs, inside its allocation,
#      hvdcrun --check (the hosts from SLURM_JOB_NODELIST, srun as the launch agent) and
#      hvdcrun allreduce.py (no -np, no -H: 4 ranks, 2 per node, mpirun starting its daemon on
#      node2 through srun); each rank checks an exact sum and its host
#   2. srun --mpi=pmix launching the 4 ranks itself (no mpirun): Debian's Open MPI 4.1 has PMIx
#      (ext3x) and Slurm's mpi/pmix plugin serves it
#
#   node1 (10.77.0.1): slurmctld, slurmd, the batch script     node2 (10.77.0.2): slurmd
#   munged runs outside the namespaces: its socket is a file, which both hosts see.
#
# Usage: tests/slurm/slurm_two_hosts.sh BUILD_DIR NETNS_DIR WORK_DIR
#   Run by tests/two_hosts.sh while node1 and node2 are up (root). Prints "PASS name (T s)",
#   "FAIL name (...)" and the end of its log, or "SKIP ... (reason)", and last
#   "N passed, N failed[, N skipped]". Every daemon it started is stopped when it ends.
set -uo pipefail
build=$1 netns=$2 work=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
passed=0 failed=0 skipped=0
pids=()

finish() {
    echo "$passed passed, $failed failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped")"
    [ "$failed" -eq 0 ]
    exit
}
skip() { echo "SKIP Slurm on two hosts: $*"; skipped=$((skipped + 1)); finish; }
verdict() {  # verdict PASS|FAIL NAME DETAIL [LOG]
    echo "$1 $2 ($3)"
    if [ "$1" = PASS ]; then passed=$((passed + 1)); else
        failed=$((failed + 1))
        [ -n "${4:-}" ] && tail -n 25 "$4" | sed 's/^/    /'
    fi
}
stop_daemons() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    sleep 0.5
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
}
trap stop_daemons EXIT
trap 'exit 143' TERM HUP
trap 'exit 130' INT

[ "$(id -u)" = 0 ] || skip "needs root (the daemons and the namespaces)"
ip netns list | grep -qE '^node2( |$)' || skip "the hosts node1/node2 are not up"
if ! out=$("$root/scripts/ensure_packages.sh" slurmctld slurmd slurm-client munge 2>&1); then
    skip "cannot install slurmctld, slurmd, slurm-client, munge: $(echo "$out" | tail -n 1)"
fi
rm -rf "$work" && mkdir -p "$work/state" "$work/munge" "$work"/{spool,tmp}-node{1,2} &&
    chmod 700 "$work/munge"
conf=$work/slurm.conf
export SLURM_CONF=$conf

# ---- munge and the configuration ----------------------------------------------------------------
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$work/munge/munge.key"
munged -F -f --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
    --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/seed" \
    --log-file="$work/munged.log" >"$work/munged.out" 2>&1 &
pids+=($!)
cpus=$(nproc)
cat >"$conf" <<EOF
# Written by tests/slurm/slurm_two_hosts.sh: node1 and node2 of tests/netns, root only.
ClusterName=hvdc-two-hosts
SlurmctldHost=node1(10.77.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool-%h
# One per host: srun --mpi=pmix makes its directories there, named by job and step alone.
TmpFS=$work/tmp-%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%h.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd-%h.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName=node1 NodeAddr=10.77.0.1 CPUs=$cpus State=UNKNOWN
NodeName=node2 NodeAddr=10.77.0.2 CPUs=$cpus State=UNKNOWN
PartitionName=two Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
EOF

# ---- the daemons, each on its host: its network namespace and hostname ---------------------------
# on HOST COMMAND...: runs it on that host: its network namespace, its hostname and its
# /etc/hosts (tests/netns/netns_up.sh writes /etc/netns/HOST/hosts). Not `ip netns exec`, which
# mounts a fresh /sys without /sys/fs/cgroup, where slurmd's cgroup plugin fails to start.
on() {
    local host=$1; shift
    nsenter --net="/run/netns/$host" unshare --mount --uts sh -c \
        'mount --bind "/etc/netns/$0/hosts" /etc/hosts && hostname "$0" && exec "$@"' "$host" "$@"
}
on node1 slurmctld -D -c -f "$conf" >"$work/slurmctld.out" 2>&1 &
pids+=($!)
for h in node1 node2; do
    on "$h" slurmd -D -f "$conf" >"$work/slurmd-$h.out" 2>&1 &
    pids+=($!)
done
t0=$(date +%s)
up=""
while [ $(( $(date +%s) - t0 )) -lt 40 ]; do
    up=$(on node1 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$up" = "node1 idle node2 idle " ] && break
    sleep 1
done
if [ "$up" = "node1 idle node2 idle " ]; then
    verdict PASS "Slurm up: slurmctld on node1, slurmd on node1 and node2 (munge)" \
        "$(( $(date +%s) - t0 )) s to idle"
else
    for f in slurmctld.log slurmd-node1.log slurmd-node2.log munged.log; do
        cat "$work/$f" 2>/dev/null
    done >"$work/bring-up.log"
    verdict FAIL "Slurm up: slurmctld on node1, slurmd on node1 and node2 (munge)" \
        "sinfo says '$up' after 40 s" "$work/bring-up.log"
    finish
fi

# ---- 1. sbatch: hvdcrun inside the allocation ----------------------------------------------------
py_env=(PYTHONPATH="$root/bindings/python" HVDC_LIBRARY="$build/libhvdc/libhvdc.so")
cat >"$work/job.sh" <<EOF
#!/bin/sh
#SBATCH --nodes=2 --ntasks-per-node=2 --time=5 --output=$work/job-%j.out
# A libhvdc job as a Slurm user writes it: hvdcrun takes its hosts from the allocation.
set -e
echo "job \$SLURM_JOB_ID on \$SLURM_JOB_NODELIST, tasks per node \$SLURM_TASKS_PER_NODE"
$build/hvdcrun --check
$build/hvdcrun /usr/bin/python3 $root/tests/slurm/allreduce.py 4
EOF
# wait_job ID LIMIT_S: polls the job (sbatch --wait polls every 2 to 32 s) and sets rc to its
# exit status, or 124 when the limit passed (the job is cancelled).
wait_job() {
    local id=$1 limit=$2 t0 state
    t0=$(date +%s)
    while [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do
        state=$(on node1 scontrol -o show job "$id" 2>/dev/null)
        case "$state" in
        *JobState=COMPLETED*|*JobState=FAILED*|*JobState=CANCELLED*|*JobState=TIMEOUT*)
            rc=$(echo "$state" | sed -n 's/.* ExitCode=\([0-9]*\):.*/\1/p')
            rc=${rc:-1}
            return ;;
        esac
        sleep 0.5
    done
    on node1 scancel "$id"
    rc=124
}
t0=$(date +%s.%N)
job=$(on node1 env "${py_env[@]}" sbatch --parsable "$work/job.sh" 2>"$work/sbatch.out")
rc=1
[ -n "$job" ] && wait_job "$job" 120
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
out=$work/job-$job.out
[ -f "$out" ] || out=$work/sbatch.out
name="sbatch -N 2 --ntasks-per-node 2: hvdcrun --check inside the allocation (srun as agent)"
if grep -q "^hvdcrun --check: all green" "$out" &&
    grep -q "^reach .*node2 .*ok .*through srun" "$out"; then
    verdict PASS "$name" "$(grep -m1 '^all-reduce' "$out" | sed 's/  */ /g')"
else
    verdict FAIL "$name" "job exit status $rc" "$out"
fi
name="sbatch -N 2 --ntasks-per-node 2: hvdcrun allreduce.py, np 4 from the allocation"
want="ALLREDUCE rank 0 of 4 on node1 local 0: ok;ALLREDUCE rank 1 of 4 on node1 local 1: ok;"
want+="ALLREDUCE rank 2 of 4 on node2 local 0: ok;ALLREDUCE rank 3 of 4 on node2 local 1: ok;"
got=$(grep '^ALLREDUCE ' "$out" | sed 's/, sum.*//' | sort | tr '\n' ';')
if [ "$rc" -eq 0 ] && [ "$got" = "$want" ]; then
    verdict PASS "$name" "job $job, $secs s with scheduling"
else
    verdict FAIL "$name" "job exit status $rc; ranks said '$got'" "$out"
fi

# ---- 2. srun launching the ranks itself ---------------------------------------------------------
name="srun --mpi=pmix -N 2 --ntasks-per-node 2 allreduce.py (no mpirun)"
if ! on node1 srun --mpi=list 2>&1 | grep -q pmix; then
    verdict FAIL "$name" "this Slurm has no mpi/pmix plugin (srun --mpi=list)"
else
    t0=$(date +%s.%N)
    on node1 env "${py_env[@]}" timeout -k 5 120 srun --mpi=pmix --nodes=2 --ntasks-per-node=2 \
        /usr/bin/python3 "$root/tests/slurm/allreduce.py" 4 >"$work/srun.out" 2>&1
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    got=$(grep '^ALLREDUCE ' "$work/srun.out" | sed 's/, sum.*//' | sort | tr '\n' ';')
    if [ "$rc" -eq 0 ] && [ "$got" = "$want" ]; then verdict PASS "$name" "$secs s"
    else verdict FAIL "$name" "srun exit status $rc; ranks said '$got'" "$work/srun.out"; fi
fi
grep -h '^ALLREDUCE\|^hvdcrun --check\|^reach\|^network\|^all-reduce\|^versions' \
    "$out" "$work/srun.out" 2>/dev/null | sed 's/^/# /'
finish
