#!/usr/bin/env bash
# train_resume.sh - examples/train stopped mid-epoch (--stop-after, which saves a checkpoint)
# and continued with --resume ends with the same parameters, bit for bit, as one uninterrupted
# run. np = 2: the average of two ranks does not depend on how the all-reduce is cut up.
# Extra arguments go to every run: tests/gpu/on_device.sh passes --device gpu (the optimizer's
# device state through the checkpoint) with TRAIN_RESUME_NP=1 (one GPU).
# Usage: train_resume.sh TRAIN_BINARY SCRATCH_DIR [TRAIN ARGUMENTS...]
set -euo pipefail
train=$1
ckpt="$2/train_resume.$$.ckpt"
shift 2
extra=("$@")
trap 'rm -f "$ckpt"' EXIT
run() { "${HVDCRUN:?HVDCRUN: the path of build/hvdcrun}" -np "${TRAIN_RESUME_NP:-2}" "$train" \
            --epochs 2 --seed 3 "${extra[@]}" "$@"; }
hash_of() { sed -n 's/.*parameters identical on all ranks: yes; hash \([0-9a-f]*\).*/\1/p'; }

whole=$(run | tee /dev/stderr | hash_of)
run --checkpoint "$ckpt" --stop-after 600 | tee /dev/stderr | grep -q "stopped after 600 steps"
resumed=$(run --checkpoint "$ckpt" --resume | tee /dev/stderr | hash_of)
echo "uninterrupted: ${whole:-none}; stopped at step 600 and resumed: ${resumed:-none}"
[ -n "$whole" ] && [ "$whole" = "$resumed" ] || { echo "FAIL: the resumed run differs"; exit 1; }
echo "PASS"
