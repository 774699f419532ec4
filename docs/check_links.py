#!/usr/bin/env python3
"""Checks the relative links of the user documentation: every link in docs/src/*.md,
README.md and benches/README.md that is not a URL must name an existing file and, with a
`#anchor`, a heading of that file.

Anchors follow mdBook's rule (GitHub's is the same for these files): the heading's text
without its Markdown, in lower case, whitespace turned into `-`, punctuation other than `-`
and `_` dropped; a repeated heading gets `-1`, `-2`... Links inside code are not links.

Usage: python3 docs/check_links.py   (from anywhere; exits 1 and names every broken link)
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target "title") and ![alt](target); the target has no spaces or parentheses.
INLINE_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?(\S+?)>?(?:[ \t].*)?$", re.M)
URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documents():
    """The Markdown files whose links are checked."""
    return sorted((ROOT / "docs" / "src").glob("*.md")) + [
        ROOT / "README.md",
        ROOT / "benches" / "README.md",
    ]


def prose_blocks(text):
    """(first line number, text) of each paragraph outside fenced code blocks, its code spans
    blanked (newlines kept): a link's text may wrap over lines, so links are read per
    paragraph, not per line."""
    in_fence = False
    block, start = [], 0
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line)
        if fence:
            in_fence = not in_fence
        if in_fence or fence or not line.strip():
            if block:
                yield start, blank_code_spans("\n".join(block))
            block = []
            continue
        if not block:
            start = number
        block.append(line)
    if block:
        yield start, blank_code_spans("\n".join(block))


def blank_code_spans(text):
    """Code spans (which may wrap) turned into spaces, newlines kept for line numbers."""
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def heading_text(markdown):
    """The text a heading shows: code spans keep their content, links their text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), markdown)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("*", "")


def normalize_id(text):
    """mdBook's `normalize_id`: alphanumerics (ASCII lower-cased), `-` and `_` kept,
    whitespace turned into `-`, everything else dropped."""
    kept = []
    for ch in text:
        if ch.isalnum() or ch in "-_":
            kept.append(ch.lower() if ch.isascii() else ch)
        elif ch.isspace():
            kept.append("-")
    return "".join(kept)


def anchors(text):
    """Every anchor the file's headings define, repeated headings numbered as mdBook does."""
    seen = {}
    found = set()
    in_fence = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match:
            base = normalize_id(heading_text(match.group(2)))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text):
    """(line number, target) of every link in the prose."""
    for start, block in prose_blocks(text):
        matches = list(INLINE_LINK.finditer(block)) + list(REFERENCE_DEFINITION.finditer(block))
        for match in matches:
            yield start + block.count("\n", 0, match.start(1)), match.group(1)


def problem(source, target, anchor_cache):
    """Why a relative link from `source` to `target` is broken, or None."""
    path_part, _, anchor = target.partition("#")
    destination = (source.parent / path_part).resolve() if path_part else source
    if not destination.exists():
        return "no such file"
    if not anchor:
        return None
    if destination.is_dir() or destination.suffix != ".md":
        return "an anchor into a file that is not Markdown"
    if destination not in anchor_cache:
        anchor_cache[destination] = anchors(destination.read_text(encoding="utf-8"))
    if anchor not in anchor_cache[destination]:
        return f"no heading with the anchor #{anchor}"
    return None


def main():
    failures = []
    checked = 0
    anchor_cache = {}
    for source in documents():
        if not source.exists():
            failures.append(f"{source.relative_to(ROOT)}: missing")
            continue
        for number, target in links(source.read_text(encoding="utf-8")):
            if not target or URL_SCHEME.match(target):
                continue  # a URL (https:, mailto:...) is not a file of this repository
            checked += 1
            why = problem(source, target, anchor_cache)
            if why:
                failures.append(f"{source.relative_to(ROOT)}:{number}: ({target}) {why}")
    for failure in failures:
        print(failure)
    print(f"{checked - len(failures)} of {checked} relative links check out")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
