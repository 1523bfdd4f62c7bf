"""Only the cluster token calls the worker: every RPC of the Worker service, enumerated from
its descriptor, refuses missing and wrong tokens before reading the request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos.hadar.v1 import worker_pb2
from tests.integration.rpcs import Metadata, bearer, code_of, methods
from tests.integration.worker.fake_master import FakeMaster, eventually
from worker.agent.agent import WorkerAgent, settings_for_test
from worker.gpus import FakeGpuProvider

WORKER = worker_pb2.DESCRIPTOR.services_by_name["Worker"]
TOKEN = "s3cret"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[WorkerAgent]:
    fake = FakeMaster(token=TOKEN).start()
    settings = settings_for_test(fake.address, tmp_path / "state", token=TOKEN)
    worker = WorkerAgent(settings, FakeGpuProvider.from_spec("v100:1"), workloads=["resnet"])
    worker.start()
    try:
        eventually(lambda: fake.registration_count() >= 1)
        yield worker
    finally:
        worker.stop(grace_s=1.0)
        fake.stop()


def sweep(agent: WorkerAgent, metadata: Metadata) -> dict[str, grpc.StatusCode]:
    with grpc.insecure_channel(agent.address) as channel:
        return {m.name: code_of(channel, m, metadata=metadata) for m in methods(WORKER)}


def test_every_worker_rpc_needs_the_cluster_token(agent: WorkerAgent) -> None:
    assert {"ApplyAssignments", "StopTask", "StreamTaskLogs", "GetWorkerStatus"} <= {
        m.name for m in WORKER.methods
    }
    refused = {m.name: grpc.StatusCode.UNAUTHENTICATED for m in WORKER.methods}
    for metadata in (
        (),
        bearer("wrong"),
        bearer(""),
        bearer(TOKEN + "x"),
        (("authorization", TOKEN),),
        (("authorization", f"Basic {TOKEN}"),),
    ):
        assert sweep(agent, metadata) == refused, metadata
    # The same empty requests with the right token get past the check.
    for name, code in sweep(agent, bearer(TOKEN)).items():
        assert code != grpc.StatusCode.UNAUTHENTICATED, name
