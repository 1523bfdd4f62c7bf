"""A Grid prints what rich prints for the same borderless table: the same lines in pipes,
the same text and colours on terminals, whether its cells fit, its one wrappable column has
to wrap, or only rich can lay it out; and cells are printed as written (escaped, never read
as markup)."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from clients.cli.console import PrintableConsole
from clients.cli.grid import Grid

HEADERS = ("ID", "NAME", "STATE", "NODE/REASON", "PROGRESS")
STYLES = {2: {"pending": "yellow", "running": "green"}}
SGR = re.compile("\x1b\\[[0-9;]*m")


def grid(rows: Sequence[Sequence[str]], wrap: int | None = 3) -> Grid:
    return Grid.of(HEADERS, rows, wrap_column=wrap, styles=STYLES)


def rich_lines(table: object, width: int) -> list[str]:
    """What rich prints for `table` in a pipe `width` columns wide, as hctl writes it."""
    stream = io.StringIO()
    console = PrintableConsole(file=stream, width=width, no_color=True, color_system=None)
    console.print(table)
    return [line.rstrip() for line in stream.getvalue().splitlines()]


def terminal(renderable: object, width: int) -> str:
    stream = io.StringIO()
    console = PrintableConsole(
        file=stream, force_terminal=True, color_system="standard", width=width
    )
    console.print(renderable)
    return stream.getvalue()


ROWS = [
    ("1", "resnet-a", "pending", "(waiting for the next scheduling round)", "0% 0/1000"),
    ("12_[4-31%4]", "sweep", "pending", "(waiting: array 12 at its limit of 4 running)", "-"),
    ("13", "日本語の名前", "running", "gpu-a[0,1]", "40% 40/100"),
    ("14", "x", "running", "gpu-b[0]", ""),
]


def test_a_table_that_fits_prints_as_rich_prints_it() -> None:
    lines = grid(ROWS).plain_lines(200)
    assert lines == rich_lines(grid(ROWS).table(), 200)
    assert lines is not None
    assert lines[0].split() == list(HEADERS)


def test_a_narrow_output_wraps_the_reason_column_as_rich_does() -> None:
    for width in (90, 70, 60, 50):
        lines = grid(ROWS).plain_lines(width)
        assert lines is not None, width
        assert lines == rich_lines(grid(ROWS).table(), width), width
    assert len(grid(ROWS).plain_lines(60) or []) > len(ROWS) + 1


def test_too_narrow_for_the_other_columns_it_leaves_the_layout_to_rich() -> None:
    assert grid(ROWS).plain_lines(30) is None
    # rich lays it out, cutting cells short.
    assert [line for line in rich_lines(grid(ROWS), 30) if line] == rich_lines(
        grid(ROWS).table(), 30
    )


def test_a_cell_with_a_line_break_goes_to_rich() -> None:
    rows = [("1", "two\nlines", "pending", "(x)", "-")]
    assert grid(rows).plain_lines(200) is None
    assert rich_lines(grid(rows), 200) == rich_lines(grid(rows).table(), 200)


def test_on_a_terminal_the_text_and_colours_are_richs() -> None:
    for width in (200, 60):
        ours, theirs = terminal(grid(ROWS), width), terminal(grid(ROWS).table(), width)
        assert [line.rstrip() for line in SGR.sub("", ours).splitlines()] == [
            line.rstrip() for line in SGR.sub("", theirs).splitlines()
        ]
        assert "\x1b[33mpending\x1b[0m" in ours
        assert "\x1b[32mrunning\x1b[0m" in ours
        assert "\x1b[1mID" in ours


def test_cells_are_escaped_and_printed_as_written() -> None:
    rows = [("1", "run[lr=0.1] :thumbs_up: \x1b]0;x\x07", "pending", "(r\u202e)", "-")]
    (header, line) = grid(rows).plain_lines(200) or []
    assert "run[lr=0.1] :thumbs_up: \\u001b]0;x\\u0007" in line
    assert "(r\\u202e)" in line
    assert "\x1b" not in line and "\u202e" not in line
    assert rich_lines(grid(rows), 200) == [header, line]


cells = st.text(
    alphabet=st.sampled_from([*"abc xyz-_/()[]%:0123", "é", "日", "語", "\u0301"]),
    max_size=30,
)


# Reasons: words, some long, that rich wraps (and cuts with an ellipsis) in a narrow column.
reasons = st.lists(cells.filter(lambda w: " " not in w), max_size=12).map(" ".join)
states = st.sampled_from(["pending", "running"])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(cells, cells, states, reasons, cells), max_size=6),
    width=st.integers(min_value=10, max_value=140),
    wrap=st.sampled_from([3, None]),
)
def test_whenever_a_grid_lays_itself_out_it_matches_rich(
    rows: list[tuple[str, ...]], width: int, wrap: int | None
) -> None:
    lines = grid(rows, wrap).plain_lines(width)
    if lines is not None:
        assert lines == rich_lines(grid(rows, wrap).table(), width)
    assert rich_lines(grid(rows, wrap), width) == rich_lines(grid(rows, wrap).table(), width)
