#!/usr/bin/env bash
# check_install.sh - what the README promises a C user: after `meson install`, a program builds
# with `cc prog.c $(pkg-config --cflags --libs hvdc)` and runs, also under the installed hvdcrun. Installs the build into a
# scratch DESTDIR (never the system), points pkg-config there, compiles the README's first
# example with the flags hvdc.pc gives, and runs it as one rank. hvdc.pc must name no MPI
# package (MPI is linked into libhvdc), so this works whichever MPI built it.
# Usage: tests/docs/check_install.sh BUILD_DIR README.md
set -euo pipefail
build=$1 readme=$2
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --no-rebuild --destdir "$dest" >"$dest.log" 2>&1 ||
    { cat "$dest.log"; echo "FAIL: meson install"; exit 1; }
rm -f "$dest.log"
pc=$(find "$dest" -name hvdc.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: no hvdc.pc installed"; exit 1; }
if grep -E '^Requires' "$pc"; then
    echo "FAIL: hvdc.pc requires another package (above); it must stand alone"; exit 1
fi
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs hvdc) || { echo "FAIL: pkg-config --cflags --libs hvdc"; exit 1; }
echo "pkg-config --cflags --libs hvdc: $flags"
# the README's first ```c block: the "API at a glance" program
python3 - "$readme" >"$dest/prog.c" <<'PY'
import re, sys
print(re.search(r"^```c\n(.*?)^```", open(sys.argv[1]).read(), re.S | re.M).group(1))
PY
# shellcheck disable=SC2086 # flags is a list of words
cc -std=c11 -Wall -Werror "$dest/prog.c" -o "$dest/prog" $flags
libdir=$(pkg-config --libs-only-L hvdc | sed 's/^ *-L//; s/ *$//')
LD_LIBRARY_PATH="$libdir" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$dest/prog" ||
    { echo "FAIL: the installed example exited $?"; exit 1; }
# the launcher is installed with the library: bin/hvdcrun and its modules in share/hvdc/launcher
# (found beside bin/ although DESTDIR moved the tree), and it starts the program on 2 ranks
hvdcrun=$(find "$dest" -path '*/bin/hvdcrun' | head -n 1)
[ -n "$hvdcrun" ] && [ -x "$hvdcrun" ] || { echo "FAIL: no executable bin/hvdcrun installed"; exit 1; }
"$hvdcrun" --check-build || { echo "FAIL: installed hvdcrun --check-build"; exit 1; }
env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM LD_LIBRARY_PATH="$libdir" \
    timeout 60 "$hvdcrun" --verbose -np 2 "$dest/prog" ||
    { echo "FAIL: installed hvdcrun -np 2 prog exited $?"; exit 1; }
echo "PASS: installed, built with pkg-config, ran; installed hvdcrun ran it on 2 ranks"
