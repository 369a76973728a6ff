#!/usr/bin/env python3
"""check_function_length.py - fails when a function of libhvdc/src is longer than the house
limit (STYLE.md: rarely over ~60 lines, never over 100), so a function that grows past it is
split when it grows, not in a later clean-up.

A function is a top-level `name(...) {` of a .c or .cu file (comments and literals blanked, as
check_cycles.py reads them); its length is the lines from the one with its name to its closing
brace, both included.

Usage: check_function_length.py [--max N] [--report K] SRC_DIR
         exit 0: none longer than N (100); 1: each longer one listed with its length.
         --report K also prints the K longest, for the note of a change that moved them.
       check_function_length.py --self-test
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_cycles import (blank_comments_and_literals, blank_preprocessor,  # noqa: E402
                          file_level_functions)

def functions(code):
    """[(name, first line, last line)] of the functions code defines at file level."""
    code = blank_preprocessor(blank_comments_and_literals(code))
    return [(name, first, last) for name, _, first, last in file_level_functions(code)]


def scan(src):
    """[(lines, path, name, first line)] of every function under src."""
    out = []
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if name.endswith((".c", ".cu")):
                path = os.path.join(root, name)
                for fn, first, last in functions(open(path, encoding="utf-8").read()):
                    out.append((last - first + 1, os.path.relpath(path, src), fn, first))
    return sorted(out, reverse=True)


def main(src, limit, report):
    found = scan(src)
    long = [f for f in found if f[0] > limit]
    for n, path, fn, first in long:
        print("check_function_length: %s:%d %s is %d lines (at most %d): split it into steps "
              "that each do one job" % (path, first, fn, n, limit))
    for n, path, fn, first in found[:report]:
        print("  %4d  %s:%d %s" % (n, path, first, fn))
    print("check_function_length: %d functions, longest %d lines, %d over %d" %
          (len(found), found[0][0] if found else 0, len(long), limit))
    return 1 if long else 0


def self_test():
    """A planted function of limit + 1 lines must fail; one of limit lines must pass."""
    for n_lines, want in ((100, 0), (101, 1)):
        with tempfile.TemporaryDirectory() as src:
            body = "".join("    x += %d; /* { */\n" % i for i in range(n_lines - 4))
            with open(os.path.join(src, "f.c"), "w") as f:
                f.write('static const char *s = "{";\nint f(int x)\n{\n' + body +
                        "    return x;\n}\nint g(void) { return 0; }\n")
            if main(src, 100, 0) != want:
                print("self-test: a function of %d lines was %s" %
                      (n_lines, "refused" if want == 0 else "let through"))
                return 1
    print("self-test: OK (101 lines caught, 100 let through)")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--self-test"]:
        sys.exit(self_test())
    limit, report = 100, 0
    while args and args[0].startswith("--"):
        if args[0] == "--max":
            limit = int(args[1])
        elif args[0] == "--report":
            report = int(args[1])
        else:
            sys.exit("check_function_length: unknown option %s" % args[0])
        args = args[2:]
    sys.exit(main(args[0] if args else "libhvdc/src", limit, report))
