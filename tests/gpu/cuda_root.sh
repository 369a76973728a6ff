#!/usr/bin/env bash
# cuda_root.sh - gathers CUDA, NCCL and cuDNN into one folder for meson's -Dcuda-root, as the
# GPU machine needs (issue 17): there NCCL and cuDNN are Python wheels (nvidia-nccl-cu13,
# nvidia-cudnn-cu13: site-packages/nvidia/<pkg>/{include,lib}/, versioned libraries only).
# OUT/include and OUT/lib64 get symbolic links to CUDA's (nvcc's ../include, ../lib64) and to
# every nccl*.h/cudnn*.h and libnccl*/libcudnn* found, plus the unversioned libnccl.so and
# libcudnn.so links the wheels lack. Searched: $CUDA_HOME (else nvcc's parent, else
# /usr/local/cuda), then HVDC_WHEEL_DIRS (':'-separated) or every python3 site-packages.
# Prints OUT's path; fails naming what it could not find. tests/gpu/bundle_wheels.sh tests it.
# Usage: cuda_root.sh OUT
set -euo pipefail
out=$1
cuda=${CUDA_HOME:-}
if [ -z "$cuda" ] && command -v nvcc >/dev/null; then cuda=$(dirname "$(dirname "$(command -v nvcc)")"); fi
cuda=${cuda:-/usr/local/cuda}
[ -r "$cuda/include/cuda_runtime_api.h" ] || { echo "cuda_root: no CUDA toolkit in $cuda (set CUDA_HOME)" >&2; exit 1; }
dirs=${HVDC_WHEEL_DIRS:-$(python3 -c 'import site, sys; print(":".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null || true)}
mkdir -p "$out/include" "$out/lib64"
out=$(cd "$out" && pwd)
for f in "$cuda"/include/*; do ln -sfn "$f" "$out/include/"; done
for f in "$cuda"/lib64/* "$cuda"/targets/*/lib/*; do [ -e "$f" ] && ln -sfn "$f" "$out/lib64/"; done
# the wheels' headers and libraries (they win over a toolkit's copies). Only an include/ folder
# that directly holds nccl.h or cudnn.h counts, and all of it is linked (NCCL 2.28's nccl.h
# needs its nccl_device/ beside it); its libraries are in ../lib. A flat search for nccl*.h
# would also find PyTorch's C++ torch/csrc/cuda/nccl.h, which C cannot preprocess.
IFS=: read -r -a roots <<<"$dirs"
for root in "$cuda" "${roots[@]}"; do
    [ -d "$root" ] || continue
    while IFS= read -r -d '' h; do
        inc=$(dirname "$h")
        for f in "$inc"/*; do
            case $(basename "$f") in nccl*|cudnn*) ln -sfn "$f" "$out/include/" ;; esac
        done
        for f in "$inc"/../lib/lib*.so* "$inc"/../lib64/lib*.so*; do
            case $(basename "$f") in libnccl*|libcudnn*) [ -e "$f" ] && ln -sfn "$f" "$out/lib64/" ;; esac
        done
    done < <(find -L "$root" \( -path '*/include/nccl.h' -o -path '*/include/cudnn.h' \) -print0 2>/dev/null)
done
for lib in nccl cudnn; do # unversioned links: libnccl.so -> libnccl.so.2
    [ -e "$out/lib64/lib$lib.so" ] && continue
    v=$(cd "$out/lib64" && ls "lib$lib.so."* 2>/dev/null | sort -V | head -n 1 || true)
    [ -n "$v" ] && ln -sfn "$v" "$out/lib64/lib$lib.so"
done
missing=""
[ -e "$out/include/nccl.h" ] && [ -e "$out/lib64/libnccl.so" ] || missing="$missing NCCL"
[ -e "$out/include/cudnn.h" ] && [ -e "$out/lib64/libcudnn.so" ] || missing="$missing cuDNN"
if [ -n "$missing" ]; then
    echo "cuda_root: not found:$missing (searched $cuda and ${dirs:-no site-packages}; pip install nvidia-nccl-cu13 nvidia-cudnn-cu13, or set HVDC_WHEEL_DIRS)" >&2
    exit 1
fi
echo "$out"
