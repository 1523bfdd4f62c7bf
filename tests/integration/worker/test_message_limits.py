"""The Worker service refuses a request over max_receive_message_bytes before the agent
reads it: RESOURCE_EXHAUSTED from gRPC itself, and nothing starts."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from protos.hadar.v1 import worker_pb2
from tests.integration.worker.fake_master import FakeMaster
from tests.integration.worker.test_agent import apply, assignment, make_agent, stub_for


def test_an_oversized_assignment_is_refused_by_grpc(tmp_path: Path) -> None:
    fake = FakeMaster().start()
    agent = make_agent(fake.address, tmp_path / "state", max_receive_message_bytes=64 * 1024)
    agent.start()
    try:
        stub = stub_for(agent)
        with pytest.raises(grpc.RpcError) as refused:
            apply(stub, assignment(1, 1, env={"BIG": "x" * 100 * 1024}))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert agent.supervisor.running_keys() == []
        status = stub.GetWorkerStatus(worker_pb2.GetWorkerStatusRequest(), timeout=5)
        assert status.node == "test-node"
    finally:
        agent.stop(grace_s=1.0)
        fake.stop()
