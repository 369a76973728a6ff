#!/usr/bin/env python3
"""check_conventions.py - fails when the code breaks a house rule that a reader cannot see at a
glance but a grep can:
  clock   monotonic time is read only through base/clock.h (hvdc__now_seconds, _us, _ns), so
          every timeout, stall check and timeline uses one clock: no CLOCK_MONOTONIC in the
          code of libhvdc/src elsewhere (comments and strings do not count).
  notes   comments say why, not when or where it was found: no issue numbers ("issue 17"), no
          dates, no machine anecdotes (a GPU or CPU model: H100, EPYC, ...) in the comments of
          libhvdc/, bindings/ and launcher/ (C comments; Python comments and docstrings).
          Figures and their machines belong in docs/performance.md, history in commit messages.

Usage: check_conventions.py ROOT       (the source tree; exit 0: none broken, 1: each listed)
       check_conventions.py --self-test
"""
import ast
import io
import os
import re
import sys
import tempfile
import tokenize

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


LAB_NOTE = re.compile(r"\bissues? ?#?\d+|\b20\d\d-\d\d-\d\d\b|"
                      r"\b(H100|H200|A100|V100|GH200|MI[0-9]{3}|EPYC|Xeon)\b|\bVMs? we\b",
                      re.IGNORECASE)


def c_comments(text):
    """[(line, text)] of the C comments in text."""
    out = []
    for m in re.finditer(r"/\*.*?\*/|//[^\n]*", blank_literals(text), re.S):
        first = text.count("\n", 0, m.start()) + 1
        for k, line in enumerate(text[m.start():m.end()].split("\n")):
            out.append((first + k, line))
    return out


def blank_literals(text):
    """text with string and character literals blanked (comments kept), lines kept."""
    return re.sub(r'"(\\.|[^"\\\n])*"' + r"|'(\\.|[^'\\\n])*'",
                  lambda m: " " * len(m.group(0)), text)


def python_comments(text):
    """[(line, text)] of a Python file's comments and docstrings."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                first = node.body[0].lineno
                out += [(first + k, line) for k, line in enumerate(doc.split("\n"))]
    return out


def check_notes(root):
    """Each comment line of libhvdc/, bindings/, launcher/ that reads as a lab note."""
    found = []
    for top in ("libhvdc", "bindings", "launcher"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                path = os.path.join(folder, name)
                if name.endswith(C_ENDINGS):
                    lines = c_comments(open(path, encoding="utf-8").read())
                elif name.endswith(".py"):
                    lines = python_comments(open(path, encoding="utf-8").read())
                else:
                    continue
                for n, line in lines:
                    m = LAB_NOTE.search(line)
                    if m:
                        found.append("%s:%d ('%s')" % (os.path.relpath(path, root), n, m.group(0)))
    return found


def main(root):
    problems = ["%s reads CLOCK_MONOTONIC itself: use base/clock.h (hvdc__now_seconds, "
                "hvdc__now_us, hvdc__now_ns)" % where for where in check_clock(root)]
    problems += ["%s: a lab note in a comment; say why in the comment, put the figure and its "
                 "machine in docs/performance.md and the history in the commit message" % where
                 for where in check_notes(root)]
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
        os.remove(os.path.join(gpu, "b.c"))
        for path, text in (("a.c", '/* found on the H100 */\nconst char *m = "issue 17";\n'),
                           ("p.py", '"""Doc."""\nX = 1  # see issue 17\n'),
                           ("q.py", 'def f():\n    """Measured 2026-11-25."""\n')):
            with open(os.path.join(gpu, path), "w") as f:
                f.write(text)
            if main(root) == 0:
                print("self-test: a lab note in %s was not caught" % path)
                return 1
            os.remove(os.path.join(gpu, path))
        with open(os.path.join(gpu, "ok.c"), "w") as f:
            f.write('const char *m = "not an H100 note: a string";\n')
        if main(root) != 0:
            print("self-test: a string was taken for a comment")
            return 1
    print("self-test: OK")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
