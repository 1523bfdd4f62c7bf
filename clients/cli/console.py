"""The rich console every ``hctl`` table, panel and line goes through (see
:mod:`clients.cli.printable` for why text is escaped)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RichCast
from rich.segment import Segment
from rich.text import Text

from clients.cli.printable import UNPRINTABLE, printable


class PrintableConsole(Console):
    """A rich console that never lets a character a terminal acts on reach its output,
    whatever the renderable (plain strings, Text, tables, live displays): strings are
    escaped before layout, so columns keep their widths, and every segment rendered is
    escaped again for text built some other way. rich's own styling goes in control codes
    it adds when writing, not in segments' text, so it is kept."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)

    def render(
        self,
        renderable: ConsoleRenderable | RichCast | str,
        options: ConsoleOptions | None = None,
    ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and UNPRINTABLE.search(segment.text):
                yield Segment(printable(segment.text), segment.style)
            else:
                yield segment
