"""Which assigned tasks wait before their START goes out: those with an older lease of
their own job still active, or an older task of another job on one of their GPUs (their
sharing partner's excepted); and how requests to dispatch ready starts coalesce."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from master.nodes.dispatch import _OlderTasks
from master.process.coalesce import CoalescedRun
from store.domain import Task
from store.states import TaskState


def task(id: int, job: int, lease: int, node: str, gpus: tuple[int, ...], partner: int = 0) -> Task:
    return Task(
        id=id,
        job_id=job,
        task_index=0,
        node=node,
        lease=lease,
        gpu_indices=gpus,
        gpu_type="v100",
        state=TaskState.ASSIGNED,
        rank_offset=0,
        local_batch_sizes=(),
        accumulation_steps=1,
        num_copies=1,
        copy_index=0,
        shared_with_job_id=partner,
        round=1,
        iteration_budget=0,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        acknowledged_at=None,
        exit_kind=None,
        exit_code=None,
    )


def test_a_move_waits_for_its_own_older_lease_anywhere() -> None:
    old, new = task(1, job=7, lease=3, node="a", gpus=(0,)), task(2, 7, 5, "b", (1,))
    older = _OlderTasks([old, new])
    assert older.block(new)
    assert not older.block(old)


def test_a_start_waits_for_an_older_task_of_another_job_on_one_of_its_gpus() -> None:
    leaving = task(1, job=1, lease=3, node="a", gpus=(0, 1))
    coming = task(2, job=2, lease=4, node="a", gpus=(1, 2))
    elsewhere = task(3, job=3, lease=4, node="b", gpus=(1,))
    older = _OlderTasks([leaving, coming, elsewhere])
    assert older.block(coming)
    assert not older.block(elsewhere)
    # A newer task on the GPU does not hold an older one back.
    assert not older.block(leaving)


def test_a_sharing_partner_does_not_block() -> None:
    first = task(1, job=1, lease=3, node="a", gpus=(0,))
    partner = task(2, job=2, lease=4, node="a", gpus=(0,), partner=1)
    assert not _OlderTasks([first, partner]).block(partner)


class _Held:
    """A pool that runs what it is given only when told to."""

    def __init__(self) -> None:
        self.queued: list[Callable[[], Any]] = []

    def submit(self, fn: Callable[[], Any]) -> Future[None]:
        self.queued.append(fn)
        return Future()


def test_requests_made_while_a_run_waits_are_served_by_it() -> None:
    """Ten requests before the run starts make one run; one made after it started makes
    another, so no change is left without a run that reads it."""
    pool = _Held()
    runs: list[int] = []
    soon = CoalescedRun(lambda: runs.append(1), pool)  # type: ignore[arg-type]
    for _ in range(10):
        soon.request()
    assert len(pool.queued) == 1
    pool.queued.pop()()
    assert runs == [1]
    soon.request()
    assert len(pool.queued) == 1
