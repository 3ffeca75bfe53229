#!/usr/bin/env python3
"""Checks every relative link and anchor of the project's Markdown docs.

Why: the docs point at each other, at headings and at files of the tree, and
files get moved and headings renamed; GitHub shows a broken link only to the
reader who clicks it. This walks every tracked Markdown file (`git ls-files
'*.md'`, not target/) and checks its relative links: `[text](path)`,
`[text](path#anchor)`, `[text](#anchor)`, images, and reference definitions
`[id]: path`.

- A path is resolved against the Markdown file's directory (a leading `/`
  against the repository's root, as GitHub does) and must exist in the work
  tree, file or directory.
- An anchor into a Markdown file must be one of its headings, slugged as GitHub
  does (lowercase; punctuation other than `-` and `_` removed; spaces to `-`;
  repeated headings `-1`, `-2`, ...), or an explicit `<a name="x">`/`<a id="x">`.
  An anchor into another file (`#L10` on a source file) passes when the file
  exists.
- Not checked: http://, https:// and mailto: links, and anything in fenced code
  blocks (``` or ~~~) or inline code spans.

Prints each broken link as `file:line: link: why`, then
`check-links: N links in M files, K broken`; exits 1 when any is broken.

  hack/check-links.py [--root DIR]   # DIR: default the git top level
  hack/check-links.py --self-test    # the checker on a made-up tree (CI runs both)
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import unicodedata
import urllib.parse

# At most this many headings are named when an anchor is missing.
MAX_HEADINGS_SHOWN = 8

SKIPPED_SCHEMES = ("http://", "https://", "mailto:")

FENCE = re.compile(r"^ *(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*?\b(?:name|id)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)([\s\S]+?)(?<!`)\1(?!`)")
# [text](target) and ![alt](target): text may hold one level of brackets
# ([`a[0]`](x)); target is <...> or runs to whitespace or the closing ')',
# with an optional "title".
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*\]"
    r"\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
    r"""(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)"""
)
# [id]: target, not a footnote [^id]: text.
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[(?!\^)[^\]]+\]:\s*(<[^>\n]*>|\S+)")


def github_slug(text):
    """The anchor GitHub gives a heading, before the -1, -2 of repeats: from the
    heading as rendered (code spans' text, links' text, no HTML or emphasis)."""
    parts = []
    for i, part in enumerate(CODE_SPAN.split(text)):
        # split gives text, backticks, code, text, ...: code is kept as it is.
        if i % 3 == 2:
            parts.append(part.strip())
        elif i % 3 == 0:
            part = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", part)  # links: their text
            part = re.sub(r"<[^>]+>", "", part)  # inline HTML
            parts.append(re.sub(r"(?<!\w)_+|_+(?!\w)", "", part))  # _emphasis_, not snake_case
    text = "".join(parts).strip().lower()
    text = "".join(c for c in text
                   if c.isalnum() or c in "-_ " or unicodedata.category(c).startswith("M"))
    return text.replace(" ", "-")


def mask_code_spans(text):
    """The text with every inline code span blanked out (same length, same lines)."""
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def outside_fences(lines):
    """(line number, line) of the lines outside fenced code blocks; None for a fence
    or a blank line, which end a paragraph."""
    fence = None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence:
            # Closed by a run of the same character, as long or longer, alone on its line.
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and line.strip() == m.group(1):
                fence = None
            yield number, None
        elif m:
            fence = m.group(1)
            yield number, None
        else:
            yield number, (line if line.strip() else None)


def paragraphs(lines):
    """(first line number, text) of each run of lines outside fences up to a blank line:
    code spans and link texts may run over lines, not over paragraphs."""
    first, block = None, []
    for number, line in outside_fences(lines):
        if line is None:
            if block:
                yield first, "\n".join(block)
            first, block = None, []
        else:
            first = first or number
            block.append(line)
    if block:
        yield first, "\n".join(block)


def scan(text):
    """Yields ('heading', line, text), ('anchor', line, name) and ('link', line, target)
    for one Markdown file, skipping fenced code blocks and code spans."""
    for first, block in paragraphs(text.splitlines()):
        lines = block.split("\n")
        for i, line in enumerate(lines):
            h = ATX_HEADING.match(line)
            if h:
                yield "heading", first + i, (h.group(2) or "")
            elif i > 0 and SETEXT_UNDERLINE.match(line) and \
                    not lines[i - 1].lstrip().startswith(("|", "-", "*", ">")):
                yield "heading", first + i - 1, lines[i - 1].strip()
        visible = mask_code_spans(block)
        for a in HTML_ANCHOR.finditer(visible):
            yield "anchor", first + visible.count("\n", 0, a.start()), a.group(1)
        for i, line in enumerate(visible.split("\n")):
            d = REFERENCE_DEFINITION.match(line)
            if d:
                yield "link", first + i, d.group(1).strip("<>")
        # Overlapping, for an image inside a link's text: [![badge](b.svg)](doc.md).
        link = INLINE_LINK.search(visible)
        while link:
            number = first + visible.count("\n", 0, link.start(1))
            yield "link", number, link.group(1).strip("<>")
            after_bracket = link.start() + (2 if visible[link.start()] == "!" else 1)
            link = INLINE_LINK.search(visible, after_bracket)


class Tree:
    """The work tree under root, with the anchors of its Markdown files (cached)."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.anchors = {}

    def anchors_of(self, path):
        """(anchors, headings in order) of a Markdown file."""
        if path not in self.anchors:
            with open(path, encoding="utf-8") as f:
                items = list(scan(f.read()))
            seen = {}
            slugs, explicit = [], []
            for kind, _, value in items:
                if kind == "heading":
                    slug = github_slug(value)
                    n = seen.get(slug, 0)
                    seen[slug] = n + 1
                    slugs.append(slug if n == 0 else f"{slug}-{n}")
                elif kind == "anchor":
                    explicit.append(value)
            self.anchors[path] = (set(slugs) | set(explicit), slugs)
        return self.anchors[path]

    def check(self, md_file, target):
        """Why a link of md_file (relative to root) is broken, or None."""
        path, _, anchor = target.partition("#")
        path = urllib.parse.unquote(path)
        anchor = urllib.parse.unquote(anchor)
        here = os.path.dirname(os.path.join(self.root, md_file))
        if not path:
            resolved = os.path.join(self.root, md_file)
        elif path.startswith("/"):
            resolved = os.path.join(self.root, path.lstrip("/"))
        else:
            resolved = os.path.join(here, path)
        resolved = os.path.normpath(resolved)
        if os.path.commonpath([resolved, self.root]) != self.root:
            return "outside the repository"
        if not os.path.exists(resolved):
            return "no such file"
        if not anchor or not resolved.endswith(".md") or os.path.isdir(resolved):
            return None
        anchors, headings = self.anchors_of(resolved)
        if anchor in anchors:
            return None
        shown = ", ".join(headings[:MAX_HEADINGS_SHOWN])
        if len(headings) > MAX_HEADINGS_SHOWN:
            shown += f", ... ({len(headings)} in all)"
        name = os.path.relpath(resolved, self.root)
        return f"no heading '{anchor}' in {name}; headings there: {shown or '(none)'}"


def markdown_files(root):
    """The tracked Markdown files under root, not target/."""
    run = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.md"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"check-links: git ls-files in {root} failed: {run.stderr.strip()}")
    out = run.stdout
    return sorted(f for f in out.split("\0")
                  if f and not f.startswith("target/") and os.path.isfile(os.path.join(root, f)))


def check_links(root):
    """Prints the broken links and the summary; returns the exit code."""
    tree = Tree(root)
    files = markdown_files(tree.root)
    links = broken = 0
    for md_file in files:
        with open(os.path.join(tree.root, md_file), encoding="utf-8") as f:
            text = f.read()
        for kind, number, target in scan(text):
            if kind != "link" or target.lower().startswith(SKIPPED_SCHEMES):
                continue
            links += 1
            why = tree.check(md_file, target)
            if why:
                broken += 1
                print(f"{md_file}:{number}: {target}: {why}")
    print(f"check-links: {links} links in {len(files)} files, {broken} broken")
    return 1 if broken else 0


# --self-test: the checker on a tree made up for it, against the exact broken set.
SELF_TEST_FILES = {
    "README.md": """\
# Top

[good file](docs/a.md) [good dir](docs/) [good anchor](docs/a.md#first-steps)
[broken file](docs/missing.md)
[broken anchor](docs/a.md#no-such-heading)
[second repeat](docs/a.md#setup-1) [third repeat](docs/a.md#setup-2)
[explicit](docs/a.md#here) [source line](src/main.c#L10) [web](https://example.com/x)
[mail](mailto:a@example.com) ![image](img/missing.png)

```
[in a fence](nowhere.md)
```

~~~~
```
[in a tilde fence](nowhere.md)
~~~~

`[in a code span](nowhere.md)` and [after a span](#top) and [self](#nope)

[a link whose text runs
over a line](docs/missing-too.md) and `a code span that runs
[over a line](nowhere.md)` and [titled](docs/a.md "Title") [encoded](docs/a%20b.txt)
[code in the heading](docs/a.md#metrics-metrics-prefix-x_)
[![badge](img/badge.svg)](docs/)

[^1]: a footnote, not a link

[ref]: docs/gone.md
[ref2]: <docs/a.md#punctuation-counts_here>
""",
    "docs/a.md": """\
# First steps

## Setup

## Setup

<a name="here"></a>

## Punctuation: counts_here!

## Metrics (`/metrics`, prefix `x_`)

[up](../README.md#top) [up broken](../README.md#first-steps)
""",
    "docs/a b.txt": "",
    "src/main.c": "int main(void) { return 0; }\n",
    "target/x.md": "[not checked: under target/](nowhere.md)\n",
}

A_HEADINGS = "first-steps, setup, setup-1, punctuation-counts_here, metrics-metrics-prefix-x_"
SELF_TEST_BROKEN = [
    "README.md:4: docs/missing.md: no such file",
    "README.md:5: docs/a.md#no-such-heading: no heading 'no-such-heading' in docs/a.md;"
    f" headings there: {A_HEADINGS}",
    "README.md:6: docs/a.md#setup-2: no heading 'setup-2' in docs/a.md;"
    f" headings there: {A_HEADINGS}",
    "README.md:8: img/missing.png: no such file",
    "README.md:19: #nope: no heading 'nope' in README.md; headings there: top",
    "README.md:22: docs/missing-too.md: no such file",
    "README.md:25: img/badge.svg: no such file",
    "README.md:29: docs/gone.md: no such file",
    "docs/a.md:13: ../README.md#first-steps: no heading 'first-steps' in README.md;"
    " headings there: top",
]
SELF_TEST_SUMMARY = "check-links: 22 links in 2 files, 9 broken"
# The replacements that fix them (and docs/gone.md, created).
SELF_TEST_FIXES = [
    ("docs/missing.md", "docs/gone.md"), ("docs/missing-too.md", "docs/gone.md"),
    ("#no-such-heading", "#setup"), ("#setup-2", "#setup"), ("img/missing.png", "src/main.c"),
    ("img/badge.svg", "src/main.c"),
    ("(#nope)", "(#top)"), ("README.md#first-steps", "README.md#top"),
]


def self_test():
    """Runs this script on a made-up git tree; returns the exit code."""
    failures = []
    with tempfile.TemporaryDirectory(prefix="check-links-") as tmp:
        for name, text in SELF_TEST_FILES.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        # Its own repository, whatever git repository or hook runs the self-test.
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        git = ["git", "-C", tmp, "-c", "init.defaultBranch=main"]
        subprocess.run(git + ["init", "-q"], check=True, env=env)
        subprocess.run(git + ["add", "-f", "."], check=True, env=env)
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", tmp],
                             capture_output=True, text=True, env=env)
        lines = run.stdout.splitlines()
        got_broken, got_summary = lines[:-1], (lines[-1] if lines else "")
        if run.returncode != 1:
            failures.append(f"exit code {run.returncode}, expected 1")
        if sorted(got_broken) != sorted(SELF_TEST_BROKEN):
            missing = sorted(set(SELF_TEST_BROKEN) - set(got_broken))
            extra = sorted(set(got_broken) - set(SELF_TEST_BROKEN))
            failures.append("broken links differ:\n  expected, not reported:\n    "
                            + "\n    ".join(missing or ["(none)"])
                            + "\n  reported, not expected:\n    "
                            + "\n    ".join(extra or ["(none)"]))
        if got_summary != SELF_TEST_SUMMARY:
            failures.append(f"summary {got_summary!r}, expected {SELF_TEST_SUMMARY!r}")
        if run.stderr:
            failures.append(f"stderr: {run.stderr.strip()}")

        # The same tree with its broken links fixed passes.
        with open(os.path.join(tmp, "docs", "gone.md"), "w", encoding="utf-8") as f:
            f.write("# Gone\n")
        for name in ("README.md", "docs/a.md"):
            path = os.path.join(tmp, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for old, new in SELF_TEST_FIXES:
                text = text.replace(old, new)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        subprocess.run(git + ["add", "-f", "."], check=True, env=env)
        clean = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", tmp],
                               capture_output=True, text=True, env=env)
        want = "check-links: 22 links in 3 files, 0 broken"
        if clean.returncode != 0 or clean.stdout.strip() != want:
            failures.append(f"fixed tree: exit {clean.returncode}, expected 0 and only {want!r};"
                            f" output:\n{clean.stdout}{clean.stderr}")

    if failures:
        print("check-links self-test FAILED; the first run printed:")
        print("  " + "\n  ".join(lines))
        for failure in failures:
            print("- " + failure)
        return 1
    print(f"check-links self-test: passed ({len(SELF_TEST_BROKEN)} broken links found as"
          f" expected, code blocks and external links skipped, the fixed tree clean)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="the repository to check (default: the git top level)")
    parser.add_argument("--self-test", action="store_true",
                        help="check the checker on a made-up tree, then exit")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    root = args.root
    if root is None:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True)
        if top.returncode != 0:
            sys.exit(f"check-links: not in a git repository ({top.stderr.strip()}); use --root")
        root = top.stdout.strip()
    return check_links(root)


if __name__ == "__main__":
    sys.exit(main())
