"""A real master (in-process, port 0, SQLite, token auth) with two fake-GPU workers, and a
way to run ``hctl`` against it and read what it printed."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog

from clients.cli.main import main
from master.daemon import Master
from master.settings import Settings
from tests.integration.cli.fake_worker import FakeWorker

CLUSTER_TOKEN = "cluster-secret-for-tests"
USERS = {"root": True, "alice": False, "bob": False}


@dataclass
class Cluster:
    master: Master
    workers: dict[str, FakeWorker]
    tokens: dict[str, str]

    @property
    def address(self) -> str:
        return self.master.address

    def round(self) -> None:
        """One scheduling round now (the periodic ones are an hour apart in these tests)."""
        self.master.run_round()

    def worker_running(self, job_id: int) -> FakeWorker:
        """The worker that was told to start the job (waits for the assignment to arrive)."""
        for worker in self.workers.values():
            if job_id in worker.tasks and not worker.tasks[job_id].exited:
                return worker
        for worker in self.workers.values():
            try:
                worker.wait_for_task(job_id, timeout=0.2)
                return worker
            except TimeoutError:
                continue
        raise AssertionError(f"no worker runs job {job_id}")


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def lines(self) -> list[str]:
        return self.out.splitlines()


@pytest.fixture(autouse=True)
def quiet_master_logs() -> Iterator[None]:
    """The master logs through structlog to stdout by default; in these tests stdout belongs
    to hctl, so the master's records below ERROR are dropped and the rest go to the real
    stderr."""
    previous = structlog.get_config()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
        logger_factory=structlog.PrintLoggerFactory(sys.__stderr__),
    )
    yield
    structlog.configure(**previous)


def issue_token(master: Master, user: str, admin: bool) -> str:
    """What `hadar-master token create` does: the first admin token comes from the store."""
    issued = master.tx.write(lambda uow: uow.tokens.create(user, admin=admin), jobs=False)
    return issued.plaintext


@contextmanager
def running_cluster(tmp_path: Path, *, auth: str = "token", **changes: Any) -> Iterator[Cluster]:
    settings = Settings(
        listen="127.0.0.1:0",
        database=f"sqlite:///{tmp_path / 'hadar.db'}",
        policy="fifo",
        round_seconds=3600,
        early_rounds=False,
        auth=auth,  # type: ignore[arg-type]
        cluster_token=CLUSTER_TOKEN,
        cluster_token_file=str(tmp_path / "cluster-token"),
        metrics_port=-1,
        checkpoint_dir=str(tmp_path / "checkpoints"),
        heartbeat_interval_s=1.0,
        heartbeat_timeout_s=120.0,
        max_retries=0,
        grace_s=1.0,
        grpc_threads=8,
    ).replace(**changes)
    master = Master(settings)
    master.start()
    tokens = {user: issue_token(master, user, admin) for user, admin in USERS.items()}
    workers = {
        "gpu-a": FakeWorker("gpu-a", ["v100", "v100"], cluster_token=CLUSTER_TOKEN),
        "gpu-b": FakeWorker("gpu-b", ["k80", "k80"], cluster_token=CLUSTER_TOKEN),
    }
    try:
        for worker in workers.values():
            worker.register(master.address)
        yield Cluster(master, workers, tokens)
    finally:
        for worker in workers.values():
            worker.close()
        master.stop(grace=1.0)


@pytest.fixture
def cluster(tmp_path: Path, quiet_master_logs: None) -> Iterator[Cluster]:
    """Token authentication, as in production."""
    with running_cluster(tmp_path) as started:
        yield started


@pytest.fixture
def dev_cluster(tmp_path: Path, quiet_master_logs: None) -> Iterator[Cluster]:
    """No authentication (local development): callers are who x-hadar-user says."""
    with running_cluster(tmp_path, auth="none") as started:
        yield started


@pytest.fixture
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No config file, token or address leaks in from the machine running the tests."""
    monkeypatch.setenv("HADAR_CONFIG", os.devnull)
    for name in ("HADAR_MASTER", "HADAR_TOKEN", "HADAR_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


class Hctl:
    """Runs ``hctl`` in-process against the test cluster, as a given user."""

    def __init__(self, cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
        self.cluster = cluster
        self.capsys = capsys

    def __call__(self, *args: str, user: str = "alice") -> Result:
        self.capsys.readouterr()
        argv = ["--master", self.cluster.address, "--token", self.cluster.tokens[user], *args]
        code = main(argv)
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)


@pytest.fixture
def hctl(cluster: Cluster, capsys: pytest.CaptureFixture[str], isolated_env: None) -> Hctl:
    return Hctl(cluster, capsys)
