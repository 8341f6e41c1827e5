#!/usr/bin/env python3
"""The repository's text checks, run by CTest.

  docs_check.py links ROOT   Style.Links: every relative link of every Markdown file
                             resolves: the file exists and, with a #fragment, the target
                             has a heading with that anchor (GitHub's rule: lower case,
                             punctuation dropped, spaces to hyphens, -1, -2 for repeats).
  docs_check.py words ROOT   Style.ProductWords: no tracked file speaks of how the work
                             was organised (work-item numbers, sessions, "this box"): the
                             product speaks of the product; history lives in git.

Each check first runs on a probe it must reject, so a check that cannot fail fails.
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")

WORDS = re.compile(
    r"\bissues?\s+#?\d+"
    r"|\bissue\s+#\d+"
    r"|\b(?:this|next|previous|last|earlier)\s+session\b"
    r"|\bsessions?\s+\d+"
    r"|\bhelper\s+sessions?\b"
    r"|\bsubagents?\b"
    r"|\bdefects?\s+\d+"
    r"|\bthis\s+box\b"
    r"|\bdevelopment\s+machine\b",
    re.IGNORECASE,
)


def tracked_files(root):
    """The files git tracks under root (a fresh clone: every file of the repository)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout
        return [f for f in out.decode("utf-8", "replace").split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", "build")]
            for name in filenames:
                files.append(os.path.relpath(os.path.join(dirpath, name), root))
        return files


def slug(text):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", text)                # code spans keep their text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)    # links keep their text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                    # punctuation goes; _ and - stay
    return text.replace(" ", "-")


def anchors_of(markdown):
    seen = {}
    anchors = set()
    in_fence = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")
    return anchors


def links_of(markdown):
    """(line number, target) of every link outside code fences and code spans."""
    in_fence = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for m in LINK.finditer(line):
            yield number, m.group(1) or m.group(2)


def broken_links(files):
    """files: {relative path: text}. Returns 'path:line: target — why' for each broken link."""
    anchors = {}
    bad = []
    for path, text in sorted(files.items()):
        if not path.endswith(".md"):
            continue
        for number, target in links_of(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):    # https:, mailto: …: not ours
                continue
            ref, _, fragment = target.partition("#")
            if ref:
                dest = os.path.normpath(os.path.join(os.path.dirname(path), ref))
                if dest.startswith(".."):
                    bad.append(f"{path}:{number}: {target} — points outside the repository")
                    continue
                if dest not in files and not any(f.startswith(dest + "/") for f in files):
                    bad.append(f"{path}:{number}: {target} — no such file")
                    continue
            else:
                dest = path
            if fragment:
                if dest not in files or not dest.endswith(".md"):
                    bad.append(f"{path}:{number}: {target} — an anchor into a file that is not Markdown")
                    continue
                if dest not in anchors:
                    anchors[dest] = anchors_of(files[dest])
                if fragment not in anchors[dest]:
                    bad.append(f"{path}:{number}: {target} — {dest} has no heading #{fragment}")
    return bad


def process_words(files, skip):
    bad = []
    for path, text in sorted(files.items()):
        if path in skip:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            m = WORDS.search(line)
            if m:
                bad.append(f"{path}:{number}: \"{m.group(0)}\": {line.strip()[:100]}")
    return bad


def read_all(root, names):
    files = {}
    for name in names:
        full = os.path.join(root, name)
        if not os.path.isfile(full):
            continue
        with open(full, "rb") as f:
            data = f.read()
        if b"\0" in data[:8192]:
            continue                                        # binary
        files[name] = data.decode("utf-8", "replace")
    return files


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("links", "words"):
        sys.exit(__doc__)
    mode, root = sys.argv[1], sys.argv[2]
    this = os.path.relpath(os.path.abspath(__file__), os.path.abspath(root))
    if mode == "links":
        probe = {"a.md": "# Top\n[x](b.md) [y](#nowhere) [z](a.md#top) `[q](gone.md)`\n"}
        if broken_links(probe) != ["a.md:2: b.md — no such file",
                                   "a.md:2: #nowhere — a.md has no heading #nowhere"]:
            sys.exit("the link check did not flag its probe's two broken links exactly")
        files = read_all(root, [f for f in tracked_files(root) if f.endswith(".md")])
        bad = broken_links(files | {f: "" for f in tracked_files(root) if f not in files})
    else:
        probe = {"x.cc": "// fixed in issue 12\nint n;  // the session 3 figure\n"}
        if len(process_words(probe, set())) != 2:
            sys.exit("the words check did not flag its probe's two lines")
        names = tracked_files(root)
        bad = process_words(read_all(root, names), {this})
    for line in bad:
        print(line)
    print(f"{mode} check: {len(bad)} finding(s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
