"""What a round stores it reads first: the running tasks and the jobs it only extends are
read with no write of the process open (on SQLite, where every writer of the process waits
while one is open, submissions go ahead meanwhile), and the round still extends them."""

from __future__ import annotations

import pytest

from master.rounds import runner
from master.rounds.snapshot import ReadMemo
from master.scheduling.round import RoundDecision
from store import UnitOfWork
from tests.integration.master.conftest import Cluster
from tests.integration.master.fakes import wait_for
from tests.integration.master.test_planning_process import submit


def test_a_round_reads_what_it_keeps_before_it_takes_the_write(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    master = cluster.master(policy="fifo")
    lock = master.tx.write_lock
    open_writes: list[bool] = []
    read = runner._read_kept

    def watched(uow: UnitOfWork, decision: RoundDecision, memo: ReadMemo) -> runner.Kept:
        # PostgreSQL's writers take no lock of the process.
        open_writes.append(lock.locked() if hasattr(lock, "locked") else False)
        return read(uow, decision, memo)

    monkeypatch.setattr(runner, "_read_kept", watched)
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    job = submit(api, 2)
    assert master.run_round().started == (job,)
    wait_for(lambda: job in worker.running_jobs(), what="the START")
    again = master.run_round()
    assert again.started == () and again.stopped == ()
    wait_for(lambda: again.number in worker.extended_in(), what="the round's EXTEND")
    assert open_writes == [False, False]
