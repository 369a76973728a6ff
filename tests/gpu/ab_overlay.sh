#!/usr/bin/env bash
# ab_overlay.sh - makes the overlay directory tests/gpu/ab_on_device.sh wants from a git branch,
# here, before the device call (the GPU machine gets a copy of the working tree, not its git
# history): ab/<NAME>/ gets the branch's version of every file that differs between HEAD and
# it (NAME: the branch's name, '/' made '-'). The branch must contain HEAD (rebased onto it).
# A file the branch deletes cannot be overlaid and is refused. ab/ is ignored by git
# (.gitignore), so the overlay travels as a carried path:
#   tests/gpu/ab_overlay.sh spin-device
#   run(command='tests/gpu/ab_on_device.sh $OUT ab/spin-device', carry=['.gpu-bundle', 'ab'],
#       timeout_s=330)
# Usage: tests/gpu/ab_overlay.sh BRANCH...
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: ab_overlay.sh BRANCH..." >&2; exit 2; }
for branch in "$@"; do
    git merge-base --is-ancestor HEAD "$branch" || {
        echo "ab_overlay: $branch does not contain HEAD: rebase it onto HEAD first (its files" \
             "would undo what HEAD changed since)" >&2
        exit 1
    }
    name=${branch//\//-}
    dir=ab/$name
    rm -rf "$dir"
    mkdir -p "$dir"
    changed=0
    while IFS=$'\t' read -r status path; do
        if [ "$status" = D ]; then
            echo "ab_overlay: $branch deletes $path, which an overlay cannot express" >&2
            exit 1
        fi
        mkdir -p "$dir/$(dirname "$path")"
        git show "$branch:$path" >"$dir/$path"
        changed=$((changed + 1))
    done < <(git diff --no-renames --name-status HEAD "$branch")
    [ $changed -gt 0 ] || { echo "ab_overlay: $branch does not differ from HEAD" >&2; exit 1; }
    echo "$dir: $changed file(s) from $branch"
done
