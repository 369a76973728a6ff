#!/usr/bin/env bash
# fuzz.sh - fuzzes the negotiation message codec (libhvdc/src/negotiation/wire.c) with libFuzzer.
# Builds tests/fuzz/fuzz_wire.c with clang -fsanitize=fuzzer,address,undefined (wire.c compiled
# in directly), then
#   fuzz-wire-replay  runs it once on every seed (tests/fuzz/corpus/) and every past crash
#                     (tests/fuzz/regressions/): all must pass;
#   fuzz-wire         fuzzes for FUZZ_SECONDS (default 60) from the seeds: any crash, leak,
#                     broken round trip or sanitizer report fails.
# A crash leaves its input in BUILD_ROOT/fuzz/artifacts/; the message says how to make it a
# regression test. Prints PASS/FAIL per stage and ends with "N passed, N failed".
# Usage: tests/fuzz.sh BUILD_ROOT      e.g. tests/fuzz.sh build   (FUZZ_SECONDS=600 for longer)
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: tests/fuzz.sh BUILD_ROOT"; echo "0 passed, 1 failed"; exit 2; }
out="$1/fuzz"
seconds="${FUZZ_SECONDS:-60}"
passed=0 failed=0
verdict() { # name status
    if [ "$2" -eq 0 ]; then echo "PASS $1"; passed=$((passed + 1));
    else echo "FAIL $1"; failed=$((failed + 1)); fi
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

# clang 14 from Debian, and its runtime (libFuzzer, ASan, UBSan) in libclang-rt-14-dev.
if ! scripts/ensure_packages.sh clang libclang-rt-14-dev; then
    verdict fuzz-wire-build 1
    finish
fi
mkdir -p "$out/artifacts" "$out/corpus"
flags=(-g -O1 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -Ilibhvdc/include -Ilibhvdc/src)
if ! clang "${flags[@]}" tests/fuzz/fuzz_wire.c libhvdc/src/negotiation/wire.c libhvdc/src/base/bytes.c -o "$out/fuzz_wire"; then
    verdict fuzz-wire-build 1
    finish
fi

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"

# Every seed and every past crash, once each (libFuzzer runs the files given and exits).
inputs=(tests/fuzz/corpus/* tests/fuzz/regressions/*)
files=()
for f in "${inputs[@]}"; do [ -f "$f" ] && files+=("$f"); done
"$out/fuzz_wire" -runs=1 "${files[@]}" >"$out/replay.log" 2>&1
status=$?
[ $status -eq 0 ] || tail -n 40 "$out/replay.log"
echo "fuzz-wire-replay: ${#files[@]} inputs (log: $out/replay.log)"
verdict fuzz-wire-replay $status

# Fuzz. New inputs go to $out/corpus (kept between runs on one machine), never into the repo.
# -rss_limit_mb/-malloc_limit_mb: the decoder caps allocations by the message length, so an
# input that asks for more than this is itself a finding.
"$out/fuzz_wire" -max_total_time="$seconds" -timeout=10 -max_len=4096 \
    -rss_limit_mb=1024 -malloc_limit_mb=256 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/" "$out/corpus" tests/fuzz/corpus >"$out/fuzz.log" 2>&1
status=$?
grep -E '^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$out/fuzz.log"
if [ $status -ne 0 ]; then
    tail -n 60 "$out/fuzz.log"
    for a in "$out"/artifacts/*; do
        [ -f "$a" ] || continue
        echo "fuzz-wire: crashing input $a; keep it as a regression test with"
        echo "    cp $a tests/fuzz/regressions/\$(date +%Y%m%d)-WHAT.bin && git add tests/fuzz/regressions"
    done
fi
echo "fuzz-wire: ${seconds} s (log: $out/fuzz.log)"
verdict fuzz-wire $status
finish
