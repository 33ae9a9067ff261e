#!/usr/bin/env python3
"""Rewrites the code block after every <!-- snippet: path#name --> marker of the given pages from its file.

The inverse of tests/docs/snippet.cmake, which fails when a block and its region differ: edit the compiled file under
docs/examples/ (or wherever the marker points), then run

    python3 scripts/sync_snippets.py README.md docs/*.md

A region is the lines between each "snippet-begin: NAME" and "snippet-end: NAME" comment line of the file, every such
pair in order, each without its begin marker's indentation and without other regions' marker lines.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- snippet: (\S+) -->$")
REGION_MARKER = re.compile(r"^\s*(//|#) snippet-(begin|end): \S+$")


def region(path, name):
    lines = (ROOT / path).read_text().split("\n")
    out, inside, indent, found = [], False, "", False
    for line in lines:
        m = re.match(r"^( *)(//|#) snippet-(begin|end): (\S+)$", line)
        if m and m.group(4) == name:
            if m.group(3) == "begin":
                inside, indent, found = True, m.group(1), True
            else:
                inside = False
            continue
        if inside and not REGION_MARKER.match(line):
            out.append(line[len(indent):] if line.startswith(indent) else line)
    if not found:
        sys.exit(f"{path} has no region '{name}'")
    return out


def sync(page):
    lines = page.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        m = MARKER.match(lines[i])
        i += 1
        if not m:
            continue
        target = m.group(1)
        path, _, name = target.partition("#")
        while not lines[i].startswith("```"):
            out.append(lines[i])
            i += 1
        out.append(lines[i])  # the opening fence
        i += 1
        while lines[i] != "```":
            i += 1
        out.extend(region(path, name) if name else (ROOT / path).read_text().rstrip("\n").split("\n"))
    page.write_text("\n".join(out))


for arg in sys.argv[1:]:
    sync(pathlib.Path(arg))
