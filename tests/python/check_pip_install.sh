#!/usr/bin/env bash
# check_pip_install.sh - what the README promises a Python user: `pip install .` into a fresh
# virtual environment that sees Debian's torch (python3 -m venv --system-site-packages) builds
# libhvdc and installs the hvdc package, hvdcrun and the library there; `hvdcrun -np 2 python
# -c 'import hvdc.torch as hvd; ...'` then all-reduces with no PYTHONPATH or HVDC_LIBRARY. The
# wheel built the same way (pip wheel, from the same meson build directory, so libhvdc is
# compiled once) installs into a second fresh environment, run from an empty directory with a
# bare environment, that must not refer to this source tree anywhere: what a second machine of
# the same kind gets. The versions of the wheel, hvdc.__version__ and the library agree.
# Prints each step's seconds ('# pip install . took N s').
# Usage: tests/python/check_pip_install.sh SOURCE_DIR PYTHON
#   PYTHON: the interpreter the environments are made from (/usr/bin/python3: Debian's torch)
set -euo pipefail
src=$(cd "$1" && pwd) python=$2
for m in venv mesonpy torch; do
    "$python" -c "import $m" 2>/dev/null ||
        { echo "SKIP: $python cannot import $m (scripts/setup.sh installs it)"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset PYTHONPATH HVDC_LIBRARY VIRTUAL_ENV
step() {  # step NAME COMMAND...: runs it, output to $tmp/NAME.log, prints its seconds
    local name=$1 t0 rc=0; shift
    t0=$(date +%s.%N)
    "$@" >"$tmp/$name.log" 2>&1 || rc=$?
    awk -v a="$t0" -v b="$(date +%s.%N)" -v n="$name" \
        'BEGIN { printf "# %s took %.1f s\n", n, b - a }'
    if [ "$rc" -ne 0 ]; then
        tail -n 30 "$tmp/$name.log"
        echo "FAIL: $name (exit status $rc)"
        exit 1
    fi
}

# The job every environment must run: two ranks, integer-valued sums, each rank checks its own.
job='import sys, torch, hvdc, hvdc.torch as hvd
from hvdc.common import library
hvd.init()
got = hvd.allreduce(torch.arange(4.0) * (hvd.rank() + 1), op=hvd.Sum)
want = torch.arange(4.0) * sum(r + 1 for r in range(hvd.size()))
assert hvd.size() == 2 and torch.equal(got, want), (hvd.rank(), got, want)
prefix = sys.prefix + "/"
assert hvdc.__file__.startswith(prefix), hvdc.__file__
assert library.path.startswith(prefix), library.path
print("rank %d of %d: sum %s, hvdc %s from %s" % (hvd.rank(), hvd.size(), got.tolist(),
      hvdc.__version__, library.path))
hvd.shutdown()'
run_job() {  # run_job VENV: hvdcrun from that environment, its python on PATH, from an empty dir
    local venv=$1
    mkdir -p "$tmp/empty"
    (cd "$tmp/empty" &&
     env -i HOME="$tmp" PATH="$venv/bin:/usr/bin:/bin" VIRTUAL_ENV="$venv" \
         timeout 120 hvdcrun -np 2 python -c "$job")
}

# 1. pip install . into a fresh environment
"$python" -m venv --system-site-packages "$tmp/a"
step "pip install ." "$tmp/a/bin/pip" install --no-index --no-build-isolation \
    --config-settings builddir="$tmp/meson" "$src"
step "hvdcrun -np 2 in the environment pip installed into" run_job "$tmp/a"
grep '^rank ' "$tmp/hvdcrun -np 2 in the environment pip installed into.log"

# 2. the wheel, into a second fresh environment that has never seen this tree
step "pip wheel" "$tmp/a/bin/pip" wheel --no-index --no-build-isolation --no-deps \
    --config-settings builddir="$tmp/meson" -w "$tmp/dist" "$src"
wheel=$(ls "$tmp"/dist/hvdc-*.whl)
echo "# wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
"$python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
want = ["hvdc/lib/libhvdc.so.", "hvdc/_launcher/hvdcrun_hosts.py", "hvdc/torch/__init__.py",
        ".data/scripts/hvdcrun"]
missing = [w for w in want if not any(w in n for n in names)]
assert not missing, "the wheel lacks %s (it has %s)" % (missing, names)
script = next(n for n in names if n.endswith(".data/scripts/hvdcrun"))
first = zipfile.ZipFile(sys.argv[1]).read(script).splitlines()[0]
assert first == b"#!python", "hvdcrun's first line is %r, not #!python (pip rewrites it)" % first
PY
"$python" -m venv --system-site-packages "$tmp/b"
step "pip install the wheel" "$tmp/b/bin/pip" install --no-index "$wheel"
if grep -rIl --exclude-dir=__pycache__ -e "$src" -e "$tmp/meson" "$tmp/b"; then
    echo "FAIL: the files above, installed from the wheel, refer to $src or the build directory"
    exit 1
fi
step "hvdcrun -np 2 in the environment the wheel went into" run_job "$tmp/b"
grep '^rank ' "$tmp/hvdcrun -np 2 in the environment the wheel went into.log"

# 3. one version everywhere: pyproject.toml, the wheel's name, hvdc.__version__, hvd_version()
"$tmp/b/bin/python" - "$wheel" "$src/pyproject.toml" <<'PY'
import ctypes, os, re, sys, hvdc
from hvdc.common import library
lib = ctypes.CDLL(library.path)
lib.hvd_version.restype = ctypes.c_char_p
wheel = os.path.basename(sys.argv[1]).split("-")[1]
project = re.search(r"^version = '([^']*)'", open(sys.argv[2]).read(), re.M).group(1)
versions = {"pyproject.toml": project, "wheel": wheel, "hvdc.__version__": hvdc.__version__,
            "hvd_version()": lib.hvd_version().decode()}
assert len(set(versions.values())) == 1, "versions differ: %s" % versions
print("# one version everywhere: %s" % project)
PY
echo "PASS: pip install . and its wheel each ran hvdc.torch on 2 ranks under their own hvdcrun"
