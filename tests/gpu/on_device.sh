#!/usr/bin/env bash
# on_device.sh - the GPU check in one command on a bare CUDA machine (issue 15 item 3): CUDA's
# compiler, Python with meson and ninja, NCCL and cuDNN as wheels, no Open MPI, no pkg-config,
# no network. Run tests/gpu/fetch_bundle.sh here first and carry .gpu-bundle with the tree.
# Steps, most wanted first, as a session's device time may end before the last:
#   1. Open MPI, OpenBLAS, pkg-config from .gpu-bundle/debs into a prefix (mpi_prefix.sh)
#   2. CUDA + NCCL + cuDNN gathered into one -Dcuda-root (cuda_root.sh)
#   3. meson setup -Dcuda=enabled, build
#   4. the gpu suite at np 1 (one GPU: NCCL refuses two ranks on it; np > 1 tests skip)
#   5. latency_bench, fusion_bench and allreduce_bench on device buffers (--device gpu, against
#      raw NCCL), np 1: issue 34's table; gpu_call_bench (what each CUDA call of it costs);
#      pack_bench (the fusion kernel against cudaMemcpyAsync, its results checked)
#   6. PyTorch on the GPU: benchmarks/torch_compare.py --device cuda (plain torch, DDP on NCCL,
#      hvdc; ResNet-50 at batch 64, 224x224), tests/python/test_cuda.py and test_optimizer.py
#      (np 1), examples/pytorch/train_fashion_mnist.py --device cuda --amp, where python3's
#      torch sees the GPU
#   7. examples/train --device gpu, np 1, for the MLP and the CNN, three runs each
#      (Fashion-MNIST from .gpu-bundle/fashion-mnist); the MLP stopped with a checkpoint and
#      resumed must end as one uninterrupted run (tests/train/train_resume.sh)
#   8. compute-sanitizer memcheck on the collectives and the optimizer kernels, if installed
#      (issue 17 item 3: 8 API errors were seen, among them cudaErrorNoKernelImageForDevice
#      from cudaFuncGetAttributes; read memcheck-*.log for whose calls they are)
#   9. issue 13's host figures where every rank has cores to spare (the dev VM has 2 for 2
#      ranks): latency_bench at np 2 and 4 (the lone op and its hand-off floor, mpi-thread) and
#      allreduce_bench at np 2 (hvd-shm and hvd-mpi against MPI, mpi-thread, memcpy)
# The steps run under tests/gpu/steps.sh: a step that fails does not stop the next. OUT_DIR
# gets two files, as the device tool brings back a few only: summary.log (a line per step, then
# "N passed, N failed, N skipped") and on_device_logs.tgz (every step's log, machine.log,
# meson's logs, the benchmarks' outputs). Exit status 1 if a step failed or was skipped.
#   HVDC_DEVICE_BUDGET=S (default 420): no step starts after S seconds, and none runs past them
#     (a step's limit is the smaller of what is left and HVDC_STEP_TIMEOUT, default 300); the
#     steps left are listed as skipped. So both files are written inside a device call of
#     S + 30 seconds, however the steps go.
#   HVDC_STEPS=REGEX: only the steps whose names match (1-3 always run), e.g. a second call
#     for what failed: HVDC_STEPS='^(gpu_suite|train_mlp_gpu_.*)$'
# Usage: tests/gpu/on_device.sh OUT_DIR
#        (e.g. run(command='tests/gpu/on_device.sh $OUT', carry=['.gpu-bundle'], timeout_s=450))
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: on_device.sh OUT_DIR}
bundle=${HVDC_GPU_BUNDLE:-$PWD/.gpu-bundle}
work=${HVDC_GPU_WORK:-/tmp/hvdc-gpu}
build=$work/build
# shellcheck source=steps.sh
source tests/gpu/steps.sh
steps_begin "$out" "$work/logs" mpi_prefix cuda_root setup build

{ nvidia-smi; nvcc --version; python3 -c 'import sys; print(sys.version)'; } >"$logs/machine.log" 2>&1

# 1-2: what the machine lacks
if step mpi_prefix tests/gpu/mpi_prefix.sh "$bundle/debs" "$work/prefix"; then
    # shellcheck disable=SC1091
    source "$work/prefix/env.sh"
fi
step cuda_root tests/gpu/cuda_root.sh "$work/cuda-root"
ls -l "$work/cuda-root/include" "$work/cuda-root/lib64" 2>&1 | grep -E 'nccl|cudnn' >>"$logs/cuda_root.log"
export LD_LIBRARY_PATH=$work/cuda-root/lib64:${LD_LIBRARY_PATH:-}

# 3: build (meson and ninja may be Python modules only)
meson=(meson); command -v meson >/dev/null || meson=(python3 -m mesonbuild.mesonmain)
command -v ninja >/dev/null || export PATH=$PATH:$(python3 -c 'import ninja, os; print(ninja.BIN_DIR)' 2>/dev/null)
wipe=(); [ -d "$build/meson-private" ] && wipe=(--wipe) # --wipe needs an existing build
step setup "${meson[@]}" setup "$build" -Dcuda=enabled -Dcuda-root="$work/cuda-root" "${wipe[@]}"
step build ninja -C "$build"

# 4: the gpu suite, one rank (the np > 1 tests skip with their reason on one GPU)
step gpu_suite "${meson[@]}" test -C "$build" --suite gpu --num-processes 1 --print-errorlogs
cp "$build/meson-logs/testlog.txt" "$logs/gpu_suite.testlog.txt" 2>/dev/null
# a device CUDA cannot use makes every GPU test skip (exit 77), which meson counts as success:
# on a GPU machine the single-process GPU tests must have run
gpu_tests_ran() {
    python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
must = ("gpu collectives singleton", "gpu optimizer kernels", "gpu layers",
        "gpu optimizer device path singleton")
results = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
named = [(r["name"], r["result"]) for r in results]  # e.g. "libhvdc:gpu / gpu optimizer kernels"
skipped = [n for n, res in named if any(m in n for m in must) and res != "OK"]
ran = [n for n, res in named if any(m in n for m in must) and res == "OK"]
print("ran:", ran, "\nnot OK:", skipped)
if not ran and not skipped:
    print("no such test among:", [n for n, _ in named])
sys.exit(1 if skipped or len(ran) < len(must) else 0)
PY
}
step gpu_tests_ran gpu_tests_ran

# 5: issue 34's figures
step latency_bench_gpu "$build/benchmarks/latency_bench" --device gpu -n 2000 --batch 100
# issue 17: the ResNet-50 set <= 0.3 ms at np 1; issue 34: the default threshold within 3 % of
# the best, judged side by side (--confirm-default: a sweep's rows ran seconds apart)
step fusion_bench_gpu "$build/benchmarks/fusion_bench" --device gpu --model resnet50,tiny --steps 20 \
    --confirm-default 5
step allreduce_bench_gpu "$build/benchmarks/allreduce_bench" --device gpu
# the price of each CUDA/NCCL call of the device path, and of each piece of a lone op's chain
step gpu_call_bench "$build/benchmarks/gpu_call_bench" -n 3000
# the copy kernel against cudaMemcpyAsync, its results checked (early: the budget cut it last time)
step pack_bench "$build/benchmarks/pack_bench"

# 6: PyTorch on the GPU, as users run it: plain torch / DDP(nccl) / hvdc on ResNet-50 at batch
# 64, 224x224, in one run; hvdc.torch's tests on CUDA tensors; the example (one GPU per rank,
# mixed precision)
data=$bundle/fashion-mnist
export PYTHONPATH=$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH} HVDC_LIBRARY=$build/libhvdc/libhvdc.so
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step torch_compare_gpu python3 benchmarks/torch_compare.py --device cuda --np 1 \
        --out "$logs/torch_compare_cuda"
    # (since 3e1f916 synchronize() has the stream wait, not the host); these are in the python
    # suite, which step 4 does not run: run as the suite runs them (tests/python/run.py:
    # bounded, with conftest on the path)
    for t in test_cuda test_optimizer; do
        step torch_${t}_gpu env PYTHONPATH="$PWD/tests/python:$PYTHONPATH" \
            python3 tests/python/run.py python3 "$build/hvdcrun" 1 pytest "tests/python/$t.py"
    done
    if [ -r "$data/train-images-idx3-ubyte.gz" ]; then
        step torch_example_gpu "$build/hvdcrun" -np 1 python3 examples/pytorch/train_fashion_mnist.py \
            --device cuda --amp --epochs 2 --data "$data" --min-accuracy 0.8
    fi
else
    echo "python3 has no torch that sees a GPU: PyTorch steps not run" | tee "$logs/torch.log"
fi

# 7: training in C
if [ -r "$data/train-images-idx3-ubyte.gz" ]; then
    # three runs each: the host runs ahead of the device, so a completion race shows in some
    # runs only (the name race seen at a309d36 failed 2 of 2 MLP runs and 1 of 2 CNN runs)
    for run in 1 2 3; do
        step train_mlp_gpu_$run "$build/examples/train" --device gpu --data "$data" --epochs 3
        step train_cnn_gpu_$run "$build/examples/train" --device gpu --model cnn --data "$data" --epochs 3
    done
    step train_mlp_cpu "$build/examples/train" --data "$data" --epochs 1
    # the device optimizer's state through a checkpoint: stopped mid-run and resumed, the
    # parameters end bit for bit as one uninterrupted run's
    step train_mlp_gpu_resume env HVDCRUN="$build/hvdcrun" TRAIN_RESUME_NP=1 \
        tests/train/train_resume.sh "$build/examples/train" "$work" --device gpu --data "$data"
else
    echo "no Fashion-MNIST in $data: training not run (tests/gpu/fetch_bundle.sh copies it)" | tee "$logs/train.log"
fi

# 8: memcheck; a memory error fails the step (--error-exitcode). API errors are not counted:
# NCCL probes kernels it has no image for, and its 8 API errors are its own (docs/gpu.md)
sanitizer=$(command -v compute-sanitizer || ls "$(dirname "$(command -v nvcc)")"/../compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
if [ -n "$sanitizer" ]; then
    check=("$sanitizer" --tool memcheck --error-exitcode 1 --report-api-errors no)
    step memcheck_collectives "${check[@]}" --show-backtrace host "$build/tests/gpu/test_gpu_collectives"
    step memcheck_optimizer "${check[@]}" "$build/tests/gpu/test_optim_gpu"
else
    echo "compute-sanitizer not found: memcheck not run" | tee "$logs/memcheck.log"
fi

# 9: host figures with cores to spare; unbound and without MPI's yield, as benchmarks/results
if [ -x "$build/hvdcrun" ] && command -v mpirun >/dev/null; then
    # a command, not a shell function: step bounds commands only
    run=("$build/hvdcrun" --mpi-args "--mca mpi_yield_when_idle 0")
    step latency_bench_cpu_np2 "${run[@]}" -np 2 "$build/benchmarks/latency_bench" -n 2000
    step latency_bench_cpu_np4 "${run[@]}" -np 4 "$build/benchmarks/latency_bench" -n 2000
    step allreduce_bench_cpu_np2 "${run[@]}" -np 2 "$build/benchmarks/allreduce_bench" -b 64K -e 64M \
        -f 4 -n 20 --impl hvd-shm,hvd-mpi,mpi,mpi-thread,memcpy
else
    echo "no hvdcrun or mpirun: host figures not taken" | tee "$logs/cpu_bench.log"
fi

cp "$build/meson-logs/meson-log.txt" "$logs/meson-log.txt" 2>/dev/null
steps_end
