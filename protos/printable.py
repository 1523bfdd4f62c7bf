"""The characters a terminal acts on instead of showing them, named once for both sides.

Escape sequences (C0 and C1 controls, DEL) can move the cursor, rewrite earlier lines, set
the window title or a clipboard; Unicode's direction marks and line separators reorder or
split what follows. The master refuses them in the short text other people's screens print
(names, reasons, paths), and hctl escapes any it meets in text others wrote.
"""

from __future__ import annotations

import re

# Every C0 control but tab and newline, which hctl's own output uses; DEL and C1.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f"
# The Arabic letter mark, LRM and RLM, the line and paragraph separators, the bidi
# embeddings and overrides, and the bidi isolates.
_DIRECTION = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"

#: Any character a terminal acts on, tab and newline included (for one-line text).
UNPRINTABLE = re.compile(f"[\t\n{_CONTROLS}{_DIRECTION}]")
#: The same but tab and newline (for text printed as lines).
UNPRINTABLE_IN_LINES = re.compile(f"[{_CONTROLS}{_DIRECTION}]")
