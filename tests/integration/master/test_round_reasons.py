"""A round whose queue gets many new waiting reasons (its head moved, and every job behind
it now waits behind another) stores them after its own transaction, on SQLite a bounded
number per transaction (PostgreSQL, which locks only the rows written, in one): every
waiting job ends the round with the reason the policy gave it, and a job the round
started keeps its own."""

from __future__ import annotations

import pytest

from master.rounds import runner
from store import UnitOfWork
from tests.integration.master.conftest import Cluster
from tests.integration.master.test_planning_process import submit


def test_many_waiting_reasons_are_stored_after_the_round_in_bounded_writes(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "REASONS_PER_WRITE", 2)
    writes: list[int] = []
    store = runner._set_waiting_reasons

    def counted(uow: UnitOfWork, reasons: dict[int, str]) -> int:
        writes.append(len(reasons))
        return store(uow, reasons)

    monkeypatch.setattr(runner, "_set_waiting_reasons", counted)
    master = cluster.master(policy="fifo")
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    first = submit(api, 2)
    behind = [submit(api, 1) for _ in range(5)]
    result = master.run_round()
    assert result.started == (first,)
    jobs = master.tx.read(lambda uow: uow.jobs.get_many([first, *behind]))
    assert jobs[first].reason != f"waiting: queued behind job {behind[0]} (fifo)"
    # The first job behind waits for GPUs; the four behind it wait behind that one: five
    # reasons, more than one write holds, all stored.
    assert jobs[behind[0]].reason.startswith("waiting: needs 1 GPUs of one type")
    assert {jobs[j].reason for j in behind[1:]} == {
        f"waiting: queued behind job {behind[0]} (fifo)"
    }
    assert all(jobs[j].version == 1 for j in behind)
    assert writes == ([2, 2, 1] if master.tx.database.dialect == "sqlite" else [5])
