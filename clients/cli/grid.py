"""Borderless tables written without rich's per-cell rendering, for listings thousands of
rows long (`hctl queue` on a busy cluster).

hctl's tables are rich ``Table(box=None, pad_edge=False, show_edge=False,
header_style="bold")``: columns two spaces apart, each as wide as its widest cell, at most
one column that may wrap. rich lays out every cell through several renderables, which
costs tens of microseconds a cell; a :class:`Grid` writes the same characters itself
whenever rich would only pad cells or wrap the one column that may wrap (its wrapping is
still rich's own, asked for those cells alone). Anything else (columns that do not fit even
with that column narrowed, a cell holding a line break or a tab) goes to rich as a table.

Cells are escaped first (:mod:`clients.cli.printable`) and are printed as written: brackets
in a job's name are not read as rich markup, nor ``:name:`` as an emoji.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from clients.cli.printable import UNPRINTABLE, printable

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.table import Table

HEADER_STYLE = "bold"
# Cells of one row, padded to their columns' widths: one list per printed line.
Line = list[str]


def cell_len(text: str) -> int:
    """Columns `text` takes on a terminal, as rich counts them (wide characters take 2)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len as rich_cell_len

    return rich_cell_len(text)


def _escaped(row: Sequence[str]) -> tuple[str, ...]:
    # One search per row: the cells joined by a newline, which is not escaped.
    if UNPRINTABLE.search("\n".join(row)) is None:
        return tuple(row)
    return tuple(printable(cell) for cell in row)


@dataclass(frozen=True)
class Grid:
    """A table to print; build it with :meth:`of`."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    # The column rich may wrap (and narrow) when the table is wider than the output.
    wrap_column: int | None = None
    # Per column: the rich style of a cell by its text (colours on terminals only).
    styles: Mapping[int, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        headers: Sequence[str],
        rows: Iterable[Sequence[str]],
        *,
        wrap_column: int | None = None,
        styles: Mapping[int, Mapping[str, str]] | None = None,
    ) -> Grid:
        """A table of `rows` under `headers`; what others wrote in the cells is escaped."""
        escaped = tuple(_escaped(row) for row in rows)
        if any(len(row) != len(headers) for row in escaped):
            raise ValueError(f"every row needs {len(headers)} cells")
        return cls(tuple(headers), escaped, wrap_column, dict(styles or {}))

    # -- layout -----------------------------------------------------------------------------

    def _plan(self, max_width: int) -> tuple[list[int], list[list[int]], list[bool]] | None:
        """The columns' content widths as rich sets them in `max_width` columns, each row's
        cell lengths (the header's first) and whether a row is all ASCII (a character a
        column); None when only rich can lay the table out."""
        count = len(self.headers)
        lengths: list[list[int]] = []
        ascii_rows: list[bool] = []
        for row in (self.headers, *self.rows):
            joined = "".join(row)
            if "\n" in joined or "\t" in joined:
                return None
            simple = joined.isascii()
            ascii_rows.append(simple)
            lengths.append([len(cell) for cell in row] if simple else list(map(cell_len, row)))
        natural = [max(column) for column in zip(*lengths, strict=True)]
        left = [0 if c == 0 else 1 for c in range(count)]
        right = [0 if c == count - 1 else 1 for c in range(count)]
        # rich's widths include the padding and never exceed the output.
        widths = [min(n + left[c] + right[c], max_width) or 1 for c, n in enumerate(natural)]
        excess = sum(widths) - max_width
        wrap = self.wrap_column
        if excess > 0 and wrap is not None:
            # rich narrows the wrappable column first, by as much as it takes.
            widths[wrap] -= min(excess, widths[wrap])
        content = [w - left[c] - right[c] for c, w in enumerate(widths)]
        if sum(widths) > max_width or any(
            natural[c] > content[c] for c in range(count) if c != wrap
        ):
            return None  # rich would shrink every column, cutting cells short
        if wrap is not None and content[wrap] < 1:
            return None
        return content, lengths, ascii_rows

    def layout(self, max_width: int) -> tuple[list[Line], int] | None:
        """The printed lines, each as its padded cells, as rich lays the table out in
        `max_width` columns, and how many of them are the header's; None when only rich
        can lay it out."""
        plan = self._plan(max_width)
        if plan is None:
            return None
        content, lengths, _ = plan
        lines: list[Line] = []
        header_lines = 0
        for index, row in enumerate((self.headers, *self.rows)):
            row_lines = self._row_lines(row, lengths[index], content)
            lines.extend(row_lines)
            if index == 0:
                header_lines = len(row_lines)
        return lines, header_lines

    def _row_lines(
        self, row: Sequence[str], row_lengths: Sequence[int], content: Sequence[int]
    ) -> list[Line]:
        """A row's printed lines (several when its wrappable cell wraps), as padded cells."""
        count = len(row)
        left = [0 if c == 0 else 1 for c in range(count)]
        right = [0 if c == count - 1 else 1 for c in range(count)]
        wrap = self.wrap_column
        if wrap is None or row_lengths[wrap] <= content[wrap]:
            return [
                [
                    " " * left[c] + cell + " " * (content[c] - row_lengths[c] + right[c])
                    for c, cell in enumerate(row)
                ]
            ]
        lines: list[Line] = []
        for index, piece in enumerate(_wrap(row[wrap], content[wrap])):
            line: Line = []
            for c, cell in enumerate(row):
                text, length = (cell, row_lengths[c]) if index == 0 else ("", 0)
                if c == wrap:
                    text, length = piece, cell_len(piece)
                line.append(" " * left[c] + text + " " * (content[c] - length + right[c]))
            lines.append(line)
        return lines

    def plain_lines(self, max_width: int) -> list[str] | None:
        """The table as text without trailing spaces (as hctl prints it in pipes); None
        when only rich can lay it out."""
        plan = self._plan(max_width)
        if plan is None:
            return None
        content, lengths, ascii_rows = plan
        wrap = self.wrap_column
        # Cells two spaces apart, each padded to its column: one call a row when every
        # character takes one column.
        pattern = "  ".join(f"{{:<{width}}}" for width in content)
        out: list[str] = []
        for index, row in enumerate((self.headers, *self.rows)):
            row_lengths = lengths[index]
            if ascii_rows[index] and (wrap is None or row_lengths[wrap] <= content[wrap]):
                out.append(pattern.format(*row).rstrip())
            else:
                lines = self._row_lines(row, row_lengths, content)
                out.extend("".join(line).rstrip() for line in lines)
        return out

    # -- rich -------------------------------------------------------------------------------

    def table(self) -> Table:
        """The same table as a rich Table."""
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False, header_style=HEADER_STYLE, show_edge=False)
        for c, header in enumerate(self.headers):
            table.add_column(header, no_wrap=c != self.wrap_column, justify="left")
        for row in self.rows:
            table.add_row(
                *(
                    Text(cell, style=self.styles.get(c, {}).get(cell, ""))
                    for c, cell in enumerate(row)
                )
            )
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Span, Text

        laid_out = self.layout(options.max_width)
        if laid_out is None:
            yield self.table()
            return
        lines, header_lines = laid_out
        text: list[str] = []
        spans: list[Span] = []
        offset = 0
        for index, line in enumerate(lines):
            joined = "".join(line).rstrip()
            if index < header_lines:
                spans.append(Span(offset, offset + len(joined), HEADER_STYLE))
            else:
                position = offset
                for c, cell in enumerate(line):
                    style = self.styles[c].get(cell.strip()) if c in self.styles else None
                    if style:
                        start = position + len(cell) - len(cell.lstrip(" "))
                        spans.append(Span(start, start + len(cell.strip()), style))
                    position += len(cell)
            text.append(joined)
            offset += len(joined) + 1
        yield Text("\n".join(text), spans=spans, no_wrap=True, overflow="ignore")


@cache
def _wrapping_console() -> Console:
    from rich.console import Console

    # Wrapping a cell only measures text; the console's own output is never used.
    return Console(width=1000, color_system=None)


def _wrap(text: str, width: int) -> list[str]:
    """A cell of the wrappable column in `width` columns, exactly as rich wraps it there."""
    from rich.text import Text

    lines = Text(text).wrap(
        _wrapping_console(), width, justify="left", overflow="ellipsis", no_wrap=False
    )
    return [line.plain.rstrip(" ") for line in lines]
