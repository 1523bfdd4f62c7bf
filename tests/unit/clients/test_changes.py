"""Watching jobs without a terminal prints a line per change, not a table per refresh."""

from __future__ import annotations

from dataclasses import replace

from clients.cli.changes import ChangeLines
from clients.types import JobState
from tests.unit.clients.test_format import NOW, make_job, make_task


def _bodies(lines: list[str]) -> list[str]:
    # Drop the local-time stamp: "12:00:00 job 7 ..." -> "job 7 ...".
    return [line.split(" ", 1)[1] for line in lines]


def test_each_job_is_described_once_then_only_when_it_changes():
    """The first look lists every job; later looks print only state or placement changes,
    naming the state before and after; progress or a new waiting reason alone print
    nothing."""
    changes = ChangeLines()
    pending = make_job(reason="waiting: no free v100")
    assert _bodies(changes.update([pending], NOW)) == [
        "job 7 (resnet-a): pending (waiting: no free v100), 0% 0/1000"
    ]
    assert changes.update([pending], NOW) == []
    assert changes.update([replace(pending, reason="waiting: price 7.9 > utility 4.1")], NOW) == []
    running = replace(
        pending, state=JobState.RUNNING, tasks=(make_task("gpu-01", "v100"),), iterations_done=10
    )
    assert _bodies(changes.update([running], NOW)) == [
        "job 7 (resnet-a): pending -> running gpu-01[0,1], 1% 10/1000"
    ]
    assert changes.update([replace(running, iterations_done=500)], NOW) == []
    moved = replace(running, tasks=(make_task("gpu-02", "k80"),), iterations_done=600)
    assert _bodies(changes.update([moved], NOW)) == [
        "job 7 (resnet-a): running gpu-02[0,1], 60% 600/1000"
    ]
    done = replace(moved, state=JobState.COMPLETED, tasks=(), iterations_done=1000)
    assert _bodies(changes.update([done], NOW)) == [
        "job 7 (resnet-a): running -> completed, 100% 1000/1000"
    ]


def test_a_job_that_leaves_the_selection_is_reported_once():
    """A job no longer listed (it finished while the watch shows active jobs) gets one line."""
    changes = ChangeLines()
    changes.update([make_job(), make_job(id=8)], NOW)
    assert _bodies(changes.update([make_job()], NOW)) == ["job 8 (resnet-a): no longer listed"]
    assert changes.update([make_job()], NOW) == []
