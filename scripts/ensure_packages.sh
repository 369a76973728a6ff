#!/usr/bin/env bash
# ensure_packages.sh - installs the Debian packages named on the command line that are missing
# (CI starts on a fresh machine): scripts/setup.sh and the test stages use it. Installs
# nothing that is already there; needs root or sudo only when something is missing.
# Usage: scripts/ensure_packages.sh clang libclang-rt-14-dev ...
set -euo pipefail
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "ensure_packages: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "ensure_packages: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
