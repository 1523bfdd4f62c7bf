"""Text other people wrote, made safe to print: a job's name, a reason, a node's name.

A terminal acts on some characters instead of showing them: escape sequences move the
cursor, rewrite earlier lines, set the window title or the clipboard, and Unicode's
direction marks reorder what follows. Anything one user can put in a name reaches every
other user's screen through `hctl queue`, so every console hctl prints with shows such
characters as ``\\uXXXX`` (which is also how JSON writes them, so ``--json`` output stays
valid). A job's own output (`hctl logs`) is not touched: only its owner and admins read it.

The rich console that applies this to everything it prints is
:class:`clients.cli.console.PrintableConsole`; this module stays free of rich, for output
written without it.
"""

from __future__ import annotations

import re

from protos.printable import UNPRINTABLE_IN_LINES

# Newlines and tabs are hctl's own layout: they stay.
UNPRINTABLE = UNPRINTABLE_IN_LINES


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str) -> str:
    """`text` with every character a terminal would act on written as ``\\uXXXX``."""
    return UNPRINTABLE.sub(_escaped, text)


def printable_line(text: str) -> str:
    """One line of `text`: also newlines and tabs escaped (a header hctl writes itself)."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")
