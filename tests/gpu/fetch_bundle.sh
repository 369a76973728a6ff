#!/usr/bin/env bash
# fetch_bundle.sh - run HERE (a machine with Debian's package archive), before a GPU session:
# puts what the bare GPU machine lacks into .gpu-bundle/ (ignored by git; name it in the device
# tool's carry so it travels with the working tree, 64 MiB at most):
#   debs/           Open MPI and what it loads, OpenBLAS, zlib, pkg-config (apt-get download)
#   fashion-mnist/  the data set's four files, from Debian's dataset-fashion-mnist if installed
# tests/gpu/on_device.sh unpacks them there (mpi_prefix.sh). The package list is what issue 17
# found the GPU machine needs (Ubuntu 24.04 runs these Debian 12 builds).
# Usage: tests/gpu/fetch_bundle.sh [BUNDLE_DIR]   (default: .gpu-bundle at the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle=${1:-.gpu-bundle}
packages="libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libpsm2-2
  libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 libxnvctrl0 libmunge2 libltdl7
  libpciaccess0 libgfortran5 libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev
  zlib1g-dev pkgconf pkgconf-bin libpkgconf3"
mkdir -p "$bundle/debs"
(cd "$bundle/debs" && apt-get download $packages) ||
    { echo "fetch_bundle: apt-get download failed (run apt-get update first?)" >&2; exit 1; }
data=/usr/share/datasets/fashion-mnist
if [ -r "$data/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$bundle/fashion-mnist"
    cp "$data"/*-ubyte.gz "$bundle/fashion-mnist/"
else
    echo "fetch_bundle: $data is missing (apt-get install dataset-fashion-mnist): the GPU" \
         "machine's training runs will be skipped" >&2
fi
du -sh "$bundle"
echo "now: run(command='tests/gpu/on_device.sh \$OUT', carry=['$bundle'], timeout_s=450)"
