#!/usr/bin/env python3
"""check_conventions.py - fails when the code breaks a house rule that a reader cannot see at a
glance but a grep can:
  clock   monotonic time is read only through base/clock.h (hvdc__now_seconds, _us, _ns), so
          every timeout, stall check and timeline uses one clock: no CLOCK_MONOTONIC in the
          code of libhvdc/src elsewhere (comments and strings do not count).

Usage: check_conventions.py ROOT       (the source tree; exit 0: none broken, 1: each listed)
       check_conventions.py --self-test
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_cycles import blank_comments_and_literals  # noqa: E402

C_ENDINGS = (".c", ".h", ".cu")


def c_files(folder):
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(C_ENDINGS):
                yield os.path.join(root, name)


def check_clock(root):
    """Each use of CLOCK_MONOTONIC outside base/clock.h, as 'path:line'."""
    src = os.path.join(root, "libhvdc", "src")
    found = []
    for path in c_files(src):
        if os.path.relpath(path, src) == os.path.join("base", "clock.h"):
            continue
        code = blank_comments_and_literals(open(path, encoding="utf-8").read())
        for n, line in enumerate(code.split("\n"), 1):
            if re.search(r"\bCLOCK_MONOTONIC\b", line):
                found.append("%s:%d" % (os.path.relpath(path, root), n))
    return found


def main(root):
    problems = ["%s reads CLOCK_MONOTONIC itself: use base/clock.h (hvdc__now_seconds, "
                "hvdc__now_us, hvdc__now_ns)" % where for where in check_clock(root)]
    for p in problems:
        print("check_conventions: " + p)
    print("check_conventions: %d problems" % len(problems))
    return 1 if problems else 0


def self_test():
    """A planted clock_gettime(CLOCK_MONOTONIC) outside base/clock.h must fail; one in a comment
    or in base/clock.h itself must not."""
    with tempfile.TemporaryDirectory() as root:
        base = os.path.join(root, "libhvdc", "src", "base")
        gpu = os.path.join(root, "libhvdc", "src", "gpu")
        os.makedirs(base)
        os.makedirs(gpu)
        with open(os.path.join(base, "clock.h"), "w") as f:
            f.write("static inline void t(struct timespec *x) { clock_gettime(CLOCK_MONOTONIC, x); }\n")
        with open(os.path.join(gpu, "a.c"), "w") as f:
            f.write("/* not CLOCK_MONOTONIC itself */\nint a(void) { return 0; }\n")
        if main(root) != 0:
            print("self-test: a clean tree was refused")
            return 1
        with open(os.path.join(gpu, "b.c"), "w") as f:
            f.write("void b(struct timespec *x) {\n    clock_gettime(CLOCK_MONOTONIC, x);\n}\n")
        if main(root) == 0:
            print("self-test: a planted CLOCK_MONOTONIC was not caught")
            return 1
    print("self-test: OK")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
