"""Every store test runs on SQLite and, when HADAR_TEST_POSTGRES_URL is set, on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Database
from store.domain import JobSpec, NewJob
from store.migrate import upgrade
from store.states import ProgramKind
from store.testing import backends, temporary_database_url


@pytest.fixture(params=backends())
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with temporary_database_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    upgrade(database.url, engine=database.engine)
    try:
        yield database
    finally:
        database.dispose()


def make_spec(name: str = "resnet-a", num_gpus: int = 1, iterations: int = 100) -> JobSpec:
    return JobSpec(
        name=name,
        num_gpus=num_gpus,
        iterations=iterations,
        program_kind=ProgramKind.WORKLOAD,
        workload="resnet",
        allowed_gpu_types=("v100", "k80"),
        env=(("A", "1"), ("B", "2")),
        job_type="ResNet-18 (batch size 128)",
    )


def submit(db: Database, user: str = "alice", name: str = "resnet-a", key: str = "") -> int:
    with db.transaction() as uow:
        job, _ = uow.jobs.add(NewJob(user=user, spec=make_spec(name), idempotency_key=key))
    return job.id
