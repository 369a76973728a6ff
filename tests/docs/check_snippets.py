#!/usr/bin/env python3
"""check_snippets.py - every C snippet the README, docs/ and hvdc.h show compiles against hvdc.h,
and every whole program among them (one with main) links against libhvdc and runs as one rank.

Snippets:
  - Markdown (README.md, and every *.md of a directory given, e.g. docs/): every ```c block,
    also one indented inside a list item. A block with its own includes and functions is a translation
    unit as it stands; a block of bare statements is compiled as the body of a function, after
    <hvdc.h> and the C headers it may use.
  - hvdc.h: every comment paragraph that starts with "Example" and continues with lines indented
    by five spaces (" *     code"). Any other comment line that calls an hvd_ function and is
    indented like code is reported: it would be a snippet nobody compiles.
A snippet that uses CUDA is compiled only where cuda_runtime_api.h is found (else reported as
skipped, with the reason).

Usage: check_snippets.py --include DIR --libdir DIR [--cuda-include DIR] FILE_OR_DIR...
Exit status: 0 if every snippet compiled (and every program ran), 1 otherwise.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

PRELUDE = "#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <hvdc.h>\n"


def readme_snippets(path):
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r"^( *)```c\n(.*?)^\1```", text, re.S | re.M):
        indent = len(m.group(1))
        code = "\n".join(line[indent:] for line in m.group(2).splitlines())
        yield "%s:%d" % (path, text[: m.start()].count("\n") + 1), code


def header_snippets(path, problems):
    lines = open(path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        if re.match(r"\s*/?\*+\s*Example\b", lines[i]):
            start, code = i + 1, []
            i += 1
            while i < len(lines) and (re.match(r"\s*\* {5}", lines[i]) or re.fullmatch(r"\s*\*", lines[i])):
                code.append(re.sub(r"^\s*\* {5}", "", lines[i]) if lines[i].strip() != "*" else "")
                i += 1
            yield "%s:%d" % (path, start + 1), "\n".join(code)
            continue
        if re.match(r"\s*\* {3,}.*\bhvd_[a-z_]+\(", lines[i]):
            problems.append("%s:%d: code in a comment that is not an Example snippet: %s"
                            % (path, i + 1, lines[i].strip()))
        i += 1


def translation_unit(code):
    """A snippet with top-level definitions stands as it is; bare statements get a function."""
    if re.search(r"^#include|^\w[\w\s\*]*\([^;]*\)\s*\{", code, re.M):
        return (PRELUDE if "#include <hvdc.h>" not in code else "") + code + "\n"
    return PRELUDE + "void snippet(void);\nvoid snippet(void) {\n" + code + "\n}\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--include", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--cuda-include", default="/usr/local/cuda/include")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    problems, snippets = [], []
    files = []
    for f in args.files:
        if os.path.isdir(f):
            mds = sorted(os.path.join(f, n) for n in os.listdir(f) if n.endswith(".md"))
            if not mds:
                problems.append("%s: a directory with no .md file" % f)
            files += mds
        else:
            files.append(f)
    for f in files:
        snippets += list(readme_snippets(f) if f.endswith(".md") else header_snippets(f, problems))
    cuda = os.path.exists(os.path.join(args.cuda_include, "cuda_runtime_api.h"))
    compiled = ran = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, (where, code) in enumerate(snippets):
            uses_cuda = "cuda" in code
            if uses_cuda and not cuda:
                print("skipped %s: uses CUDA and %s/cuda_runtime_api.h is missing" % (where, args.cuda_include))
                skipped += 1
                continue
            unit = translation_unit(code)
            if uses_cuda:
                unit = "#include <cuda_runtime_api.h>\n" + unit
            src = os.path.join(tmp, "snippet%d.c" % n)
            open(src, "w").write(unit)
            is_program = re.search(r"\bint\s+main\s*\(", code) is not None
            exe = os.path.join(tmp, "snippet%d" % n)
            cmd = [args.cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-variable",
                   "-Wno-unused-parameter", "-Wno-unused-but-set-variable", "-I", args.include]
            if uses_cuda:
                cmd += ["-isystem", args.cuda_include]
            cmd += [src, "-o", exe, "-L", args.libdir, "-lhvdc", "-Wl,-rpath," + args.libdir] if is_program \
                else ["-c", src, "-o", exe + ".o"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                problems.append("%s: does not compile:\n%s\n--- as compiled:\n%s" % (where, r.stderr.strip(), unit))
                continue
            compiled += 1
            if is_program:
                r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
                if r.returncode != 0:
                    problems.append("%s: compiled, but running it as one rank exited %d: %s"
                                    % (where, r.returncode, (r.stdout + r.stderr).strip()[-500:]))
                else:
                    ran += 1
    for p in problems:
        print("FAIL " + p)
    print("%d snippets: %d compiled, %d programs ran as one rank, %d skipped, %d problems"
          % (len(snippets), compiled, ran, skipped, len(problems)))
    return 1 if problems or compiled == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
