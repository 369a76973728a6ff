#!/usr/bin/env bash
# check_install.sh - what the README promises a Python user: after `meson install`, the hvdc
# package sits in the interpreter's site directory for the prefix and knows where the installed
# libhvdc is. Installs the build into a scratch DESTDIR (never the system), checks that every
# module of the source tree was installed and that hvdc/_install_config.py names
# <prefix>/<libdir>/libhvdc.so.0, then imports the installed copy (nothing from the source tree)
# and all-reduces as one rank, the library found through the linker path as the recorded file is
# not at its final place under a DESTDIR.
# Usage: tests/python/check_install.sh BUILD_DIR PYTHON SOURCE_DIR
set -euo pipefail
build=$1 python=$2 src=$3
"$python" -c "import torch" 2>/dev/null || { echo "SKIP: $python cannot import torch"; exit 77; }
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --no-rebuild --destdir "$dest" >"$dest/install.log" 2>&1 ||
    { cat "$dest/install.log"; echo "FAIL: meson install"; exit 1; }
config=$(find "$dest" -path '*/hvdc/_install_config.py' | head -n 1)
[ -n "$config" ] || { echo "FAIL: no hvdc/_install_config.py installed"; exit 1; }
site=$(dirname "$(dirname "$config")")
for f in $(cd "$src/bindings/python" && find hvdc -name '*.py'); do
    [ -f "$site/$f" ] || { echo "FAIL: $f was not installed (into $site)"; exit 1; }
done
lib=$(sed -n 's/^LIBRARY = "\(.*\)"$/\1/p' "$config")
[ -f "$dest$lib" ] || { echo "FAIL: _install_config.py names $lib, which was not installed"; exit 1; }
echo "installed into ${site#"$dest"}; the library recorded: $lib"
cd "$dest"  # nothing of the source tree on the path
env -u PYTHONPATH -u HVDC_LIBRARY PYTHONPATH="$site" LD_LIBRARY_PATH="$(dirname "$dest$lib")" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$python" - "$site" <<'PY'
import sys
import torch
import hvdc.torch as hvd
from hvdc.common import library
assert hvd.__file__.startswith(sys.argv[1]), hvd.__file__
hvd.init()
assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.ones(3))
hvd.shutdown()
print("PASS: the installed hvdc.torch ran (libhvdc from", library.path + ")")
PY
