"""docs/cli.md carries the reference generated from the parser, unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.cli import docs

DOC = Path(__file__).resolve().parents[3] / "docs" / "cli.md"


def test_docs_cli_md_matches_the_parser():
    """Changing a command without regenerating docs/cli.md fails here."""
    current = DOC.read_text(encoding="utf-8")
    assert docs.splice(current, docs.reference()) == current, (
        "docs/cli.md is stale: run `python -m clients.cli.docs --write docs/cli.md`"
    )


def test_reference_lists_every_command_exit_code_and_json_shape():
    """The generated part documents each command's help, the exit codes and the JSON shapes."""
    text = docs.reference()
    for command in (
        "submit",
        "queue",
        "show",
        "cancel",
        "logs",
        "wait",
        "nodes",
        "status",
        "drain",
        "resume",
        "workloads",
        "whoami",
        "admin token create",
        "admin token list",
        "admin token revoke",
        "completion",
    ):
        assert f"#### `hctl {command}`" in text
    for code in ("| 0 |", "| 3 |", "| 5 |", "| 100 |", "| 103 |", "| 124 |"):
        assert code in text
    assert "#### `QueueOutput`" in text


def test_check_mode_reports_a_stale_file(tmp_path):
    """--check exits 1 on a stale file and --write repairs it."""
    stale = tmp_path / "cli.md"
    stale.write_text(f"intro\n{docs.BEGIN}\nold\n{docs.END}\noutro\n")
    assert docs.main(["--check", str(stale)]) == 1
    assert docs.main(["--write", str(stale)]) == 0
    assert docs.main(["--check", str(stale)]) == 0
    text = stale.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n")
    with pytest.raises(ValueError, match="markers not found"):
        docs.splice("no markers", "x")
