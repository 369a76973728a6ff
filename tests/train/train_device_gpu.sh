#!/usr/bin/env bash
# train_device_gpu.sh - examples/train --device gpu at np = 2 either trains (a GPU per rank, a
# CUDA build: it must then reach 80 % in one epoch with identical parameters) or stops every
# rank with exit status 1 and a "--device gpu: <why>" message; never a crash or a hang.
# Usage: train_device_gpu.sh TRAIN_BINARY
set -uo pipefail
train=$1
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"${HVDCRUN:?HVDCRUN: the path of build/hvdcrun}" -np 2 "$train" --device gpu --epochs 1 \
    --min-accuracy 0.80 >"$out" 2>"$err"
rc=$?
cat "$out" "$err"
if [ $rc -eq 0 ]; then
    grep -q "parameters identical on all ranks: yes" "$out" || { echo "FAIL: no agreement line"; exit 1; }
    echo "PASS: trained on the GPU"
elif [ $rc -eq 1 ] && grep -q -- "--device gpu: " "$err"; then
    echo "PASS: refused clearly: $(grep -m1 -- '--device gpu: ' "$err")"
else
    echo "FAIL: exit status $rc without a clear --device gpu message"
    exit 1
fi
