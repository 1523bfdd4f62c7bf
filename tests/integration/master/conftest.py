"""A real master (gRPC on port 0, a real database) and in-process fake workers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from master.daemon import Master
from master.settings import Settings
from protos.hadar.v1 import hadar_pb2_grpc
from store.testing import backends, temporary_database_url
from tests.integration.master.fakes import FakeWorker

CLUSTER_TOKEN = "cluster-secret"


def make_settings(database: str, tmp_path: Path, **changes: Any) -> Settings:
    base = Settings(
        listen="127.0.0.1:0",
        database=database,
        policy="fifo",
        round_seconds=3600,
        early_rounds=False,
        heartbeat_interval_s=0.2,
        # Fake workers heartbeat only when a test asks them to; the lost-node test sets a
        # short timeout for itself.
        heartbeat_timeout_s=120.0,
        max_retries=1,
        grace_s=1.0,
        dispatch_timeout_s=2.0,
        dispatch_attempts=2,
        auth="token",
        cluster_token=CLUSTER_TOKEN,
        cluster_token_file=str(tmp_path / "cluster-token"),
        checkpoint_dir=str(tmp_path / "checkpoints"),
        metrics_port=-1,
    )
    return base.replace(**changes)


@dataclass
class Api:
    """A Hadar stub plus the metadata of one user."""

    stub: Any
    metadata: tuple[tuple[str, str], ...]

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.stub, name)

        def call(request: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", 10)
            return method(request, metadata=self.metadata, **kwargs)

        return call


@dataclass
class Cluster:
    """Builds masters and workers against one database; cleans up everything it made."""

    database: str
    tmp_path: Path
    masters: list[Master] = field(default_factory=list)
    workers: list[FakeWorker] = field(default_factory=list)
    channels: list[grpc.Channel] = field(default_factory=list)

    def master(self, **changes: Any) -> Master:
        master = Master(make_settings(self.database, self.tmp_path, **changes))
        master.start()
        self.masters.append(master)
        return master

    def worker(self, master: Master, name: str, **kwargs: Any) -> FakeWorker:
        worker = FakeWorker(name, master.address, CLUSTER_TOKEN, **kwargs)
        self.workers.append(worker)
        worker.register()
        return worker

    def api(self, master: Master, user: str = "alice", admin: bool = True) -> Api:
        token = master.create_token(user, admin=admin, description="test")
        channel = grpc.insecure_channel(master.address)
        self.channels.append(channel)
        stub = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
        return Api(stub, (("authorization", f"Bearer {token}"),))

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        for channel in self.channels:
            channel.close()
        for master in self.masters:
            master.stop(grace=0.5)


@pytest.fixture(params=backends())
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    with temporary_database_url(request.param, tmp_path) as url:
        built = Cluster(url, tmp_path)
        try:
            yield built
        finally:
            built.close()
