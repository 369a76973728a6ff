#!/usr/bin/env bash
# test.sh - the whole test suite: installs what is missing, builds, runs the unit tests and the
# multi-rank tests (each mpirun under a timeout), then the same across two namespaced hosts
# (tests/two_hosts.sh), the wire codec under libFuzzer (tests/fuzz.sh) and the suite under
# ASan+UBSan and TSan (tests/sanitizers.sh), and ends with "N passed, N failed"
# (", N skipped" when tests skipped themselves with their reason, e.g. GPU tests without a GPU).
# Usage: scripts/test.sh            (CI runs exactly this, through .ci/run)
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

# One test at a time: the machine has 2 cores and np = 4 already oversubscribes them.
# (suite 'sanitizer': smaller variants that only tests/sanitizers.sh runs, in its own builds)
meson test -C build --num-processes 1 --print-errorlogs --no-suite sanitizer
status=$?

# Count from meson's machine-readable log so the closing line is exact.
# A test may skip only by saying why (exit 77): the GPU tests on a machine without a GPU.
read -r passed failed skipped < <(python3 - build/meson-logs/testlog.json <<'PY'
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    result = json.loads(line).get("result")
    if result in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif result == "SKIP":
        skipped += 1
    else:
        failed += 1  # FAIL, TIMEOUT, ERROR
print(passed, failed, skipped)
PY
)
passed=${passed:-0} failed=${failed:-1} skipped=${skipped:-0}

# The two-host stage: the multi-rank tests and training across two namespaced hosts
# (tests/two_hosts.sh; needs root, else it says why and counts as skipped, never as passed).
# Its last line is "N passed, N failed" or "0 passed, 0 failed, 1 skipped".
tests/two_hosts.sh build | tee build/two-hosts-stage.log
stage_status=${PIPESTATUS[0]}
read -r p2 f2 s2 < <(tail -n 1 build/two-hosts-stage.log |
    sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed\(, \([0-9]*\) skipped\)\{0,1\}$/\1 \2 \4/p')
if [ -z "${p2:-}" ]; then
    echo "two-host stage: no 'N passed, N failed' line (exit status $stage_status)"
    p2=0 f2=1 s2=0
elif [ "$stage_status" -ne 0 ] && [ "$f2" -eq 0 ]; then
    f2=1  # it failed without saying which test
fi
passed=$((passed + p2)) failed=$((failed + f2)) skipped=$((skipped + ${s2:-0}))

# Fuzzing the wire codec (tests/fuzz.sh, ~70 s) and the suite under ASan+UBSan and TSan
# (tests/sanitizers.sh, ~5-8 min). Each ends with "N passed, N failed".
for stage in fuzz sanitizers; do
    if [ "$stage" = fuzz ]; then tests/fuzz.sh build | tee "build/$stage-stage.log"
    else tests/sanitizers.sh | tee "build/$stage-stage.log"; fi
    stage_status=${PIPESTATUS[0]}
    read -r ps fs < <(tail -n 1 "build/$stage-stage.log" |
        sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
    if [ -z "${ps:-}" ]; then
        echo "$stage stage: no 'N passed, N failed' line (exit status $stage_status)"
        ps=0 fs=1
    elif [ "$stage_status" -ne 0 ] && [ "$fs" -eq 0 ]; then
        fs=1
    fi
    passed=$((passed + ps)) failed=$((failed + fs))
done

echo "test suite took $(( $(date +%s) - start )) s"
echo "$passed passed, $failed failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped")"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
