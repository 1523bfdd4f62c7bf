"""What submissions are validated against: the cluster's GPUs and workloads, read from the
store once per change of the nodes, by one caller however many submissions arrive."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from master.jobs.manager import JobManager
from master.process.transactions import Transactor
from master.scheduling.throughput import ThroughputModel
from master.settings import Settings
from store import Database, UnitOfWork
from store.domain import Gpu
from store.migrate import upgrade

T = TypeVar("T")
CALLERS = 8


class HeldReads(Transactor):
    """Counts reads and holds the first one until `release` is set."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.reads = 0
        self.release = threading.Event()

    def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        self.reads += 1
        assert self.release.wait(timeout=30)
        return super().read(fn)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'hadar.db'}")
    upgrade(db.url, engine=db.engine)
    with db.transaction() as uow:
        uow.nodes.upsert(
            "n1", address="n1:1", gpus=[Gpu(index=0, type="v100")], workloads=["resnet"]
        )
    try:
        yield db
    finally:
        db.dispose()


def test_submissions_arriving_while_facts_are_stale_read_them_once(database: Database) -> None:
    """Eight submissions that all find the facts stale wait for one read of them, not one
    read each (a registration made every submission read every node)."""
    tx = HeldReads(database)
    checked = 0
    checked_lock = threading.Lock()

    def nodes_version() -> int:
        nonlocal checked
        with checked_lock:
            checked += 1
        return 1

    manager = JobManager(
        tx,
        cast(Any, None),
        Settings(),
        ThroughputModel(),
        on_change=lambda: None,
        on_capacity=lambda _: None,
        nodes_version=nodes_version,
    )
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(manager._facts())) for _ in range(CALLERS)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while checked < CALLERS and time.monotonic() < deadline:
        time.sleep(0.005)
    assert checked >= CALLERS, "every caller looked at the cache before the read ended"
    tx.release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert tx.reads == 1
    assert len(results) == CALLERS and all(r is results[0] for r in results)
    facts = manager._facts()
    assert dict(facts.gpus_by_type) == {"v100": 1} and facts.workloads == {"resnet"}
