"""Figures written into the docs: a benchmark's section of a Markdown file, between its own
begin and end markers, replaced on each run (appended on the first)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path


def write_section(markdown: Path, begin: str, end: str, lines: Sequence[str]) -> None:
    """Put `lines` (which start with `begin` and end with `end`) in place of the section
    between those markers in `markdown`, or at its end when it has none yet."""
    text = markdown.read_text() if markdown.exists() else ""
    block = "\n".join(lines)
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    markdown.write_text(text)
