#!/usr/bin/env bash
# cache_full_warning.sh - once the response cache is full (it never evicts), rank 0 warns once,
# naming HVD_CACHE_CAPACITY and the cause (an unnamed all-reduce every step): with a capacity
# of 4 a run of more names warns exactly once; with the default capacity, or the cache off
# (HVD_CACHE_CAPACITY=0), it does not warn.
# Usage: cache_full_warning.sh TEST_BINARY ARGS...   (a short run of many names; mpirun_env set)
set -uo pipefail
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail=0
run() { # capacity (or "default"), expected warnings
    if [ "$1" = default ]; then unset HVD_CACHE_CAPACITY; else export HVD_CACHE_CAPACITY=$1; fi
    mpirun --oversubscribe --bind-to none -np 3 "${args[@]}" >/dev/null 2>"$err" ||
        { cat "$err"; echo "FAIL: the run with capacity $1 failed"; fail=1; return; }
    n=$(grep -c "the response cache is full" "$err")
    if [ "$n" -ne "$2" ]; then
        cat "$err"; echo "FAIL: capacity $1: $n warnings, expected $2"; fail=1; return
    fi
    if [ "$2" -eq 1 ] && ! grep "the response cache is full" "$err" |
            grep -q "rank 0.*name it, or raise HVD_CACHE_CAPACITY"; then
        cat "$err"; echo "FAIL: capacity $1: the warning does not come from rank 0 naming the fix"
        fail=1; return
    fi
    echo "capacity $1: $n warning(s)"
}
args=("$@")
run 4 1
run default 0
run 0 0
[ $fail -eq 0 ] && echo "PASS"
exit $fail
