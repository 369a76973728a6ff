#!/usr/bin/env bash
# test_ab_overlay.sh - tests/gpu/ab_overlay.sh and ab_on_device.sh's argument checks, here (a
# GPU session has minutes: the A/B call must not fail on its overlays). In a throwaway clone of
# this repository: a branch that changes one file and adds another gives an overlay of exactly
# those two files with the branch's contents; a branch that does not contain HEAD, one that
# deletes a file and one equal to HEAD are refused; ab_on_device.sh refuses a missing overlay
# before it touches anything.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null) || {
    echo "SKIP: not in a git checkout (ab_overlay.sh works on branches)"
    exit 77
}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

git clone -q "$repo" "$t/clone" || fail "cannot clone $repo"
cd "$t/clone" || exit 1
# the scripts as they are in this working tree (they may not be committed yet)
cp "$here/ab_overlay.sh" "$here/ab_on_device.sh" tests/gpu/
g() { git -c user.name=t -c user.email=t@t "$@"; }
g add tests/gpu/ab_overlay.sh tests/gpu/ab_on_device.sh &&
    g commit -qm "scripts under test" --allow-empty

g checkout -q -b exp/one
echo "/* changed */" >>libhvdc/src/runtime/background.c
echo "new" >added.txt
g add added.txt && g commit -qam "exp"
g checkout -q -
tests/gpu/ab_overlay.sh exp/one >"$t/out.txt" 2>&1 || { cat "$t/out.txt"; fail "exp/one refused"; }
files=$(cd ab/exp-one && find . -type f | sort | tr '\n' ' ')
[ "$files" = "./added.txt ./libhvdc/src/runtime/background.c " ] || fail "overlay holds: $files"
branch_file=$(git show exp/one:libhvdc/src/runtime/background.c)
[ "$(cat ab/exp-one/libhvdc/src/runtime/background.c)" = "$branch_file" ] ||
    fail "the overlay's background.c is not the branch's"

# HEAD moves on: the branch no longer contains it
echo "# moved" >>README.md && g commit -qam "main moves"
tests/gpu/ab_overlay.sh exp/one >"$t/out.txt" 2>&1 && fail "a branch without HEAD was taken"
grep -q "does not contain HEAD" "$t/out.txt" || fail "unclear refusal: $(cat "$t/out.txt")"

g checkout -q -b exp/gone && g rm -q README.md && g commit -qam "gone"
g checkout -q -
tests/gpu/ab_overlay.sh exp/gone >"$t/out.txt" 2>&1 && fail "a deleting branch was taken"
grep -q "deletes README.md" "$t/out.txt" || fail "unclear refusal: $(cat "$t/out.txt")"

g branch -q exp/same
tests/gpu/ab_overlay.sh exp/same >"$t/out.txt" 2>&1 && fail "a branch equal to HEAD was taken"
grep -q "does not differ" "$t/out.txt" || fail "unclear refusal: $(cat "$t/out.txt")"

tests/gpu/ab_on_device.sh "$t/ab-out" ab/nothing-here >"$t/out.txt" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "no overlay directory ab/nothing-here" "$t/out.txt"; then
    fail "ab_on_device.sh did not refuse a missing overlay (exit $rc): $(cat "$t/out.txt")"
fi
[ ! -e "$t/ab-out" ] || fail "ab_on_device.sh wrote output before checking its overlays"
echo "PASS"
