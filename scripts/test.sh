#!/usr/bin/env bash
# test.sh - the whole test suite: installs what is missing, builds, runs the unit tests and the
# multi-rank tests (each mpirun under a timeout), and ends with "N passed, N failed".
# Usage: scripts/test.sh            (CI runs exactly this, through .ci/run)
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

# One test at a time: the machine has 2 cores and np = 4 already oversubscribes them.
meson test -C build --num-processes 1 --print-errorlogs
status=$?

# Count from meson's machine-readable log so the closing line is exact.
read -r passed failed < <(python3 - build/meson-logs/testlog.json <<'PY'
import json, sys
passed = failed = 0
for line in open(sys.argv[1]):
    result = json.loads(line).get("result")
    if result in ("OK", "EXPECTEDFAIL"):
        passed += 1
    else:
        failed += 1  # FAIL, TIMEOUT, ERROR, SKIP (nothing is skipped to go green)
print(passed, failed)
PY
)
echo "test suite took $(( $(date +%s) - start )) s"
echo "${passed:-0} passed, ${failed:-1} failed"
[ "$status" -eq 0 ] && [ "${failed:-1}" -eq 0 ]
