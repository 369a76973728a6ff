#!/usr/bin/env bash
# sanitizers.sh - the test suite again, built with sanitizers; any report fails its test.
#   asan: build-asan (gcc, -fsanitize=address,undefined): the unit tests and every multi-rank
#         test (meson --suite unit --suite mpi, soak included), but those in suite 'not-asan'
#         (the full-size device collectives at np 4: np 1-3 run at full size, np 4 --quick
#         twice). UBSan halts at the first report; LeakSanitizer checks every process at exit,
#         so memory or handles libhvdc leaks fail.
#   tsan: build-tsan (gcc, -fsanitize=thread): the tests whose threads do the most (user threads
#         submitting at once, shutdown with operations in flight, orders, stall, a stop on one
#         rank, join, the SIGUSR1 dump, a shorter soak, device-op completion on a fake device,
#         the GPU backend on the simulated device, all-reduces run on their caller's thread);
#         see TSAN_TESTS.
# Suppressed: only what lies inside Open MPI and the libraries it brings, listed with reasons in
# tests/sanitizers/lsan.supp, tsan.supp (and tsan_process_sets.supp, tsan_comm_create.supp for the tests named below alone).
# Ranks get tests/sanitizers/nodlclose.c preloaded so Open MPI's plugins stay mapped until the
# leak report can name their frames.
# Prints PASS/FAIL per test and ends with "N passed, N failed".
# Usage: tests/sanitizers.sh [asan|tsan]...     (default: both; about 10 min on 2 cores)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(asan tsan)
passed=0 failed=0
# The TSan subset (meson test names): every test that starts several user threads, stops with
# work in flight, or runs the library's helper threads (timeline, SIGUSR1 watcher), mostly at
# np <= 3; plus a 4 000-operation soak at np = 4 (the full one takes ~130 s under TSan). The
# rest of the suite repeats the same threading with more data, which only makes TSan slower.
# The GPU backend on the simulated device (tests/gpu/sim): its collectives at np 1-4 (the
# --quick variants), rank logic, the optimizer's device path, a refusal, a dead rank and an
# asynchronous NCCL error. Their stream threads call MPI beside the background thread, but out
# of TSan's sight (tests/gpu/sim/sim_unseen.c says why), so they need no Open MPI race
# suppressed.
TSAN_TESTS=('threads np=2' 'threads np=4' 'shutdown inflight np=2' 'shutdown early np=2'
            'shutdown early np=3' 'order np=2' 'order np=3' 'order np=3 app-initialized MPI'
            'collectives np=2' 'mismatch np=2' 'stall np=3 idle withholder'
            'stall np=3 busy withholder' 'stop on one rank np=3 encode_requests on rank 2'
            'join np=2' 'join np=3' 'sigusr1 state dump np=2' 'report np=3 names slow rank 0'
            'caller path numerics np=3' 'caller path mixed np=3' 'caller path join np=3'
            'caller path rank killed np=3 mpirun recovery'
            'timeline complete' 'timeline startstop' 'test_complete'
            'gpu sim collectives np=1 --quick' 'gpu sim collectives np=2 --quick'
            'gpu sim collectives np=3 --quick' 'gpu sim collectives np=4 --quick'
            'gpu sim collectives np=4 --quick HVDC_TEST_NODE_SIZE=2'
            'gpu sim collectives np=3 --quick HVDC_SIM_POOLS=0'
            'gpu sim ranks np=3' 'gpu sim optimizer np=3' 'gpu sim refused np=2'
            'gpu sim rank killed np=3 mpirun recovery'
            'gpu sim rank killed np=4 nodes of 2 NCCL sees it first'
            'gpu sim rank killed while growing np=3 mpirun recovery'
            'gpu sim rank killed while growing Adasum staging np=4 nodes of 2'
            'gpu sim rank killed in MPI_Allreduce np=3 mpirun recovery'
            'gpu sim rank killed during hvd_shutdown np=3 mpirun recovery'
            'gpu sim rank killed during a checkpoint np=3 mpirun recovery'
            'gpu sim rank killed during an elastic commit np=3 mpirun recovery'
            'gpu sim asynchronous NCCL error np=3 hvd_wait'
            'gpu sim asynchronous NCCL error np=3 hvd_poll'
            'gpu sim asynchronous NCCL error np=3 hvd_wait_on_stream'
            'gpu sim asynchronous NCCL error np=3 hvd_shutdown'
            'gpu sim asynchronous NCCL error np=3 in a round'
            'gpu sim asynchronous NCCL error np=3 in a round on rank 0')
# TSAN_TESTS run with the host watch off (HVD_HOST_TIMEOUT=0): its thread calls MPI beside the
# background thread in every process, which takes tsan_process_sets.supp (Open MPI's own
# lock-free hand-offs) and that would hide a race on a buffer libhvdc hands to MPI in every test.
# The watch is tested here, with that file: its thread, its verdicts, the report and the dump.
TSAN_WATCH_TESTS=('threads np=4' 'stall np=3 idle withholder' 'stall np=3 busy withholder'
                  'sigusr1 state dump np=2' 'report np=3 names slow rank 2')
# several threads inside MPI at once (the background thread in MPI_Allreduce and the watchdog
# probing beside it; the runtimes of process sets, below): with tsan_process_sets.supp as well
# (its header says why)
TSAN_SETS_TESTS=('collectives np=3 HVD_CPU_ALLREDUCE=mpi')
# process sets also create communicators while other runtimes' threads probe: with
# tsan_comm_create.supp on top (its header says why)
TSAN_COMM_CREATE_TESTS=('process sets np=4')
TSAN_SOAK_OPS=4000

# gcc's sanitizer runtimes (libasan8, libubsan1, libtsan2) come with gcc.
scripts/ensure_packages.sh openmpi-bin libopenmpi-dev meson ninja-build pkg-config gcc libc6-dev \
    libopenblas-dev zlib1g-dev python3 || { echo "0 passed, 1 failed"; exit 1; }

# Configures (once) and builds one sanitizer build; the GPU backend is left out (nvcc and the
# CUDA runtime are not instrumented). $1 = dir, $2 = -Db_sanitize value.
build() {
    if [ ! -f "$1/build.ninja" ]; then
        meson setup "$1" -Dbuildtype=debugoptimized -Db_sanitize="$2" -Db_lundef=false \
            -Dcuda=disabled -Dc_args=-fno-omit-frame-pointer >"$1.setup.log" 2>&1 ||
            { cat "$1.setup.log"; return 1; }
    fi
    ninja -C "$1" >"$1.ninja.log" 2>&1 || { tail -n 40 "$1.ninja.log"; return 1; }
    cc -shared -fPIC -O2 tests/sanitizers/nodlclose.c -o "$1/libnodlclose.so"
}

# Runs meson tests in $1 (further args: meson test selectors) and prints one PASS/FAIL line per
# test from meson's JSON log, prefixed with the stage name $2; adds to passed/failed.
run() {
    local dir=$1 stage=$2 status report p f
    shift 2
    meson test -C "$dir" --no-rebuild --num-processes 1 --print-errorlogs "$@" \
        >"$dir/sanitizer-tests.log" 2>&1
    status=$?
    report=$(python3 - "$dir/meson-logs/testlog.json" "$stage" <<'PY'
import json, sys
passed = failed = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    ok = t.get("result") in ("OK", "EXPECTEDFAIL")
    print("%s %s: %s (%.1f s)" % ("PASS" if ok else "FAIL", sys.argv[2], t["name"], t["duration"]))
    passed += ok
    failed += not ok
print(passed, failed)
PY
    ) || report="0 1"
    [ "$(echo "$report" | wc -l)" -gt 1 ] && echo "$report" | sed '$d'
    read -r p f <<<"$(echo "$report" | tail -n 1)"
    if [ "$status" -ne 0 ]; then
        grep -E 'ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:|SUMMARY:' \
            "$dir/sanitizer-tests.log" | sed 's/^==[0-9]*==//' | sort | uniq -c | sort -rn | head -n 20
        echo "$stage: full reports in $dir/sanitizer-tests.log"
        [ "${f:-0}" -eq 0 ] && f=1  # meson failed without a failed test: count it
    fi
    passed=$((passed + ${p:-0})) failed=$((failed + ${f:-1}))
}

common_env() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
}

for stage in "${stages[@]}"; do
    start=$(date +%s)
    case $stage in
    asan)
        if ! build build-asan address,undefined; then
            echo "FAIL asan: build"; failed=$((failed + 1)); continue
        fi
        (
            common_env
            # fast_unwind_on_malloc=0: Open MPI has no frame pointers; without it the stacks of
            # its allocations stop short of the frames lsan.supp names.
            # verify_asan_link_order=0: libnodlclose.so is preloaded ahead of libasan.
            # allocator_may_return_null=1: tests/mpi/test_requests.c asks for more memory than
            # exists on purpose; libhvdc must get NULL and fail that request cleanly, as malloc
            # does without ASan, instead of ASan aborting the process.
            export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:verify_asan_link_order=0:detect_stack_use_after_return=0:allocator_may_return_null=1"
            export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
            export LD_PRELOAD="$root/build-asan/libnodlclose.so"
            run build-asan asan --suite unit --suite mpi --no-suite not-asan
            echo "$passed $failed" >build-asan/sanitizer-counts
        )
        read -r passed failed <build-asan/sanitizer-counts
        ;;
    tsan)
        if ! build build-tsan thread; then
            echo "FAIL tsan: build"; failed=$((failed + 1)); continue
        fi
        (
            common_env
            export TSAN_OPTIONS="suppressions=$root/tests/sanitizers/tsan.supp:halt_on_error=0:exitcode=66:second_deadlock_stack=1:history_size=4"
            export LD_PRELOAD="$root/build-tsan/libnodlclose.so"
            HVD_HOST_TIMEOUT=0 run build-tsan tsan "${TSAN_TESTS[@]}"
            cat tests/sanitizers/tsan.supp tests/sanitizers/tsan_process_sets.supp >build-tsan/tsan_sets.supp
            TSAN_OPTIONS=${TSAN_OPTIONS/tests\/sanitizers\/tsan.supp/build-tsan\/tsan_sets.supp} \
                run build-tsan tsan "${TSAN_WATCH_TESTS[@]}"
            TSAN_OPTIONS=${TSAN_OPTIONS/tests\/sanitizers\/tsan.supp/build-tsan\/tsan_sets.supp} \
                HVD_HOST_TIMEOUT=0 run build-tsan tsan "${TSAN_SETS_TESTS[@]}"
            cat build-tsan/tsan_sets.supp tests/sanitizers/tsan_comm_create.supp >build-tsan/tsan_comm_create.supp
            TSAN_OPTIONS=${TSAN_OPTIONS/tests\/sanitizers\/tsan.supp/build-tsan\/tsan_comm_create.supp} \
                HVD_HOST_TIMEOUT=0 run build-tsan tsan "${TSAN_COMM_CREATE_TESTS[@]}"
            if HVD_HOST_TIMEOUT=0 timeout 300 mpirun --oversubscribe --bind-to none -np 4 \
                build-tsan/tests/mpi/test_soak --ops "$TSAN_SOAK_OPS" >build-tsan/soak.log 2>&1; then
                echo "PASS tsan: soak np=4 --ops $TSAN_SOAK_OPS"; passed=$((passed + 1))
            else
                grep -E 'WARNING: ThreadSanitizer|SUMMARY|FAIL' build-tsan/soak.log | head -n 20
                echo "FAIL tsan: soak np=4 --ops $TSAN_SOAK_OPS (log: build-tsan/soak.log)"
                failed=$((failed + 1))
            fi
            echo "$passed $failed" >build-tsan/sanitizer-counts
        )
        read -r passed failed <build-tsan/sanitizer-counts
        ;;
    *)
        echo "unknown stage '$stage' (asan, tsan)"; failed=$((failed + 1)); continue ;;
    esac
    echo "$stage stage took $(( $(date +%s) - start )) s"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
