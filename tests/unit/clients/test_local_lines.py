"""The lines `hctl local up` prints for the user run as printed, whether or not hctl is
on PATH."""

from __future__ import annotations

from pathlib import Path

from clients.cli.local import runnable_hctl


def test_hctl_on_path_is_named_plainly(tmp_path: Path) -> None:
    """When PATH finds this very program, the lines say `hctl`."""
    program = tmp_path / "venv" / "bin" / "hctl"
    program.parent.mkdir(parents=True)
    program.touch()
    assert runnable_hctl(str(program), str(program), tmp_path) == "hctl"


def test_hctl_off_path_is_named_by_its_path_relative_to_the_working_directory(
    tmp_path: Path,
) -> None:
    """`make setup` leaves hctl in .venv/bin, not on PATH: the lines name that path."""
    program = tmp_path / ".venv" / "bin" / "hctl"
    program.parent.mkdir(parents=True)
    program.touch()
    assert runnable_hctl(str(program), None, tmp_path) == ".venv/bin/hctl"
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert runnable_hctl(str(program), None, other) == str(program)


def test_another_hctl_on_path_is_not_taken_for_this_one(tmp_path: Path) -> None:
    """An older install found first on PATH is not what printed the lines."""
    program = tmp_path / "new me" / "hctl"
    program.parent.mkdir()
    program.touch()
    older = tmp_path / "old" / "hctl"
    older.parent.mkdir()
    older.touch()
    assert runnable_hctl(str(program), str(older), tmp_path) == "'new me/hctl'"
