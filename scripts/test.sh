#!/usr/bin/env bash
# test.sh - the whole test suite: installs what is missing, builds, and runs every test once or
# more, each multi-rank run under a timeout; ends with "N passed, N failed" (", N skipped" when
# tests skipped themselves with their reason, e.g. GPU tests without a GPU). The stages:
#   asan      the unit and multi-rank tests built with ASan+UBSan (tests/sanitizers.sh asan)
#   main      build/ (the release build users get, GPU backend included): every test the asan
#             stage did not run - Python, training, the launcher, docs, GPU (skipped here), and
#             the multi-rank tests that sanitizer builds leave out. A multi-rank test is not run
#             again here: the ASan build runs the same code with the same checks and memory's
#             besides, and UBSan reports the undefined behaviour that could make -O2 and -O3
#             differ. (`meson test -C build` runs them all.)
#   two-host  the multi-rank tests and training across two namespaced hosts (tests/two_hosts.sh)
#   fuzz      the wire codec under libFuzzer (tests/fuzz.sh, ~70 s)
#   tsan      the threaded tests under TSan (tests/sanitizers.sh tsan)
# Usage: scripts/test.sh            (CI runs exactly this, through .ci/run)
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }
passed=0 failed=0 skipped=0

# Adds a stage's closing line ("N passed, N failed[, N skipped]", the last line of $2) to the
# totals; a stage that exited non-zero ($3) without counting a failure, or printed no such line,
# counts one.
count_stage() {
    local name=$1 log=$2 status=$3 p f s
    read -r p f s < <(tail -n 1 "$log" |
        sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed\(, \([0-9]*\) skipped\)\{0,1\}$/\1 \2 \4/p')
    if [ -z "${p:-}" ]; then
        echo "$name stage: no 'N passed, N failed' line (exit status $status)"
        p=0 f=1 s=0
    elif [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1  # it failed without saying which test
    fi
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + ${s:-0}))
}

# asan: its meson log says which tests it ran (a stale one must not: removed first)
rm -f build-asan/meson-logs/testlog.json
tests/sanitizers.sh asan | tee build/asan-stage.log
count_stage asan build/asan-stage.log "${PIPESTATUS[0]}"

# main: one test at a time (2 cores, and np = 4 already oversubscribes them); suite
# 'sanitizer' holds smaller variants that only tests/sanitizers.sh runs, in its own builds
mapfile -t tests < <(python3 - build build-asan/meson-logs/testlog.json <<'PY'
import json, os, subprocess, sys
listed = subprocess.run(["meson", "test", "-C", sys.argv[1], "--list", "--no-rebuild",
                         "--no-suite", "sanitizer"], stdout=subprocess.PIPE, text=True,
                        check=True).stdout.splitlines()
ran = set()
if os.path.exists(sys.argv[2]):
    ran = {json.loads(line)["name"] for line in open(sys.argv[2])}
for name in listed:  # "project:suite+suite / test name"
    if " / " in name and name not in ran:
        project = name.split(":", 1)[0]
        print(project + ":" + name.split(" / ", 1)[1])
PY
)
echo "main: ${#tests[@]} tests (the rest ran in the asan stage)"
if [ "${#tests[@]}" -eq 0 ]; then  # no names would run every test, 'sanitizer' ones too
    echo "main: meson listed no tests"; status=1; : >build/meson-logs/testlog.json
else
    meson test -C build --num-processes 1 --print-errorlogs "${tests[@]}"
    status=$?
fi
# Count from meson's machine-readable log so the closing line is exact.
# A test may skip only by saying why (exit 77): the GPU tests on a machine without a GPU.
python3 - build/meson-logs/testlog.json >build/main-stage.log <<'PY'
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
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
PY
count_stage main build/main-stage.log "$status"

# two-host: needs root (namespaces), else it says why and counts as skipped, never as passed
tests/two_hosts.sh build | tee build/two-hosts-stage.log
count_stage two-host build/two-hosts-stage.log "${PIPESTATUS[0]}"

tests/fuzz.sh build | tee build/fuzz-stage.log
count_stage fuzz build/fuzz-stage.log "${PIPESTATUS[0]}"

tests/sanitizers.sh tsan | tee build/tsan-stage.log
count_stage tsan build/tsan-stage.log "${PIPESTATUS[0]}"

echo "test suite took $(( $(date +%s) - start )) s"
echo "$passed passed, $failed failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped")"
[ "$failed" -eq 0 ]
