"""Migrations build the schema the models describe, and take it down again."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from store import Database
from store.migrate import current, downgrade, head, upgrade
from store.models import Base


def test_upgrade_from_empty_matches_models_and_downgrade_removes_everything(
    database_url: str,
) -> None:
    """Upgrading an empty database reaches head with no drift from the models; downgrading
    to base drops every table; upgrading again works."""
    db = Database(database_url)
    try:
        assert current(db.url, engine=db.engine) is None
        upgrade(db.url, engine=db.engine)
        assert current(db.url, engine=db.engine) == head()
        with db.engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert diff == []
        tables = set(inspect(db.engine).get_table_names())
        assert set(Base.metadata.tables) <= tables

        downgrade(db.url, engine=db.engine)
        assert current(db.url, engine=db.engine) is None
        left = set(inspect(db.engine).get_table_names()) - {"alembic_version"}
        assert left == set()

        upgrade(db.url, engine=db.engine)
        assert current(db.url, engine=db.engine) == head()
    finally:
        db.dispose()


def test_upgrade_is_idempotent(db: Database) -> None:
    """Running the upgrade on a database at head changes nothing (master start does this)."""
    upgrade(db.url, engine=db.engine)
    assert current(db.url, engine=db.engine) == head()


def test_the_accounting_migration_backfills_attempts_that_ended_before_it(db: Database) -> None:
    """Down to 0005 and up again: usage_records is rebuilt from the tasks of earlier
    attempts (start, end, GPUs, GPU-seconds, exit), and a task that never started adds
    nothing."""
    from datetime import UTC, datetime, timedelta

    from store.domain import NewTask
    from store.states import ExitKind, TaskState
    from tests.unit.store.conftest import submit
    from tests.unit.store.test_cluster import register

    t0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    register(db)
    job_id = submit(db, user="carol")
    with db.transaction() as uow:
        ran, never = (
            uow.tasks.add(
                NewTask(
                    job_id=job_id,
                    task_index=0,
                    node="n1",
                    lease=lease,
                    gpu_indices=(0, 1),
                    gpu_type="v100",
                    rank_offset=0,
                    local_batch_sizes=(16, 16),
                ),
                now=t0,
            ).id
            for lease in (1, 2)
        )
        uow.tasks.set_state(ran, TaskState.RUNNING, now=t0 + timedelta(seconds=5))
        uow.tasks.set_state(
            ran,
            TaskState.EXITED,
            now=t0 + timedelta(seconds=65),
            exit_kind=ExitKind.FAILED,
            exit_code=2,
        )
        uow.tasks.set_state(never, TaskState.LOST, now=t0 + timedelta(seconds=70))
    with db.transaction() as uow:
        before = uow.usage.ended()

    downgrade(db.url, "0005", engine=db.engine)
    assert "usage_records" not in inspect(db.engine).get_table_names()
    upgrade(db.url, engine=db.engine)
    with db.transaction() as uow:
        after = uow.usage.ended()
    assert after == before
    (record,) = after
    assert (record.user, record.num_gpus, record.gpu_seconds(t0), record.exit_code) == (
        "carol",
        2,
        120.0,
        2,
    )


def test_downgrading_to_the_first_revision_keeps_jobs_tasks_and_events(db: Database) -> None:
    """Every later migration's downgrade drops its columns in place: no table is rebuilt, so
    jobs keep their tasks and history (a rebuilt jobs table would fire ON DELETE CASCADE),
    and upgrading again brings the data back under the current schema."""
    from sqlalchemy import text

    from store.domain import NewTask
    from tests.unit.store.conftest import submit
    from tests.unit.store.test_cluster import register

    register(db)
    job_id = submit(db, user="carol")
    with db.transaction() as uow:
        uow.tasks.add(
            NewTask(
                job_id=job_id,
                task_index=0,
                node="n1",
                lease=1,
                gpu_indices=(0,),
                gpu_type="v100",
                rank_offset=0,
                local_batch_sizes=(32,),
            )
        )

    def counts() -> tuple[int, int, int]:
        with db.engine.connect() as connection:
            return tuple(
                connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
                for table in ("jobs", "tasks", "job_events")
            )

    before = counts()
    assert before[:2] == (1, 1) and before[2] >= 1
    downgrade(db.url, "0001", engine=db.engine)
    assert counts() == before
    upgrade(db.url, engine=db.engine)
    assert counts() == before
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).user == "carol"


def test_the_notifications_migration_keeps_jobs_and_their_tasks(db: Database) -> None:
    """Down to 0006 and up again: the webhook columns and tables go and come back, jobs
    (with their events) survive both ways, and a job from before asks for no webhook."""
    from store.states import JobState
    from tests.unit.store.conftest import submit

    job_id = submit(db, user="dana")
    downgrade(db.url, "0006", engine=db.engine)
    tables = inspect(db.engine).get_table_names()
    assert "notifications" not in tables and "notify_defaults" not in tables
    columns = {c["name"] for c in inspect(db.engine).get_columns("jobs")}
    assert "notify_url" not in columns and "notify_on" not in columns
    upgrade(db.url, engine=db.engine)
    with db.transaction() as uow:
        job = uow.jobs.get(job_id)
        assert (job.spec.notify_url, job.spec.notify_on) == ("", ())
        assert [e.kind for e in uow.jobs.events(job_id)] == ["submitted"]
        uow.notifications.set_default("dana", "https://hooks.example.org/d", [])
        uow.jobs.transition(job_id, JobState.CANCELLED, kind="cancelled", reason="test")
        assert uow.notifications.for_job(job_id) == []
