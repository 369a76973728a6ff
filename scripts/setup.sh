#!/usr/bin/env bash
# setup.sh - installs what is missing from Debian's archive, then configures and builds libhvdc
# in build/. Safe to run again: it installs nothing that is already there.
# Usage: scripts/setup.sh [extra meson options]
set -euo pipefail
cd "$(dirname "$0")/.."

# g++: meson's CUDA support needs a host C++ compiler when the GPU backend is built.
# python3-torch & co: the Python bindings (bindings/python) and their tests, for /usr/bin/python3.
# python3-mesonpy, -venv, -pip: `pip install .` (pyproject.toml) into a virtual environment.
# python3-yaml: hvdcrun --config-file, and the Kubernetes example's check
#   (tests/docs/check_mpijob.py).
# python3-cloudpickle: hvdc.run sends functions as Horovod's run does.
scripts/ensure_packages.sh openmpi-bin libopenmpi-dev meson ninja-build pkg-config gcc g++ \
    libc6-dev libopenblas-dev zlib1g-dev dataset-fashion-mnist python3 iproute2 util-linux \
    python3-dev python3-torch python3-torchvision python3-numpy python3-pytest \
    python3-mesonpy python3-venv python3-pip python3-yaml python3-cloudpickle

if [ ! -f build/build.ninja ]; then
    meson setup build "$@"
elif [ $# -gt 0 ]; then
    meson configure build "$@"
fi
ninja -C build
