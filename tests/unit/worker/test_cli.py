"""The hadar-worker command line: GPU listing, clear errors, exit codes."""

from __future__ import annotations

import json

import pytest

from worker.cli import main


def test_gpus_lists_fake_gpus_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`hadar-worker gpus --fake-gpus ... --json` prints what the master will see."""
    assert main(["gpus", "--fake-gpus", "v100:1,k80:2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["index"], r["type"], r["fake"]) for r in rows] == [
        (0, "v100", True),
        (1, "k80", True),
        (2, "k80", True),
    ]


def test_bad_fake_spec_and_missing_master_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Bad input exits 2 with the reason on stderr."""
    assert main(["gpus", "--fake-gpus", "v100:x"]) == 2
    assert "bad fake GPU entry 'v100:x'" in capsys.readouterr().err
    assert main(["run", "--fake-gpus", "v100:1", "--state-dir", "/tmp/unused"]) == 2
    assert "master: required" in capsys.readouterr().err
