"""The lines `hctl local up` prints for the user run as printed, whether or not hctl is
on PATH."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from clients.cli.local import runnable_hctl, usage_lines


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


def test_the_printed_export_and_state_dir_run_as_printed_with_spaces_and_quotes(
    tmp_path: Path,
) -> None:
    """A state directory with a space and a quote in its name: the printed `export` line,
    run by a shell, sets HADAR_CONFIG to the config's path, and the `local down` line
    passes the whole state directory as one argument."""
    state_dir = tmp_path / "my cluster's state"
    config = state_dir / "hctl.toml"
    lines = usage_lines(".venv/bin/hctl", "alice", config, state_dir, ["HADAR_TOKEN"])
    commands = [line.strip() for line in lines.splitlines() if line.startswith("  ")]
    assert commands[0] == "unset HADAR_TOKEN"
    export = next(c for c in commands if c.startswith("export "))
    shown = subprocess.run(
        ["bash", "--norc", "-c", f'{export}; printf %s "$HADAR_CONFIG"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == str(config)
    down = next(c for c in commands if " local down " in c)
    assert shlex.split(down) == [".venv/bin/hctl", "local", "down", "--state-dir", str(state_dir)]
