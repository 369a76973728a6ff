#!/usr/bin/env bash
# bench_device.sh - a benchmark's --device gpu at np 2 either measures (a GPU per rank, a CUDA
# build: exit 0, no wrong results and nccl baseline rows) or stops with a non-zero exit status
# and a "<benchmark>: --device gpu: <why>" message (issue 17 item 4: the option builds and
# refuses clearly without a GPU). allreduce_bench, latency_bench and fusion_bench.
# Usage: bench_device.sh BENCH [ARGS...]   (ARGS: the benchmark's options for a short run)
set -uo pipefail
bench=${1:?usage: bench_device.sh BENCH [ARGS...]}
shift
name=$(basename "$bench")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"${HVDCRUN:?HVDCRUN: the path of build/hvdcrun}" -np 2 "$bench" --device gpu "$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ $rc -eq 0 ] && grep -q "Out of bounds values : 0 OK" "$out" && grep -q " nccl " "$out"; then
    echo "PASS: measured on the GPU"
elif [ $rc -ne 0 ] && grep -E -q "$name: --device gpu: (no CUDA device visible|local rank [0-9]+ has no GPU|another rank has no usable GPU|this build has no GPU backend)" "$out"; then
    # only the reasons a machine without GPUs gives: a failure on a GPU (CUDA or NCCL errors)
    # must fail the test
    echo "PASS: refused clearly"
else
    echo "FAIL: exit status $rc without results or a clear --device gpu message"; exit 1
fi
