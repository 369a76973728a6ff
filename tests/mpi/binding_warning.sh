#!/usr/bin/env bash
# binding_warning.sh - hvd_init warns once, on rank 0, when a rank may run on only one CPU
# (issue 17 item 5): np 2 under mpirun --bind-to hwthread (one CPU per rank, also where a core
# has two hardware threads, which --bind-to core would leave to each rank) warns, naming --bind-to none and
# --map-by slot:PE=2; --bind-to none does not warn. Skipped (77) on a machine with one CPU.
# Usage: binding_warning.sh TEST_BINARY   (a short test that calls hvd_init; mpirun_env set)
set -uo pipefail
[ "$(nproc)" -ge 2 ] || { echo "SKIPPED: one CPU here: every binding leaves one CPU"; exit 77; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail=0
mpirun --oversubscribe --bind-to hwthread -np 2 "$1" >/dev/null 2>"$err" || { cat "$err"; echo "FAIL: --bind-to hwthread run"; fail=1; }
n=$(grep -c "may run on only one CPU" "$err")
if [ "$n" -ne 1 ] || ! grep -q -- "--bind-to none" "$err" || ! grep -q -- "--map-by slot:PE=2" "$err"; then
    cat "$err"; echo "FAIL: --bind-to hwthread: $n warnings naming the fixes, expected 1"; fail=1
else
    echo "--bind-to hwthread: $(grep -m1 "may run on only one CPU" "$err")"
fi
mpirun --oversubscribe --bind-to none -np 2 "$1" >/dev/null 2>"$err" || { cat "$err"; echo "FAIL: --bind-to none run"; fail=1; }
if grep -q "may run on only one CPU" "$err"; then cat "$err"; echo "FAIL: warned under --bind-to none"; fail=1; fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail
