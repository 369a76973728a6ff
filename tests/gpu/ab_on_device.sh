#!/usr/bin/env bash
# ab_on_device.sh - what a change does to issue 34's GPU figures, measured in one device call:
# this tree ("base") and one or more variants (this tree with an overlay directory's files laid
# over it, each path as in the tree) are built side by side, then each benchmark runs on base
# and every variant in turn, ROUNDS times, so the machine's drift falls on all of them alike
# (benchmarks/README.md: ratios in the same run, never against an older one). A session's
# device time is short: this takes about a third of what on_device.sh takes.
#   per round and build: latency_bench --device gpu (the lone op and its phases, 100 async),
#   fusion_bench --device gpu at the default threshold (ResNet-50 set and tiny, with the
#   submit/first-back split), allreduce_bench --device gpu from 4 MiB (busbw against NCCL)
# Carry .gpu-bundle, as for on_device.sh, and ab/, where tests/gpu/ab_overlay.sh BRANCH puts a
# branch's changed files (ab/ is ignored by git, so it travels only when carried).
# OUT_DIR gets summary.log and on_device_logs.tgz (steps.sh), the latter with ab.txt: every
# build's key rows, round by round, for a side-by-side reading.
#   HVDC_AB_ROUNDS (default 3); HVDC_DEVICE_BUDGET (default 300 here: call with timeout_s 330)
# Usage: tests/gpu/ab_on_device.sh OUT_DIR OVERLAY_DIR...
#        (tests/gpu/ab_overlay.sh spin-device here, then run(command='tests/gpu/ab_on_device.sh
#         $OUT ab/spin-device', carry=['.gpu-bundle', 'ab'], timeout_s=330))
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${1:?usage: ab_on_device.sh OUT_DIR OVERLAY_DIR...}
shift
[ $# -ge 1 ] || { echo "ab_on_device: name at least one overlay directory" >&2; exit 2; }
overlays=("$@")
for overlay in "${overlays[@]}"; do
    [ -d "$overlay" ] || { echo "ab_on_device: no overlay directory $overlay" >&2; exit 2; }
done
bundle=${HVDC_GPU_BUNDLE:-$PWD/.gpu-bundle}
work=${HVDC_GPU_WORK:-/tmp/hvdc-gpu-ab}
rounds=${HVDC_AB_ROUNDS:-3}
export HVDC_DEVICE_BUDGET=${HVDC_DEVICE_BUDGET:-300}
# shellcheck source=steps.sh
source tests/gpu/steps.sh
builds=(base)
for overlay in "${overlays[@]}"; do builds+=("$(basename "$overlay")"); done
always="mpi_prefix cuda_root"
for b in "${builds[@]}"; do always+=" setup_$b build_$b"; done
# shellcheck disable=SC2086
steps_begin "$out" "$work/logs" $always

if step mpi_prefix tests/gpu/mpi_prefix.sh "$bundle/debs" "$work/prefix"; then
    # shellcheck disable=SC1091
    source "$work/prefix/env.sh"
fi
step cuda_root tests/gpu/cuda_root.sh "$work/cuda-root"
export LD_LIBRARY_PATH=$work/cuda-root/lib64:${LD_LIBRARY_PATH:-}
meson=(meson); command -v meson >/dev/null || meson=(python3 -m mesonbuild.mesonmain)
command -v ninja >/dev/null || export PATH=$PATH:$(python3 -c 'import ninja, os; print(ninja.BIN_DIR)' 2>/dev/null)

# each build's source: this tree, or a copy of it (without bundle and overlays) under the overlay
rm -rf "$work/src" "$work/build"
for i in "${!builds[@]}"; do
    b=${builds[$i]} src=$PWD
    if [ "$i" -gt 0 ]; then
        src=$work/src/$b
        mkdir -p "$src"
        tar cf - --exclude=./.gpu-bundle --exclude=./ab --exclude=./.git --exclude='./build*' . |
            tar xf - -C "$src"
        cp -r "${overlays[$((i - 1))]}"/. "$src"/
    fi
    step "setup_$b" "${meson[@]}" setup "$work/build/$b" "$src" -Dcuda=enabled \
        -Dcuda-root="$work/cuda-root"
    step "build_$b" ninja -C "$work/build/$b"
done

for r in $(seq 1 "$rounds"); do
    for b in "${builds[@]}"; do
        bin=$work/build/$b/benchmarks
        step "latency_${b}_$r" "$bin/latency_bench" --device gpu -n 2000 --batch 100
        step "fusion_${b}_$r" "$bin/fusion_bench" --device gpu --model resnet50,tiny --steps 20 \
            --thresholds default
        step "allreduce_${b}_$r" "$bin/allreduce_bench" --device gpu -b 4M -e 64M -f 4
    done
done

# the rows to compare, build by build within each round
for r in $(seq 1 "$rounds"); do
    for b in "${builds[@]}"; do
        echo "== round $r: $b"
        grep -hE '^ +(single|batch) |^# (single|.batch) +queued' "$logs/latency_${b}_$r.log"
        grep -hE '^ +(resnet50|tiny) +(def|nccl)|threshold default' "$logs/fusion_${b}_$r.log"
        grep -hE 'hvd-gpu|nccl' "$logs/allreduce_${b}_$r.log" | grep -v '^#'
        grep -hE '^# +[0-9]+ +hvd-gpu +queued' "$logs/allreduce_${b}_$r.log" # where the time went
    done
done >"$logs/ab.txt" 2>&1
steps_end
