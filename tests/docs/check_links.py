#!/usr/bin/env python3
"""check_links.py - every relative link in the project's Markdown resolves.

Checks README.md, docs/*.md, benchmarks/README.md, benchmarks/results/archive/README.md and
libhvdc/src/README.md (those that exist): each inline link or image `[text](target)` and each
reference definition `[label]: target` whose target is not a URL (http:, https:, mailto:) must
name an existing file or directory, relative to the Markdown file; a `#anchor` (alone, or after
a .md file) must name a heading of that file, slugged as GitHub does (lower case, punctuation
but `-` and `_` dropped, spaces to `-`, `-1`, `-2` for repeats) or an explicit `<a name=...>` /
`id="..."`. Links inside code (fenced blocks, `inline code`) are not links and are skipped.

Usage: check_links.py ROOT          check the tree under ROOT (the repository)
       check_links.py --self-test   plant broken links in a temporary tree: the check must fail
Exit status: 0 if every link resolves, 1 otherwise (the self-test: 0 if the check caught them).
"""
import os
import re
import sys
import tempfile

FILES = ["README.md", "benchmarks/README.md", "benchmarks/results/archive/README.md",
         "libhvdc/src/README.md"]
FENCE = re.compile(r"^ *(```|~~~).*?^ *\1[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
EXPLICIT = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"|\bid=\"([^\"]+)\"")


def slug(heading):
    """GitHub's anchor for a heading: markup dropped, lower case, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text, flags=re.UNICODE)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        text = FENCE.sub("", open(path, encoding="utf-8").read())
        seen, found = {}, set()
        for m in HEADING.finditer(text):
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else "%s-%d" % (s, n))
        for m in EXPLICIT.finditer(text):
            found.add(m.group(1) or m.group(2))
        cache[path] = found
    return cache[path]


def links(path):
    """(line, target) for every link of the file, code left out."""
    text = open(path, encoding="utf-8").read()
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # keeps line numbers
    text = INLINE_CODE.sub(blank, FENCE.sub(blank, text))
    for rx in (LINK, REFDEF):
        for m in rx.finditer(text):
            yield text.count("\n", 0, m.start()) + 1, m.group(1)


def check(root):
    """Returns the problems found under root, one message each."""
    problems, n = [], 0
    files = [os.path.join(root, f) for f in FILES if os.path.exists(os.path.join(root, f))]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    for md in files:
        where = os.path.relpath(md, root)
        for line, target in links(md):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
                continue
            n += 1
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                problems.append("%s:%d: %s: no such file or directory %s"
                                % (where, line, target, os.path.relpath(dest, root)))
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append("%s:%d: %s: no heading with anchor #%s in %s"
                                % (where, line, target, anchor, os.path.relpath(dest, root)))
    return problems, len(files), n


def self_test():
    """A tree with one good link of each kind and four broken ones: all four must be named."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "benchmarks", "results"))
        open(os.path.join(root, "benchmarks", "results", "a.txt"), "w").write("x\n")
        open(os.path.join(root, "README.md"), "w").write(
            "# Top\n\n## What it is, `now` (v2)\n\nGood: [a](docs/guide.md), [b](docs/guide.md#running-it),\n"
            "[c](#what-it-is-now-v2), ![d](benchmarks/results/a.txt), [e](benchmarks/results/),\n"
            "[f](https://example.com/nowhere.md), `[g](missing-in-code.md)`.\n\n"
            "```\n[h](missing-in-a-fence.md)\n```\n\n"
            "Broken: [x](docs/missing.md), [y](docs/guide.md#no-such-heading), [z](#nowhere).\n")
        open(os.path.join(root, "docs", "guide.md"), "w").write(
            "# Guide\n\n## Running it\n\nBack: [top](../README.md#top), [w](../benchmarks/results/b.txt)\n")
        problems, _, _ = check(root)
        wanted = ["docs/missing.md", "#no-such-heading", "#nowhere", "benchmarks/results/b.txt"]
        caught = [w for w in wanted if any(w in p for p in problems)]
        for p in problems:
            print("planted: " + p)
        wrong = [p for p in problems if not any(w in p for w in wanted)]
        if len(caught) != len(wanted) or wrong:
            print("FAIL: the check caught %d of %d planted broken links%s"
                  % (len(caught), len(wanted), "; and flagged good ones: %s" % wrong if wrong else ""))
            return 1
        print("ok: the check caught all %d planted broken links and passed the good ones" % len(wanted))
        return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print("usage: check_links.py ROOT | --self-test")
        return 2
    problems, files, n = check(argv[1])
    for p in problems:
        print("FAIL " + p)
    print("%d relative links in %d Markdown files: %d broken" % (n, files, len(problems)))
    return 1 if problems or files == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
