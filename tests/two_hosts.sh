#!/usr/bin/env bash
# two_hosts.sh - the two-host test stage: the multi-rank tests and the training example run
# with `hvdcrun -np 4 -H node1:2,node2:2` across two real hosts made of network + UTS namespaces
# on this machine (tests/netns: see its README); then the launcher's other forms (hostfile,
# Slurm variables, a Python program, every bad input), hvdcrun --check (all green; node2's link
# down), Slurm's own daemons running jobs (tests/slurm) and elastic training: node2's ranks
# killed mid-epoch and node2 gone from the discovery answer (the job goes on at np 2 on node1
# from its last commit), node2 back (it grows to np 4 again), too few slots left (it gives up);
# the same with a PyTorch script of the shape of Horovod's elastic ImageNet example.
#
#   node1 (10.77.0.1)  ranks 0,1  <-- veth, TCP -->  node2 (10.77.0.2)  ranks 2,3
#   hvdcrun and mpirun run in node1; Open MPI starts orted on node2 through netns_agent.sh (not
#   ssh); vader (shared memory) inside a host, tcp between them.
#
# Usage: tests/two_hosts.sh BUILD_DIR [--no-kill]
#   --no-kill  skips the rank-killed-on-node2 cases (see tests/mpi/test_kill.c); they run by
#              default: libhvdc's liveness watch must name the dead rank on node1
# Needs root (namespaces). Without root or a working `ip netns` it prints "SKIP ..." and ends
# with "0 passed, 0 failed, 1 skipped". Otherwise one line per test, "PASS name (T s)" or
# "FAIL name (...)" followed by the end of its log, and last "N passed, N failed[, N skipped]"
# (skipped: Slurm's part, when its packages cannot be installed); exit status
# 1 on any failure. Logs: BUILD_DIR/two-hosts-logs/.
# The namespaces are always torn down when the stage ends (also on failure, timeout, Ctrl-C),
# and leftovers of an earlier, crashed run are removed before it starts. One stage at a time
# per machine (a lock); every mpirun under `timeout`, one at a time.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
netns=${HVDC_NETNS_DIR:-$root/tests/netns}
with_kill=1
build=""
for a in "$@"; do
    case "$a" in
    --kill) with_kill=1 ;;
    --no-kill) with_kill=0 ;;
    -*) echo "usage: tests/two_hosts.sh BUILD_DIR [--no-kill]" >&2; exit 2 ;;
    *) build=$a ;;
    esac
done
[ -n "$build" ] || { echo "usage: tests/two_hosts.sh BUILD_DIR [--no-kill]" >&2; exit 2; }
build=$(cd "$build" 2>/dev/null && pwd) || {
    echo "two_hosts: no build directory '$build'" >&2
    exit 2
}

# The hosts: namespace names are host names (the launch agent maps one to the other).
export N1=node1 N2=node2
hosts="$N1:2,$N2:2"
kill_bound_s=${KILL_BOUND_S:-5}  # node1's ranks must be gone this long after the kill

passed=0 failed=0 skipped=0
start=$(date +%s)

skip() {
    echo "SKIP two-host stage: $*"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}

# ---- can this machine do it? -----------------------------------------------------------------
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces (run as root: sudo $0 $*)"
command -v ip >/dev/null || skip "no 'ip' command (Debian: apt-get install iproute2)"
command -v unshare >/dev/null || skip "no 'unshare' command (Debian: apt-get install util-linux)"
probe=hvdc-probe-$$
if ! err=$(ip netns add "$probe" 2>&1); then
    skip "'ip netns add' does not work here: $err"
fi
ip netns del "$probe" 2>/dev/null
for f in netns_up.sh netns_down.sh netns_agent.sh mpirun_2hosts.sh; do
    if [ ! -f "$netns/$f" ]; then
        echo "FAIL two-host stage: $netns/$f is missing (tests/netns, or HVDC_NETNS_DIR)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

# One stage at a time on this machine: the host names node1/node2 are fixed.
exec 9>/run/lock/hvdc-two-hosts.lock 2>/dev/null || exec 9>/tmp/hvdc-two-hosts.lock
if ! flock -w 900 9; then
    echo "FAIL two-host stage: another two-host stage held the lock for 15 minutes"
    echo "0 passed, 1 failed"
    exit 1
fi

logs=$build/two-hosts-logs
rm -rf "$logs" && mkdir -p "$logs"

# ---- bring-up and teardown ----------------------------------------------------------------------
teardown() {
    local ns
    for ns in "$N1" "$N2"; do  # TERM first, then KILL whatever is still there
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
    done
    sleep 0.5
    for ns in "$N1" "$N2"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    done
    sh "$netns/netns_down.sh" >/dev/null 2>&1
}
on_exit() {
    teardown
    if ip netns list 2>/dev/null | grep -qE "^($N1|$N2)( |$)"; then
        echo "two_hosts: WARNING: could not remove the namespaces; run $netns/netns_down.sh" >&2
    fi
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

if ip netns list | grep -qE "^($N1|$N2)( |$)"; then
    echo "# two_hosts: removing $N1/$N2 left over from an earlier run"
    teardown
fi
if ! sh "$netns/netns_up.sh" > "$logs/netns_up.log" 2>&1; then
    echo "FAIL two-host bring-up"
    sed 's/^/    /' "$logs/netns_up.log"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---- running things ----------------------------------------------------------------------------

# hvdcrun_2h [hvdcrun options] PROG [ARGS]: build/hvdcrun as a user on node1 runs it: inside
# node1's network and UTS namespaces (hostname node1), with netns_agent.sh instead of ssh,
# Open MPI's TCP and out-of-band traffic on the veth subnet only (--network-interfaces), vader
# inside a host and tcp between hosts. Hosts, slots and the rest come from hvdcrun's own
# options; it adds root, --bind-to none, -x of every HVD_* variable, and yielding ranks (2
# hosts x 2 ranks share this machine's cores; busy-polling ranks make a small all-reduce ~60x
# slower).
in_node1=(ip netns exec "$N1" env HVDC_NETNS="$N1" NETNS_AGENT_UTS=1
          unshare --uts sh -c 'hostname "$0" && exec "$@"' "$N1")
hvdcrun_net=(--network-interfaces 10.77.0.0/24
             --mpi-args "--mca plm_rsh_agent $netns/netns_agent.sh --mca btl tcp,vader,self")
hvdcrun_2h=("${in_node1[@]}" "$build/hvdcrun" "${hvdcrun_net[@]}")
# mpirun_2h [mpirun args] PROG [ARGS]: the same with plain mpirun (tests/netns/mpirun_2hosts.sh),
# for the cases about mpirun's own policies (a rank killed, --enable-recovery).
mpirun_2h=(sh "$netns/mpirun_2hosts.sh" --mca btl "tcp,vader,self" --mca mpi_yield_when_idle 1)

# run_only NAME TIMEOUT_S COMMAND...: runs it under timeout, output to $logs/NAME.log; sets
# last_log, last_rc, last_s and timed_out (1 when the limit was hit; a bare exit status 137
# can also be mpirun reporting a rank killed by SIGKILL). The command runs in the background
# so that a signal to this script reaches its trap at once (the trap tears everything down).
run_only() {
    local name=$1 limit=$2; shift 2
    last_log=$logs/$(printf '%s' "$name" | tr -c 'A-Za-z0-9=.-' '_').log
    local t0
    t0=$(date +%s.%N)
    timeout -k 10 "$limit" "$@" > "$last_log" 2>&1 &
    wait $!
    last_rc=$?
    last_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    timed_out=0
    if [ "$last_rc" -eq 124 ] ||
       { [ "$last_rc" -eq 137 ] && awk -v s="$last_s" -v l="$limit" 'BEGIN { exit !(s >= l) }'; }
    then
        timed_out=1
    fi
}

# run_case NAME TIMEOUT_S COMMAND...: run_only, then the verdict from the exit status.
run_case() {
    run_only "$@"
    if [ "$last_rc" -eq 0 ]; then
        verdict PASS "$1" "$last_s s"
    elif [ "$timed_out" = 1 ]; then
        verdict FAIL "$1" "timed out after $2 s" "$last_log"
    else
        verdict FAIL "$1" "$last_s s, exit status $last_rc" "$last_log"
    fi
}

# wait_for_lines LOG REGEX N LIMIT_S PID: polls LOG every 0.5 s until N lines match REGEX;
# gives up after LIMIT_S seconds or once PID has ended. @return 0 when they are there.
wait_for_lines() {
    local log=$1 regex=$2 n=$3 polls=$(($4 * 2)) pid=$5
    for _ in $(seq 1 "$polls"); do
        [ "$(grep -c -E "$regex" "$log" 2>/dev/null)" -ge "$n" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    [ "$(grep -c -E "$regex" "$log" 2>/dev/null)" -ge "$n" ]
}

# verdict PASS|FAIL NAME DETAIL [LOG]: one line, and on failure the end of the log.
verdict() {
    echo "$1 $2 ($3)"
    if [ "$1" = PASS ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        [ -n "${4:-}" ] && tail -n 25 "$4" | sed 's/^/    /'
    fi
}

# The stage must not inherit settings from the caller's environment.
unset HVD_FUSION_THRESHOLD HOROVOD_FUSION_THRESHOLD HVD_HIERARCHICAL_ALLREDUCE \
      HOROVOD_HIERARCHICAL_ALLREDUCE HVD_CPU_ALLREDUCE HOROVOD_CPU_ALLREDUCE

t=$build/tests/mpi
on2="-H $hosts"
np4=(-np 4 -H "$hosts")

# ---- who is where --------------------------------------------------------------------------------
run_case "topology $on2" 60 \
    "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_topology" --size 4 --local-size 2 --cross-size 2 \
    --hosts "$N1,$N2"
run_only "example topology $on2" 60 "${hvdcrun_2h[@]}" "${np4[@]}" "$build/examples/topology"
if [ "$last_rc" -eq 0 ] && grep -q "^# 4 ranks on 2 hosts$" "$last_log"; then
    verdict PASS "example topology $on2" "$last_s s"
else
    verdict FAIL "example topology $on2" "exit status $last_rc; expected '# 4 ranks on 2 hosts'" \
        "$last_log"
fi

# ---- collectives, fusion on and off, hierarchical ------------------------------------------------
run_case "collectives $on2" 240 "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_collectives"
run_case "collectives $on2 HVD_FUSION_THRESHOLD=0" 120 \
    "${hvdcrun_2h[@]}" "${np4[@]}" -x HVD_FUSION_THRESHOLD=0 "$t/test_collectives" --no-big
run_case "collectives $on2 HVD_HIERARCHICAL_ALLREDUCE=1" 240 \
    "${hvdcrun_2h[@]}" "${np4[@]}" -x HVD_HIERARCHICAL_ALLREDUCE=1 "$t/test_collectives"

# ---- the GPU backend on the simulated device (tests/gpu/sim), one device per rank: NCCL's
# communicators across hosts, and the hierarchical device all-reduce (node reduce-scatter,
# cross-node all-reduce, node all-gather on three communicators), which needs several ranks on
# each of several nodes: no one-GPU machine can run it ----------------------------------------
g=$build/tests/gpu
run_case "gpu sim collectives $on2" 180 "${hvdcrun_2h[@]}" "${np4[@]}" \
    "$g/test_gpu_collectives_sim" --quick
run_case "gpu sim collectives $on2 HVD_HIERARCHICAL_ALLREDUCE=1" 180 \
    "${hvdcrun_2h[@]}" "${np4[@]}" -x HVD_HIERARCHICAL_ALLREDUCE=1 "$g/test_gpu_collectives_sim" --quick
run_case "gpu sim optimizer $on2 HVD_HIERARCHICAL_ALLREDUCE=1" 120 \
    "${hvdcrun_2h[@]}" "${np4[@]}" -x HVD_HIERARCHICAL_ALLREDUCE=1 "$g/test_gpu_optimizer_sim"
# an asynchronous NCCL error on rank 2 (a broken connection): its notice reaches both hosts
run_case "gpu sim asynchronous NCCL error on rank 2 $on2" 90 "${hvdcrun_2h[@]}" "${np4[@]}" \
    -x HVDC_SIM_NCCL_ERROR=2:3 "$g/test_gpu_async_error_sim" --victim 2

# ---- determinism: rank order across hosts; node order with the two-level all-reduce -------------
run_case "determinism $on2" 240 "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_determinism"
run_case "determinism $on2 HVD_HIERARCHICAL_ALLREDUCE=1 (node order)" 240 \
    "${hvdcrun_2h[@]}" "${np4[@]}" -x HVD_HIERARCHICAL_ALLREDUCE=1 "$t/test_determinism" --hierarchical

# ---- orders, threads, mismatches, a stop on one rank ---------------------------------------------
run_case "order $on2" 120 "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_order"
run_case "order $on2 hvd_init_comm on split halves" 120 "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_order" --split
run_case "threads $on2" 120 "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_threads"
run_case "mismatch $on2" 120 "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_mismatch"
# libhvdc stops on one rank alone: node2's rank 3 tells node1's ranks over TCP (in negotiation,
# inside the all-reduce); rank 0 aborts all
run_case "stop on one rank $on2 encode_requests on rank 3" 60 \
    "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_stop" encode_requests 3
run_case "stop on one rank $on2 negotiate_respond on rank 0" 60 \
    "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_stop" negotiate_respond 0
run_case "stop on one rank $on2 run_response on rank 3" 60 \
    "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_stop" run_response 3
# {0, 2} and {1, 3}: each process set spans both hosts
run_case "process sets $on2" 120 "${hvdcrun_2h[@]}" "${np4[@]}" "$t/test_process_sets"

# ---- training: the same parameters on two hosts as on one ---------------------------------------
# The flat all-reduce combines every element in rank order whatever the transport, the fusion
# threshold or the timing, so one host and two hosts, fusion off and default fusion, must end
# with the same parameters, bit for bit (the hash examples/train prints).
train_args=(--epochs 2 --min-accuracy 0.84)
accuracy() { sed -n 's/^final test accuracy: \([0-9.]*\)$/\1/p' "$1" | tail -n 1; }
params() { sed -n 's/.*parameters identical on all ranks: yes; hash \([0-9a-f]*\)$/\1/p' "$1" | tail -n 1; }
run_case "train one host np=4 HVD_FUSION_THRESHOLD=0" 300 \
    "$build/hvdcrun" -np 4 "$build/examples/train" "${train_args[@]}" \
    --fusion-threshold 0
acc1=$(accuracy "$last_log") hash1=$(params "$last_log")
run_case "train $on2 HVD_FUSION_THRESHOLD=0" 300 \
    "${hvdcrun_2h[@]}" "${np4[@]}" "$build/examples/train" "${train_args[@]}" --fusion-threshold 0
acc2=$(accuracy "$last_log") hash2=$(params "$last_log")
run_case "train $on2 default fusion" 300 \
    "${hvdcrun_2h[@]}" "${np4[@]}" "$build/examples/train" "${train_args[@]}"
hash3=$(params "$last_log")
same="train $on2 = one host, bit for bit (fusion off and default)"
if [ -n "$hash1" ] && [ "$hash1" = "$hash2" ] && [ "$hash1" = "$hash3" ]; then
    verdict PASS "$same" "parameter hash $hash1"
else
    verdict FAIL "$same" "hashes: one host '$hash1', two hosts '$hash2', default fusion '$hash3'"
fi
echo "# final test accuracy: one host $acc1, two hosts $acc2 (fusion off);" \
     "two hosts $(accuracy "$last_log") (default fusion)"

# ---- the launcher's other forms, from node1 --------------------------------------------------------
# The hosts from a hostfile, and from a Slurm allocation's variables (no -np, no -H): each must
# put ranks 0,1 on node1 and 2,3 on node2, which test_topology checks against every rank's host.
topo=("$t/test_topology" --size 4 --local-size 2 --cross-size 2 --hosts "$N1,$N2")
printf '# two hosts\n%s slots=2\n%s slots=2\n' "$N1" "$N2" > "$logs/hostfile"
run_case "hvdcrun --hostfile ($N1 slots=2, $N2 slots=2) topology" 60 \
    "${hvdcrun_2h[@]}" --hostfile "$logs/hostfile" "${topo[@]}"
run_case "hvdcrun in Slurm (SLURM_JOB_NODELIST=node[1-2] SLURM_TASKS_PER_NODE=2(x2)) topology" 60 \
    env SLURM_JOB_NODELIST="node[1-2]" SLURM_TASKS_PER_NODE="2(x2)" "${hvdcrun_2h[@]}" "${topo[@]}"
# Any program, not only libhvdc's: a Python script printing its rank from Open MPI's environment.
run_only "hvdcrun $on2 python3 ranks.py" 60 \
    "${hvdcrun_2h[@]}" "${np4[@]}" python3 "$root/tests/launcher/ranks.py"
got=$(grep '^rank ' "$last_log" | sed 's/ (local rank .*//' | sort | tr '\n' ';')
want="rank 0 of 4 on $N1;rank 1 of 4 on $N1;rank 2 of 4 on $N2;rank 3 of 4 on $N2;"
if [ "$last_rc" -eq 0 ] && [ "$got" = "$want" ]; then
    verdict PASS "hvdcrun $on2 python3 ranks.py" "$last_s s"
else
    verdict FAIL "hvdcrun $on2 python3 ranks.py" "exit status $last_rc; got '$got'" "$last_log"
fi
# Bad input: exit status 2 and a message naming what was wrong, before anything starts.
bad_case() {
    local what=$1 words=$2; shift 2
    run_only "hvdcrun refuses $what" 30 "${hvdcrun_2h[@]}" "$@"
    if [ "$last_rc" -eq 2 ] && grep -qF -- "$words" "$last_log" && ! grep -q Traceback "$last_log"
    then
        verdict PASS "hvdcrun refuses $what" "exit status 2: $(grep -m1 -F -- "$words" "$last_log")"
    else
        verdict FAIL "hvdcrun refuses $what" "exit status $last_rc, expected 2 and '$words'" \
            "$last_log"
    fi
}
bad_case "an unknown host" "unknown host 'node3'" -np 4 -H "$hosts,node3:2" "$t/test_topology"
bad_case "slots < 1" "slots must be at least 1" -np 2 -H "$N1:2,$N2:0" "$t/test_topology"
bad_case "-np larger than the slots" "-np 5 is more than the 4 slots" -np 5 -H "$hosts" \
    "$t/test_topology"
bad_case "a program that does not exist" "does not exist" "${np4[@]}" "$build/no-such-program"
printf '%s cpus=2\n' "$N1" > "$logs/hostfile-bad"
bad_case "a hostfile line that is not 'host slots=N'" "is not 'host slots=N'" \
    --hostfile "$logs/hostfile-bad" "$t/test_topology"

# ---- hvdcrun --check across the two hosts (tests/launcher/check_two_hosts.py) --------------------
# No --network-interfaces: the check finds 10.77.0.0/24 itself (veth-node1, veth-node2), then
# launches the program there; with node2's link down it must name node1–node2 and the step.
check_2h=(python3 "$root/tests/launcher/check_two_hosts.py" --build "$build" --netns "$netns"
          --wrap "${in_node1[*]@Q}")
run_case "hvdcrun --check $on2: all green, then the program on the network it found" 120 \
    "${check_2h[@]}" green
run_case "hvdcrun --check $on2, node2's link down: names $N1–$N2 and the step within 15 s" 60 \
    "${check_2h[@]}" link-down

# ---- Slurm for real: slurmctld and slurmd with munge on the two hosts (tests/slurm/) -------------
# Its own lines (PASS/FAIL/SKIP) and counts; the daemons are started and stopped by it. It
# takes ~20 s; the limit only keeps a stuck daemon from holding the stage (no count: a failure).
sh_log=$logs/slurm-stage.log
timeout -k 10 300 bash "$root/tests/slurm/slurm_two_hosts.sh" "$build" "$netns" "$logs/slurm" 2>&1 |
    tee "$sh_log" | grep -v '^[0-9]* passed, '
read -r sp sf ss < <(tail -n 1 "$sh_log" |
    sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed\(, \([0-9]*\) skipped\)\{0,1\}$/\1 \2 \4/p')
passed=$((passed + ${sp:-0})) failed=$((failed + ${sf:-1})) skipped=$((skipped + ${ss:-0}))

# ---- elastic training across the two hosts -------------------------------------------------------
# examples/train --elastic, 3 epochs, a commit every 25 steps (tests/launcher/check_elastic.py):
# uninterrupted first (the reference accuracy); then in epoch 2 node2 leaves the discovery
# answer and its ranks (2, 3) are killed: hvdcrun must restart on node1 alone (np 2) from the
# last commit, losing at most 25 steps; once that run has restored, node2 is back and with
# the job stops at its next commit and goes on at np 4; it must finish every step of
# the 3 epochs exactly once and reach the target. Last: --min-np 4 with node2 gone ends the job
# with a message and a non-zero status. Figures: lines '# elastic figures: ...'.
elastic_args=(--epochs 3 --commit-every 25 --min-accuracy 0.84)
run_case "elastic $on2 uninterrupted (reference)" 120 \
    "${hvdcrun_2h[@]}" "${np4[@]}" --min-np 2 --max-np 4 --elastic-dir "$logs/elastic-reference" \
    "$build/examples/train" --elastic --epochs 3 --commit-every 25 --min-accuracy 0.84
acc_ref=$(accuracy "$last_log")
check_elastic=(python3 "$root/tests/launcher/check_elastic.py" --build "$build" --logs "$logs"
               --hosts "$hosts" --victim-ranks 2,3 --wrap "${in_node1[*]@Q}"
               --hvdcrun-args "${hvdcrun_net[*]@Q}" "${elastic_args[@]}" --timeout 150)
run_case "elastic shrink to $N1 then grow to $on2" 180 \
    "${check_elastic[@]}" shrink-grow ${acc_ref:+--reference-accuracy "$acc_ref"}
grep '^# elastic figures' "$last_log"
run_case "elastic failure leaving fewer than --min-np 4 slots: clear message, non-zero" 120 \
    "${check_elastic[@]}" min-np
grep '^# elastic figures' "$last_log"

# ---- elastic PyTorch across the two hosts ----------------------------------------------------------
# tests/launcher/elastic_torch.py, the shape of Horovod's elastic ImageNet example (ElasticSampler,
# a TorchState subclass, commit every 4 batches, check_host_updates every 2), 2 epochs at np 4: in
# epoch 1 node2 leaves the discovery answer and its ranks are killed; hvdcrun restarts on node1
# at np 2 from the last commit; node2 comes back and the job stops at its next host check and
# goes on at np 4. check_elastic_torch.py checks that each epoch's committed history trained
# every sample exactly once (none skipped, none twice) and that reset() ran on each restart.
if /usr/bin/python3 -c "import torch, hvdc" 2>/dev/null ||
   PYTHONPATH="$root/bindings/python" /usr/bin/python3 -c "import torch, hvdc" 2>/dev/null; then
    run_case "elastic PyTorch $on2: node2 killed mid-epoch, every sample once, node2 back" 200 \
        /usr/bin/python3 "$root/tests/launcher/check_elastic_torch.py" --build "$build" \
        --logs "$logs" --hosts "$hosts" --victim-ranks 2,3 --grow --wrap "${in_node1[*]@Q}" \
        --hvdcrun-args "${hvdcrun_net[*]@Q}" --timeout 170
    grep '^# elastic figures' "$last_log"
else
    echo "SKIP elastic PyTorch $on2 (/usr/bin/python3 cannot import torch and hvdc)"
fi

# ---- a rank killed on node2 (only with --kill) ---------------------------------------------------
# Rank 3 (node2) SIGKILLs itself after 3 s of 4 MiB all-reduces. Passes when each rank on node1
# printed a libhvdc error and its exit line within $kill_bound_s s of its last good step.
# Two launcher behaviours: by default Open MPI's mpirun aborts the job when a rank dies (the
# survivors are killed before libhvdc can say anything); with --enable-recovery it leaves them
# running, and only libhvdc's own failure detection can end them.
kill_case() {
    local name=$1 launcher_kills=$2; shift 2
    local limit=$((3 + kill_bound_s + 20))
    run_only "$name" "$limit" "${mpirun_2h[@]}" "$@" "$t/test_kill" --victim 3 --after-s 3 \
        --max-s "$limit"
    local r why="" note=""
    if [ "$timed_out" = 1 ]; then
        # Open MPI 4.1's mpirun --enable-recovery does not exit across hosts once a rank died,
        # even after every survivor has exited (seen here); the ranks' own lines decide.
        note="; mpirun itself did not exit and was stopped after $limit s (launcher, not libhvdc)"
    fi
    for r in 0 1; do
        local exit_s
        exit_s=$(sed -n "s/^KILLTEST rank=$r host=$N1 exit .*after_s=\([0-9.]*\)$/\1/p" "$last_log")
        if ! grep -q "^KILLTEST rank=$r host=$N1 failed " "$last_log"; then
            why+="rank $r on $N1 reported no libhvdc error; "
        elif [ -z "$exit_s" ]; then
            why+="rank $r on $N1 never reached its exit; "
        elif ! awk -v s="$exit_s" -v b="$kill_bound_s" 'BEGIN { exit !(s <= b) }'; then
            why+="rank $r on $N1 exited ${exit_s} s after its last good step "
            why+="(bound $kill_bound_s s); "
        fi
    done
    # Open MPI's default policy kills the whole job when a rank dies; it may get to node1's
    # ranks before libhvdc does. Then the job must simply be over, non-zero, in time.
    if [ -n "$why" ] && [ "$launcher_kills" = 1 ] && [ "$timed_out" = 0 ] && [ "$last_rc" -ne 0 ] &&
        awk -v s="$last_s" -v b="$((3 + kill_bound_s + 5))" 'BEGIN { exit !(s <= b) }'; then
        note="; mpirun ended the job first (status $last_rc), before libhvdc reported"
        why=""
    fi
    if [ -z "$why" ]; then
        verdict PASS "$name" "$last_s s$note"
    else
        verdict FAIL "$name" "${why%; }; mpirun exit status $last_rc after $last_s s" "$last_log"
    fi
}
if [ "$with_kill" = 1 ]; then
    what="node1 reports and exits within ${kill_bound_s} s"
    # (default stage: both launcher policies; libhvdc's own detection must name the failure)
    kill_case "kill rank 3 on $N2 $on2: $what, or mpirun ends the job" 1
    kill_case "kill rank 3 on $N2 $on2 --enable-recovery: $what" 0 --enable-recovery
fi

# ---- node2 lost: its link cut, or every process of it stopped (SIGSTOP) -------------------------
# Nothing dies and nothing is sent: only libhvdc's host watch can notice. node1's ranks must
# fail naming node2 and its ranks within HVD_HOST_TIMEOUT (+ 2 s), and hvdcrun must end the job
# (mpirun's own abort waits for node2's daemon: hvdcrun stops it 10 s after the first rank named
# the lost host). The fault comes once every rank has said it runs (its first all-reduce done):
# a launch slower than a fixed wait would have the link cut inside MPI_Init, another case. Last
# in the stage: the link comes back up, node2's processes are killed.
# lost_case NAME FAULT TIMEOUT_S: FAULT is link or stop; TIMEOUT_S "" keeps the default (30 s).
lost_case() {
    local name=$1 fault=$2 timeout_s=$3 bound=${3:-30} start_s=60
    local limit=$((start_s + bound + 10 + 20)) t0 t_fault r why=""
    last_log=$logs/$(printf '%s' "$name" | tr -c 'A-Za-z0-9=.-' '_').log
    t0=$(date +%s.%N)
    timeout -k 10 "$limit" "${hvdcrun_2h[@]}" "${np4[@]}" \
        ${timeout_s:+-x HVD_HOST_TIMEOUT=$timeout_s} \
        "$t/test_lost_host" --max-s "$limit" > "$last_log" 2>&1 &
    local job=$!
    if ! wait_for_lines "$last_log" '^LOSTTEST rank=[0-3] host=.* running$' 4 "$start_s" "$job"
    then
        kill "$job" 2>/dev/null  # timeout passes it on, and kills 10 s later (-k 10)
        wait "$job" 2>/dev/null
        ip netns pids "$N1" | xargs -r kill -9 2>/dev/null  # ranks stuck in MPI_Init
        ip netns pids "$N2" | xargs -r kill -9 2>/dev/null
        verdict FAIL "$name" "$(grep -c ' running$' "$last_log") of 4 ranks running ${start_s} s \
after the start: the job never ran, so the fault was not applied" "$last_log"
        return
    fi
    sleep 1  # a second of steps before the fault
    t_fault=$(date +%s.%N)
    if [ "$fault" = link ]; then
        ip -n "$N2" link set "veth-$N2" down
    else
        ip netns pids "$N2" | xargs -r kill -STOP
    fi
    wait "$job"
    last_rc=$?
    local ended_s
    ended_s=$(awk -v a="$t_fault" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    ip -n "$N2" link set "veth-$N2" up 2>/dev/null
    ip netns pids "$N2" | xargs -r kill -9 2>/dev/null
    for r in 0 1; do
        local line after
        line=$(grep "^LOSTTEST rank=$r host=$N1 failed " "$last_log")
        after=$(printf '%s' "$line" | sed -n 's/.* after_s=\([0-9.]*\) .*/\1/p')
        if ! printf '%s' "$line" | grep -qF "host '$N2' (ranks 2-3) is lost"; then
            why+="rank $r on $N1 did not fail naming host '$N2' (ranks 2-3); "
        elif ! awk -v s="$after" -v b="$((bound + 2))" 'BEGIN { exit !(s <= b) }'; then
            why+="rank $r on $N1 failed ${after} s after its last good step"
            why+=" (bound $((bound + 2)) s); "
        elif ! grep -q "^LOSTTEST rank=$r host=$N1 shutdown " "$last_log"; then
            why+="rank $r on $N1: hvd_shutdown did not return; "
        fi
    done
    [ "$last_rc" -ne 0 ] && [ "$last_rc" -ne 124 ] && [ "$last_rc" -ne 137 ] ||
        why+="hvdcrun exit status $last_rc: the job did not end by itself; "
    if [ -z "$why" ]; then
        local failed_at
        failed_at=$(grep -m1 -o "after_s=[0-9.]*" "$last_log")
        verdict PASS "$name" "node1 failed $failed_at, job ended ${ended_s} s after the fault"
        grep -m1 "^LOSTTEST rank=0 .* failed " "$last_log" | sed 's/^/    # /'
    else
        verdict FAIL "$name" "${why%; }" "$last_log"
    fi
}
lost_case "node2's link cut $on2 HVD_HOST_TIMEOUT=5: node1 names it, hvdcrun ends the job" link 5
lost_case "every process of node2 stopped (SIGSTOP) $on2, default HVD_HOST_TIMEOUT (30 s)" stop ""

# Elastic: node2's link cut in epoch 2 of examples/train --elastic: hvdcrun leaves node2 out and
# the job goes on at np 2 on node1 from its last commit, finishing every epoch.
name="elastic $on2: node2's link cut, the job goes on on $N1 (HVD_HOST_TIMEOUT=5)"
last_log=$logs/elastic-lost-host.log
timeout -k 10 240 "${hvdcrun_2h[@]}" "${np4[@]}" --min-np 2 --max-np 4 -x HVD_HOST_TIMEOUT=5 \
    --elastic-dir "$logs/elastic-lost-host" "$build/examples/train" --elastic \
    "${elastic_args[@]}" --log-every 10 > "$last_log" 2>&1 &
job=$!
wait_for_lines "$last_log" '^# step [0-9]* epoch 2 ' 1 120 "$job"  # until rank 0 logs epoch 2
ip -n "$N2" link set "veth-$N2" down
wait "$job"
last_rc=$?
ip -n "$N2" link set "veth-$N2" up 2>/dev/null
ip netns pids "$N2" | xargs -r kill -9 2>/dev/null
if [ "$last_rc" -eq 0 ] && grep -q "host '$N2' (ranks 2-3) is lost" "$last_log" &&
   grep -q "host $N2 failed" "$last_log" && grep -q "np 2 on $N1" "$last_log" &&
   [ -n "$(accuracy "$last_log")" ]; then
    verdict PASS "$name" "final accuracy $(accuracy "$last_log")"
else
    verdict FAIL "$name" \
        "exit status $last_rc; expected 0, node2 named lost, left out, np 2 on $N1" \
        "$last_log"
fi

echo "# two-host stage took $(( $(date +%s) - start )) s; logs in $logs"
echo "$passed passed, $failed failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped")"
[ "$failed" -eq 0 ]
