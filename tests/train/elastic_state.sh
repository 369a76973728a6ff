#!/usr/bin/env bash
# elastic_state.sh - hvd_elastic across a restart with another number of ranks: a run at np
# NP1 commits every few steps and ends with steps after its last commit (they are lost, as
# when a host dies); a run at np NP2 restores and finishes the epoch (tests/train/test_elastic.c
# checks the restored state and that no example was visited twice or skipped).
# Usage: elastic_state.sh TEST_ELASTIC SCRATCH_DIR NP1 NP2 [resume|stop|corrupt]
#   resume   20 steps, commits every 6 (the 3rd, at step 18, is restored at NP2)
#   stop     a stop request before the 3rd commit (every 5 steps): the run stops there with
#            stop = 1 on every rank, and NP2 restores that commit (step 15)
#   corrupt  bad commit files and mismatched registrations are refused at NP2
set -euo pipefail
bin=$1 np1=$3 np2=$4 mode=${5:-resume}
dir=$(mktemp -d "$2/elastic_state.XXXXXX")
trap 'rm -rf "$dir"' EXIT
run() { timeout -k 5 60 "${HVDCRUN:?HVDCRUN: the path of build/hvdcrun}" -np "$@"; }
case "$mode" in
resume)
    run "$np1" "$bin" first "$dir" 20 6
    run "$np2" "$bin" resume "$dir" 3 "$np1" 18 ;;
stop)
    run "$np1" "$bin" first "$dir" 40 5 --stop-at 3
    run "$np2" "$bin" resume "$dir" 3 "$np1" 15 ;;
corrupt)
    run "$np1" "$bin" first "$dir" 10 5
    run "$np2" "$bin" corrupt "$dir" ;;
*) echo "elastic_state.sh: unknown mode $mode" >&2; exit 2 ;;
esac
