# steps.sh - the step runner of tests/gpu/on_device.sh (sourced): each step a command with its
# own log, bounded in time, within a budget for the whole run, then a summary and one archive.
# A device call brings back a few files only, and a call that runs past its limit brings back
# what is already written: so no step starts after the budget, none runs past it, and the two
# files are written last, however the steps go.
#   steps_begin OUT_DIR LOG_DIR [ALWAYS...]   logs go to LOG_DIR (emptied); the steps named
#                                             ALWAYS run whatever HVDC_STEPS says
#   step NAME COMMAND...                      runs COMMAND (or a shell function) with its output
#                                             in LOG_DIR/NAME.log; returns its status, 1 when
#                                             skipped for time, 0 when not selected
#   steps_end                                 OUT_DIR/summary.log (a line per step, then "N passed,
#                                             N failed, N skipped") and OUT_DIR/on_device_logs.tgz
#                                             (LOG_DIR); returns 1 if a step failed or was skipped
# Settings: HVDC_DEVICE_BUDGET (seconds from steps_begin, default 420), HVDC_STEP_TIMEOUT (one
# step's limit, default 300), HVDC_STEPS (a regex: only the steps it matches, and ALWAYS).

steps_begin() {
    steps_out=$1 logs=$2
    shift 2
    steps_always=" $* "
    mkdir -p "$steps_out"
    steps_out=$(cd "$steps_out" && pwd)
    rm -rf "$logs"
    mkdir -p "$logs"
    steps_began=$(date +%s)
    steps_budget=${HVDC_DEVICE_BUDGET:-420}
    passed=0 failed=0 skipped=0 steps_summary=""
}

steps_record() { # steps_record NAME LINE
    echo "$2" | tee -a "$logs/$1.log"
    steps_summary+="$2"$'\n'
}

step() {
    local name=$1 start rc left limit
    shift
    if [ -n "${HVDC_STEPS:-}" ] && [[ $steps_always != *" $name "* ]] && ! [[ $name =~ $HVDC_STEPS ]]; then
        return 0
    fi
    start=$(date +%s)
    left=$((steps_budget - (start - steps_began)))
    if [ $left -lt 10 ]; then
        steps_record "$name" "$name: skipped, past the budget of $steps_budget s (HVDC_DEVICE_BUDGET)"
        skipped=$((skipped + 1))
        return 1
    fi
    echo "== $name: $*" | tee "$logs/$name.log"
    if declare -F "$1" >/dev/null; then # a shell function runs as it is: keep them short
        "$@" >>"$logs/$name.log" 2>&1
    else
        limit=${HVDC_STEP_TIMEOUT:-300}
        [ $left -lt "$limit" ] && limit=$left
        timeout -k 5 "$limit" "$@" >>"$logs/$name.log" 2>&1
    fi
    rc=$?
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        steps_record "$name" "$name: ok in $(($(date +%s) - start)) s"
    else
        failed=$((failed + 1))
        steps_record "$name" "$name: FAILED (exit $rc$([ $rc -eq 124 ] && echo ", out of time")) in $(($(date +%s) - start)) s"
    fi
    return $rc
}

steps_end() {
    echo
    printf '%s%s\n' "$steps_summary" "$passed passed, $failed failed, $skipped skipped" |
        tee "$logs/summary.log"
    cp "$logs/summary.log" "$steps_out/summary.log"
    tar czf "$steps_out/on_device_logs.tgz" -C "$(dirname "$logs")" "$(basename "$logs")"
    [ $failed -eq 0 ] && [ $skipped -eq 0 ]
}
