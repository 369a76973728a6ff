#!/usr/bin/env bash
# setup.sh - installs what is missing from Debian's archive, then configures and builds libhvdc
# in build/. Safe to run again: it installs nothing that is already there.
# Usage: scripts/setup.sh [extra meson options]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(openmpi-bin libopenmpi-dev meson ninja-build pkg-config gcc libc6-dev
          libopenblas-dev zlib1g-dev dataset-fashion-mnist python3 iproute2 util-linux)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
        sudo=sudo
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f build/build.ninja ]; then
    meson setup build "$@"
elif [ $# -gt 0 ]; then
    meson configure build "$@"
fi
ninja -C build
