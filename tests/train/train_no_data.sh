#!/usr/bin/env bash
# train_no_data.sh - examples/train pointed at a directory without Fashion-MNIST stops every
# rank with exit status 1 and says how to get the data: the Debian package
# dataset-fashion-mnist, or --data DIR (idx_reader.c says so). Needs no data set itself.
# Usage: train_no_data.sh TRAIN_BINARY
set -uo pipefail
train=$1
empty=$(mktemp -d) err=$(mktemp)
trap 'rm -rf "$empty" "$err"' EXIT
"${HVDCRUN:?HVDCRUN: the path of build/hvdcrun}" -np 2 "$train" --data "$empty" --epochs 1 2>"$err" >/dev/null
rc=$?
cat "$err"
[ $rc -eq 1 ] || { echo "FAIL: exit status $rc, expected 1"; exit 1; }
grep -q "dataset-fashion-mnist" "$err" && grep -q -- "--data" "$err" ||
    { echo "FAIL: the message does not name the package and --data"; exit 1; }
echo "PASS"
