"""How hctl shows a command submitted without iterations: no made-up percentage anywhere,
its exit code once it ended, and a long exported environment counted, not listed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from clients.cli import format as fmt
from clients.cli.changes import ChangeLines
from clients.types import Job, JobSpec, JobState, Program
from tests.unit.clients.test_format import NOW, make_job, make_task


def command_job(**changes: Any) -> Job:
    spec = JobSpec("train", Program.command(["python", "train.py"]), preemptible=True)
    return replace(make_job(spec=spec), **changes)


def test_a_command_of_unknown_length_shows_no_percentage() -> None:
    """The queue's PROGRESS is `-` while it runs and `exit N` once it ended; the change
    lines say the same; `hctl show` says it runs until it exits and starts over if
    preempted."""
    running = command_job(
        state=JobState.RUNNING,
        tasks=(make_task("gpu-01", "v100"),),
        started_at=NOW - timedelta(minutes=2),
    )
    assert fmt.job_progress(running) == "-"
    changes = ChangeLines()
    (line,) = changes.update([running], NOW)
    assert line.endswith("running gpu-01[0,1], -"), line
    done = replace(running, state=JobState.COMPLETED, exit_code=0, tasks=())
    assert fmt.job_progress(done) == "exit 0"
    (line,) = changes.update([done], NOW)
    assert line.endswith("running -> completed, exit 0"), line
    waiting = command_job(state=JobState.PREEMPTED)
    assert "again from the start" in fmt.progress_line(waiting, NOW)


def test_a_long_environment_is_counted_not_listed() -> None:
    few = {"LR": "0.1", "EPOCHS": "3"}
    assert fmt.env_line(few, 7) == "LR=0.1 EPOCHS=3"
    many = {f"V{i}": str(i) for i in range(40)}
    assert fmt.env_line(many, 7) == "40 variables (`hctl show 7 --json` lists them)"
