#!/usr/bin/env python3
"""check_layers.py - fails when a file in libhvdc/src includes a header from a layer it may not
use. The allowed dependencies are read from the table in libhvdc/src/README.md (the folder's
row, column "may include"), so the documentation and the check cannot drift apart.

Usage: check_layers.py SRC_DIR        (exit 0: every include points down; 1: violations listed)
       check_layers.py --self-test    (a made-up tree with one upward include must fail)
"""
import os
import re
import sys
import tempfile


def read_table(readme):
    allowed = {}
    for line in open(readme, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"`[a-z_]+/`", cells[0]):
            continue
        allowed[cells[0].strip("`/")] = set(re.findall(r"`([a-z_]+)/`", cells[2]))
    return allowed


def main(src):
    allowed = read_table(os.path.join(src, "README.md"))
    if not allowed:
        print("check_layers: no layer table found in %s/README.md" % src)
        return 1
    problems, checked = [], 0
    for layer in sorted(os.listdir(src)):
        folder = os.path.join(src, layer)
        if not os.path.isdir(folder):
            continue
        if layer not in allowed:
            problems.append("%s/: a folder the layer table does not list" % layer)
            continue
        for name in sorted(os.listdir(folder)):
            if not name.endswith((".c", ".h", ".cu")):
                continue
            path = os.path.join(folder, name)
            for number, line in enumerate(open(path, encoding="utf-8"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                checked += 1
                header = m.group(1)
                if header == "hvdc.h":
                    continue
                if "/" not in header:
                    problems.append("%s/%s:%d: includes \"%s\" without its folder" % (layer, name, number, header))
                    continue
                target = header.split("/")[0]
                if target != layer and target not in allowed[layer]:
                    problems.append("%s/%s:%d: includes %s, but %s/ may include only from %s"
                                    % (layer, name, number, header, layer,
                                       ", ".join(sorted(t + "/" for t in allowed[layer])) or "its own folder"))
    for p in problems:
        print("check_layers: " + p)
    print("check_layers: %d includes checked, %d violations" % (checked, len(problems)))
    return 1 if problems else 0


def self_test():
    """A tree that obeys the table passes; the same tree with base/ including runtime/ fails."""
    with tempfile.TemporaryDirectory() as src:
        with open(os.path.join(src, "README.md"), "w") as f:
            f.write("| folder | owns | may include |\n|---|---|---|\n"
                    "| `base/` | x | — |\n| `runtime/` | y | `base/` |\n")
        for layer, text in (("base", '#include "base/a.h"\n'), ("runtime", '#include "base/a.h"\n')):
            os.mkdir(os.path.join(src, layer))
            with open(os.path.join(src, layer, "f.c"), "w") as f:
                f.write(text)
        if main(src) != 0:
            print("self-test: a tree that obeys the table was refused")
            return 1
        with open(os.path.join(src, "base", "g.c"), "w") as f:
            f.write('#include "runtime/r.h"\n')
        if main(src) == 0:
            print("self-test: base/ including runtime/ was not caught")
            return 1
    print("self-test: OK (the upward include was caught)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "libhvdc/src"))
