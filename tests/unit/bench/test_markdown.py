"""A benchmark's section of a Markdown file: replaced between its markers on each run,
appended on the first, the rest of the file untouched."""

from __future__ import annotations

from pathlib import Path

from bench.markdown import write_section

BEGIN, END = "<!-- figures -->", "<!-- /figures -->"


def test_a_section_is_appended_once_then_replaced_in_place(tmp_path: Path) -> None:
    """The first write appends the section after the text; a second replaces it, keeping
    what follows the section."""
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n\nintro\n")
    write_section(doc, BEGIN, END, [BEGIN, "old figures", END])
    doc.write_text(doc.read_text() + "\nafter\n")
    write_section(doc, BEGIN, END, [BEGIN, "new figures", END])
    assert doc.read_text() == (
        "# Results\n\nintro\n\n<!-- figures -->\nnew figures\n<!-- /figures -->\n\nafter\n"
    )
