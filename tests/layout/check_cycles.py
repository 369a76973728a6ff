#!/usr/bin/env python3
"""check_cycles.py - fails when the files of one folder of libhvdc/src depend on each other in
a circle. check_layers.py keeps the arrows between folders pointing down; this keeps them
pointing one way inside a folder, so each file can be read (and tested) knowing only the files
below it.

Two graphs per folder, each must be acyclic:
  includes  a.h -> b.h when a.h (or a.c) includes "folder/b.h" (a header of the same folder).
  calls     a.c -> b.c when a.c uses a function that b.c defines and does not make static:
            its name appears in a.c's code (a call, or its address taken), or in the body of a
            function-like macro of the folder's headers that a.c uses (HVDC_GATED's hvdc__enter).
            Uses within one file do not count. A function that two files define (a real backend
            and its stub) is a use of both.

The call graph is read with regular expressions, not a compiler: comments, string and character
literals are blanked first; a definition is a top-level `name(...) {` whose declaration does
not say `static`; a use is the name as a whole word anywhere else. So it may see a use that the
preprocessor removes (both sides of an #if) - a false circle is fixed by moving code, never
hidden - and it misses calls through function pointers, which are how a lower file calls back
up on purpose (a hook the upper file registers).

Python: the modules of a package (--python PKG_DIR, e.g. bindings/python/hvdc) must not import
each other in a circle either: a.py -> b.py when a.py imports b anywhere in it, inside a function
too (a deferred import hides a circle from the interpreter, not from the reader). `from pkg
import name` is an import of pkg.name when that is a module, else of pkg; read with ast.

Usage: check_cycles.py SRC_DIR        (exit 0: no circle; 1: each circle listed with its edges)
       check_cycles.py --python PKG_DIR
       check_cycles.py --self-test    (made-up folders with planted circles must fail)
"""
import ast
import os
import re
import sys
import tempfile

SOURCE_ENDINGS = (".c", ".h", ".cu")
WORD = re.compile(r"[A-Za-z_]\w*")
NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def blank_comments_and_literals(text):
    """The text with comments, string and character literals replaced by spaces (newlines kept,
    so line numbers still hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def blank_preprocessor(code):
    """code with every preprocessor line (and its continuations) blanked."""
    lines, out, continued = code.split("\n"), [], False
    for line in lines:
        directive = continued or line.lstrip().startswith("#")
        out.append(" " * len(line) if directive else line)
        continued = directive and line.rstrip().endswith("\\")
    return "\n".join(out)


def file_level_functions(code):
    """[(name, head, first line, last line)] of the functions code defines at file level: each
    `name(...) {` outside any brace, its head being the text since the last `;`, `{` or `}`
    (code with its comments, literals and preprocessor lines blanked)."""
    found, depth, chunk, line, start = [], 0, [], 1, None
    for c in code:
        if depth == 0:
            if c == "{":
                head = "".join(chunk)
                m = re.search(r"\b([A-Za-z_]\w*)\s*\(([^()]|\([^()]*\))*\)\s*$", head)
                if m and m.group(1) not in NOT_FUNCTIONS and "=" not in head:
                    start = (m.group(1), head, line - head[m.start():].count("\n"))
                chunk = []
            elif c in ";}":
                chunk = []
            else:
                chunk.append(c)
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
            if depth == 0 and start:
                found.append(start + (line,))
                start = None
        if c == "\n":
            line += 1
    return found


def exported_functions(code):
    """Names of the functions code defines at file level without `static`."""
    return {name for name, head, _, _ in file_level_functions(blank_preprocessor(code))
            if not re.search(r"\bstatic\b", head)}


def macro_bodies(code):
    """{macro: the words of its body} for the function-like macros code defines."""
    bodies, lines, i = {}, code.split("\n"), 0
    while i < len(lines):
        m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)\(", lines[i])
        text = lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
        if m:
            bodies[m.group(1)] = set(WORD.findall(text[m.end():]))
        i += 1
    return bodies


def read_folder(folder, layer):
    """(includes, uses, defines) of a folder: file -> headers of the folder it includes;
    file -> words it uses (macros of the folder's headers expanded once); file -> functions it
    exports. Only .c and .cu files use and define."""
    includes, uses, defines, codes, macros = {}, {}, {}, {}, {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(SOURCE_ENDINGS):
            continue
        text = open(os.path.join(folder, name), encoding="utf-8").read()
        own = set()
        for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            parts = m.group(1).split("/")
            if len(parts) == 2 and parts[0] == layer and parts[1] != name:
                own.add(parts[1])
        includes[name] = own
        code = blank_comments_and_literals(text)
        codes[name] = code
        if name.endswith(".h"):
            macros.update(macro_bodies(code))
    for name, code in codes.items():
        if name.endswith(".h"):
            continue
        words = set(WORD.findall(re.sub(r"^\s*#\s*include.*$", "", code, flags=re.M)))
        for macro in words & set(macros):
            words |= macros[macro]
        uses[name] = words
        defines[name] = exported_functions(code)
    return includes, uses, defines


def call_edges(uses, defines):
    """{a: {b: [functions of b that a uses]}}, between different files."""
    edges = {}
    for a, words in uses.items():
        for b, names in defines.items():
            if a == b:
                continue
            used = sorted((words & names) - defines[a])
            if used:
                edges.setdefault(a, {})[b] = used
    return edges


def circles(nodes, edges):
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def describe(layer, component, edges, what):
    lines = ["%s/: a circle of %s between %s" % (layer, what, ", ".join(component))]
    for a in component:
        for b in sorted(edges.get(a, {})):
            if b in component:
                detail = edges[a][b]
                lines.append("    %s -> %s%s" % (a, b, " (" + ", ".join(detail[:4]) +
                                                  (", ..." if len(detail) > 4 else "") + ")"
                                                  if isinstance(detail, list) else ""))
    return "\n".join(lines)


def main(src):
    problems, n_files, n_edges = [], 0, 0
    for layer in sorted(os.listdir(src)):
        folder = os.path.join(src, layer)
        if not os.path.isdir(folder):
            continue
        includes, uses, defines = read_folder(folder, layer)
        n_files += len(includes)
        include_edges = {a: {b: True for b in bs if b in includes} for a, bs in includes.items()}
        calls = call_edges(uses, defines)
        n_edges += sum(len(v) for v in include_edges.values()) + sum(len(v) for v in calls.values())
        for component in circles(includes, include_edges):
            problems.append(describe(layer, component, include_edges, "includes"))
        for component in circles(uses, calls):
            problems.append(describe(layer, component, calls, "calls"))
    for p in problems:
        print("check_cycles: " + p)
    print("check_cycles: %d files, %d edges inside folders, %d circles" % (n_files, n_edges, len(problems)))
    if problems:
        print("check_cycles: break each circle so one file of it no longer uses the other: move "
              "the shared part down into a file of its own, or let the lower file call back up "
              "through a hook the upper one registers")
    return 1 if problems else 0


def python_modules(pkg):
    """{dotted module name: path} of the package rooted at pkg (its folder name is the top)."""
    top = os.path.basename(os.path.normpath(pkg))
    base = os.path.dirname(os.path.normpath(pkg))
    modules = {}
    for root, _, files in os.walk(pkg):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, name), base)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                modules[".".join(rel)] = os.path.join(root, name)
    assert top in modules or not modules, "a package has an __init__.py"
    return modules


def python_imports(module, path, modules):
    """{imported module of the package: first line} for one module, from every import in it."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_package = path.endswith("__init__.py")
    found = {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                parts = module.split(".")
                parts = parts if is_package else parts[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [base + "." + a.name if base + "." + a.name in modules else base
                       for a in node.names]
        for t in targets:
            if t in modules and t != module:
                found.setdefault(t, node.lineno)
    return found


def python_main(pkg):
    modules = python_modules(pkg)
    edges = {m: {t: ["line %d" % n] for t, n in python_imports(m, p, modules).items()}
             for m, p in modules.items()}
    problems = [describe(os.path.basename(os.path.normpath(pkg)), c, edges, "imports")
                for c in circles(modules, edges)]
    for p in problems:
        print("check_cycles: " + p)
    print("check_cycles: %d Python modules, %d imports inside the package, %d circles" %
          (len(modules), sum(len(v) for v in edges.values()), len(problems)))
    if problems:
        print("check_cycles: break each circle: move what both modules need into a module of "
              "its own below them")
    return 1 if problems else 0


def plant(src, files):
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(src, path)), exist_ok=True)
        with open(os.path.join(src, path), "w") as f:
            f.write(text)


def self_test():
    """A folder whose files call one way passes (uses in comments, strings, static functions and
    within a file do not count); a planted call circle, a circle through a macro and an include
    circle each fail."""
    acyclic = {
        "f/low.c": '#include "f/low.h"\nint low_add(int a) { return a + 1; }\n'
                   'static int helper(void) { return 0; }\n',
        "f/low.h": "#ifndef LOW_H\n#define LOW_H\nint low_add(int a);\n"
                   "#define LOW_TWICE(x) low_add(low_add(x))\n#endif\n",
        "f/high.c": '#include "f/low.h"\n/* high_use is not low.c\'s: high_top() */\n'
                    "static int helper(void) { return 1; }\n"
                    "int high_top(int a)\n{\n    return LOW_TWICE(a) + helper();\n}\n"
                    'const char *high_name(void) { return "high_top(low_add)"; }\n'
                    "int high_again(void) { return high_top(1); }\n",
    }
    cases = [
        ("a call circle", {"f/low.c": '#include "f/low.h"\nint high_top(int a);\n'
                                      "int low_add(int a) { return high_top(a) + 1; }\n"}),
        ("a circle through a macro", {"f/low.h": "#ifndef LOW_H\n#define LOW_H\nint low_add(int a);\n"
                                                 "#define LOW_TWICE(x) low_add(low_add(x))\n"
                                                 "#define LOW_BACK(x) high_again()\n#endif\n",
                                      "f/low.c": '#include "f/low.h"\n'
                                                 "int low_add(int a) { return a + LOW_BACK(0); }\n"}),
        ("an include circle", {"f/high.h": '#include "f/low.h"\n',
                               "f/low.h": '#include "f/high.h"\nint low_add(int a);\n'}),
    ]
    with tempfile.TemporaryDirectory() as src:
        plant(src, acyclic)
        if main(src) != 0:
            print("self-test: a folder whose files call one way was refused")
            return 1
    for what, change in cases:
        with tempfile.TemporaryDirectory() as src:
            plant(src, acyclic)
            plant(src, change)
            if main(src) == 0:
                print("self-test: %s was not caught" % what)
                return 1
    python_ok = {
        "p/__init__.py": "from p import low\nfrom p.high import top\n",
        "p/low.py": "import os\n\ndef f():\n    return os.sep\n",
        "p/high.py": "from p import low\nfrom .low import f\n\ndef top():\n    return f()\n",
    }
    python_cases = [
        ("a Python circle through a deferred import",
         {"p/low.py": "def f():\n    from p.high import top\n    return top\n"}),
        ("a Python circle through a relative import",
         {"p/low.py": "from . import high\n"}),
    ]
    with tempfile.TemporaryDirectory() as src:
        plant(src, python_ok)
        if python_main(os.path.join(src, "p")) != 0:
            print("self-test: a package whose modules import one way was refused")
            return 1
    for what, change in python_cases:
        with tempfile.TemporaryDirectory() as src:
            plant(src, python_ok)
            plant(src, change)
            if python_main(os.path.join(src, "p")) == 0:
                print("self-test: %s was not caught" % what)
                return 1
    print("self-test: OK (each planted circle was caught)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if sys.argv[1:2] == ["--python"] and len(sys.argv) == 3:
        sys.exit(python_main(sys.argv[2]))
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "libhvdc/src"))
