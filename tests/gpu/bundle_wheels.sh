#!/usr/bin/env bash
# bundle_wheels.sh - cuda_root.sh finds NCCL and cuDNN where the Python wheels put them: a fake
# site-packages with nvidia/nccl and nvidia/cudnn laid out as the wheels do (versioned
# libraries only), and a fake toolkit; the gathered folder must have the headers, the
# libraries and the unversioned links meson needs. No GPU, no network.
# Usage: bundle_wheels.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/cuda/include" "$t/cuda/lib64" "$t/site/nvidia/nccl/include" "$t/site/nvidia/nccl/lib" \
         "$t/site/nvidia/cudnn/include" "$t/site/nvidia/cudnn/lib"
touch "$t/cuda/include/cuda_runtime_api.h" "$t/cuda/lib64/libcudart.so.13" \
      "$t/site/nvidia/nccl/include/nccl.h" "$t/site/nvidia/nccl/lib/libnccl.so.2" \
      "$t/site/nvidia/cudnn/include/cudnn.h" "$t/site/nvidia/cudnn/include/cudnn_version.h" \
      "$t/site/nvidia/cudnn/lib/libcudnn.so.9" "$t/site/nvidia/cudnn/lib/libcudnn_ops.so.9"
# NCCL 2.28 keeps device headers in include/nccl_device/; PyTorch ships a C++ nccl.h that must
# not be taken (it was, on the H100: meson could not read NCCL_MAJOR)
mkdir -p "$t/site/nvidia/nccl/include/nccl_device" "$t/site/torch/include/torch/csrc/cuda"
touch "$t/site/nvidia/nccl/include/nccl_device/core.h"
echo "decoy" >"$t/site/torch/include/torch/csrc/cuda/nccl.h"
root=$(CUDA_HOME=$t/cuda HVDC_WHEEL_DIRS=$t/site "$here/cuda_root.sh" "$t/root") ||
    { echo "FAIL: cuda_root.sh failed"; exit 1; }
fail=0
for f in include/cuda_runtime_api.h include/nccl.h include/cudnn.h include/cudnn_version.h \
         lib64/libcudart.so.13 lib64/libnccl.so.2 lib64/libnccl.so lib64/libcudnn.so.9 \
         lib64/libcudnn.so lib64/libcudnn_ops.so.9; do
    [ -e "$root/$f" ] || { echo "FAIL: $f missing in the gathered folder"; fail=1; }
done
[ -e "$root/include/nccl_device/core.h" ] || { echo "FAIL: include/nccl_device/ not linked"; fail=1; }
[ "$(readlink "$root/include/nccl.h")" = "$t/site/nvidia/nccl/include/nccl.h" ] ||
    { echo "FAIL: include/nccl.h -> $(readlink "$root/include/nccl.h") (not the wheel's)"; fail=1; }
[ "$(readlink "$root/lib64/libnccl.so")" = libnccl.so.2 ] || { echo "FAIL: libnccl.so -> $(readlink "$root/lib64/libnccl.so")"; fail=1; }
# without the wheels it says what is missing
rm -rf "$t/root2"
if msg=$(CUDA_HOME=$t/cuda HVDC_WHEEL_DIRS=$t/nowhere "$here/cuda_root.sh" "$t/root2" 2>&1); then
    echo "FAIL: succeeded without NCCL and cuDNN"; fail=1
else
    echo "$msg" | grep -q "not found: NCCL cuDNN" || { echo "FAIL: unclear message: $msg"; fail=1; }
fi
[ $fail -eq 0 ] && echo "PASS: wheel layout gathered into $root" && exit 0
exit 1
