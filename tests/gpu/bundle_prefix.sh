#!/usr/bin/env bash
# bundle_prefix.sh - the Open MPI that on_device.sh takes to the bare GPU machine works when
# unpacked into a prefix: mpi_prefix.sh unpacks .gpu-bundle/debs (tests/gpu/fetch_bundle.sh
# fetches them), pkg-config from the prefix finds ompi-c there, and a CPU test at np 2 runs
# under the relocated mpirun with the relocated libmpi. Skipped (77) with the reason when the
# bundle was not fetched.
# Usage: bundle_prefix.sh TEST_BINARY
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
debs=$here/../../.gpu-bundle/debs
ls "$debs"/*.deb >/dev/null 2>&1 ||
    { echo "SKIPPED: no .gpu-bundle/debs (run tests/gpu/fetch_bundle.sh to fetch the packages)"; exit 77; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
"$here/mpi_prefix.sh" "$debs" "$t/prefix" || { echo "FAIL: mpi_prefix.sh"; exit 1; }
# shellcheck disable=SC1091
source "$t/prefix/env.sh"
[ "$(command -v mpirun)" = "$t/prefix/usr/bin/mpirun" ] || { echo "FAIL: mpirun is $(command -v mpirun)"; exit 1; }
[ "$(command -v pkg-config)" = "$t/prefix/usr/bin/pkg-config" ] || { echo "FAIL: pkg-config is $(command -v pkg-config)"; exit 1; }
flags=$(pkg-config --cflags --libs ompi-c) || { echo "FAIL: pkg-config ompi-c"; exit 1; }
case "$flags" in *"$t/prefix/usr/"*) ;; *) echo "FAIL: ompi-c points outside the prefix: $flags"; exit 1;; esac
flags=$(pkg-config --cflags --libs openblas) || { echo "FAIL: pkg-config openblas (the build needs it)"; exit 1; }
case "$flags" in *"$t/prefix/usr/"*) ;; *) echo "FAIL: openblas points outside the prefix: $flags"; exit 1;; esac
ldd "$1" | grep -q "libmpi.so.* => $t/prefix/" || { echo "FAIL: libmpi not taken from the prefix"; ldd "$1" | grep mpi; exit 1; }
mpirun --oversubscribe --bind-to none -np 2 "$1" || { echo "FAIL: np 2 under the relocated Open MPI"; exit 1; }
echo "PASS: Open MPI from $(ls "$debs" | wc -l) packages in a prefix"
