#!/usr/bin/env bash
# test_steps.sh - tests/gpu/steps.sh, the step runner of on_device.sh, with stand-in steps, here
# (a GPU session has minutes: the runner must not lose them). With a budget of 11 s: steps that
# pass, fail, run as a shell function, and one that would run 60 s, stopped at the budget; the
# step after it is skipped; the whole run ends within the budget; summary.log and the archive
# hold every step. Then HVDC_STEPS: only the matching steps and the ones always run, and the
# previous run's logs gone.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; [ -f "$t/out/summary.log" ] && cat "$t/out/summary.log"; exit 1; }
has() { grep -qx -- "$2" "$1" || fail "$1 lacks the line '$2'"; }

began=$(date +%s)
(
    export HVDC_DEVICE_BUDGET=11
    unset HVDC_STEPS
    source "$here/steps.sh"
    steps_begin "$t/out" "$t/work/logs" prep
    hello() { echo "from a function"; }
    step prep true
    step passes echo hi
    step fails false
    step func hello
    step hangs sleep 60
    step late true
    steps_end
) >"$t/run1.txt" 2>&1
rc=$? elapsed=$(($(date +%s) - began))
[ $rc -ne 0 ] || fail "a run with a failed and a skipped step exited 0"
[ $elapsed -le 20 ] || fail "the run took $elapsed s against a budget of 11 s"
s=$t/out/summary.log
has "$s" "3 passed, 2 failed, 1 skipped"
has "$s" "late: skipped, past the budget of 11 s (HVDC_DEVICE_BUDGET)"
grep -q "^hangs: FAILED (exit 124, out of time) in " "$s" || fail "hangs was not stopped at the budget"
grep -q "^fails: FAILED (exit 1) in " "$s" || fail "no line for fails"
for name in prep passes func; do grep -q "^$name: ok in " "$s" || fail "no ok line for $name"; done
mkdir "$t/unpacked" && tar xzf "$t/out/on_device_logs.tgz" -C "$t/unpacked" || fail "the archive does not unpack"
grep -qx "hi" "$t/unpacked/logs/passes.log" || fail "passes.log lacks the step's output"
grep -qx "from a function" "$t/unpacked/logs/func.log" || fail "func.log lacks the function's output"
cmp -s "$s" "$t/unpacked/logs/summary.log" || fail "the archive's summary differs"
[ "$(ls "$t/out")" = "$(printf 'on_device_logs.tgz\nsummary.log')" ] || fail "OUT_DIR holds $(ls "$t/out")"

(
    export HVDC_STEPS='^(b|gpu_.*)$'
    source "$here/steps.sh"
    steps_begin "$t/out" "$t/work/logs" a
    step a true
    step b true
    step c false
    step gpu_x true
    steps_end
) >"$t/run2.txt" 2>&1 || fail "a run of passing steps exited $? ($(cat "$t/run2.txt"))"
has "$s" "3 passed, 0 failed, 0 skipped"
grep -q "^c: " "$s" && fail "c ran though HVDC_STEPS does not match it"
ls "$t/work/logs/passes.log" 2>/dev/null && fail "the first run's logs are still there"
for name in a b gpu_x; do grep -q "^$name: ok in " "$s" || fail "$name did not run"; done
echo "PASS: steps.sh keeps the budget (a 60 s step stopped at 11 s, the next skipped; $elapsed s in all), selects by HVDC_STEPS and packs every log"
