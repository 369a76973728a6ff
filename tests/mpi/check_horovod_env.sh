#!/usr/bin/env bash
# check_horovod_env.sh - Horovod's variables at hvd_init, np 2: rank 0 names each one libhvdc
# does not use, once, with why; a value only Horovod's reading accepts starts the job and is
# named with that reading; HOROVOD_LOG_HIDE_TIME=0 puts the time on log lines;
# HOROVOD_THREAD_AFFINITY pins each rank's background thread to its CPU (a list shorter than
# the node's ranks is ignored, with a warning on every rank); HOROVOD_LOG_LEVEL=FATAL starts.
# Usage: check_horovod_env.sh HVDCRUN WORKLOAD      (exit 0 on success; prints what it saw)
set -uo pipefail
hvdcrun=$1 workload=$2
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fail=0
bad() { echo "FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; fail=1; }
cpus=$(nproc)
[ "$cpus" -ge 2 ] && list="1,0" want0=1 want1=0 || list="0,0" want0=0 want1=0

env HOROVOD_NUM_NCCL_STREAMS=2 HOROVOD_GLOO_TIMEOUT_SECONDS=30 HOROVOD_CONTROLLER=mpi \
    HOROVOD_HIERARCHICAL_ALLREDUCE=true HOROVOD_LOG_HIDE_TIME=0 HOROVOD_THREAD_AFFINITY=$list \
    "$hvdcrun" -np 2 "$workload" >"$out" 2>"$err" || bad "the run with Horovod's variables failed"
for words in "HOROVOD_NUM_NCCL_STREAMS='2' is not used by libhvdc" \
             "HOROVOD_GLOO_TIMEOUT_SECONDS='30' is not used by libhvdc: libhvdc runs on MPI" \
             "HOROVOD_HIERARCHICAL_ALLREDUCE='true' is not one of '0', '1'; read as Horovod reads it: 0"; do
    n=$(grep -cF "$words" "$err")
    [ "$n" -eq 1 ] || bad "expected one line with \"$words\", got $n"
    grep -F "$words" "$err" | grep -qE '^\[hvdc [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}\.[0-9]{6} warning rank 0\]' ||
        bad "\"$words\" is not a timestamped line of rank 0"
done
grep -q "HOROVOD_CONTROLLER" "$err" && bad "HOROVOD_CONTROLLER=mpi is what libhvdc does, yet it was named"
grep -q "^AFFINITY rank 0 pinned 1 cpus $want0\$" "$out" || bad "rank 0's background thread is not on CPU $want0 alone"
grep -q "^AFFINITY rank 1 pinned 1 cpus $want1\$" "$out" || bad "rank 1's background thread is not on CPU $want1 alone"
[ $fail -eq 0 ] && { echo "notes:"; grep "rank 0\]" "$err"; grep "^AFFINITY" "$out"; }

HOROVOD_THREAD_AFFINITY=0 "$hvdcrun" -np 2 "$workload" >"$out" 2>"$err" || bad "a short affinity list failed the run"
n=$(grep -c "names fewer CPUs than the 2 ranks of this node" "$err")
[ "$n" -eq 2 ] || bad "a short affinity list: $n warnings, expected one per rank"
grep -q "^AFFINITY rank 0 pinned 0 " "$out" || bad "a short affinity list pinned a thread"

HOROVOD_LOG_LEVEL=FATAL HOROVOD_NUM_NCCL_STREAMS=2 "$hvdcrun" -np 2 "$workload" >"$out" 2>"$err" ||
    bad "HOROVOD_LOG_LEVEL=FATAL failed the run"
grep -q "^\[hvdc " "$err" && bad "HOROVOD_LOG_LEVEL=FATAL: libhvdc logged"
[ $fail -eq 0 ] && echo "PASS"
exit $fail
