"""A worker configured with several master addresses (the active master and its standbys)
calls whichever answers, moving on when the one it used stops answering."""

from __future__ import annotations

import pytest

from clients.localcluster import free_port
from protos.hadar.v1 import coordinator_pb2
from tests.integration.worker.fake_master import FakeMaster, eventually
from worker.agent.agent import TEST_CLUSTER_TOKEN
from worker.agent.master import GrpcMasterClient, MasterError


def _register(client: GrpcMasterClient) -> None:
    client.register(coordinator_pb2.RegisterWorkerRequest(node="n1", address="127.0.0.1:1"))


def _registered(client: GrpcMasterClient) -> bool:
    try:
        _register(client)
    except MasterError:
        return False
    return True


def test_calls_go_to_the_master_that_answers_and_move_on_when_it_goes() -> None:
    """With "standby,active" the first call skips the address nobody listens on; after the
    active master goes away and the standby starts listening, calls reach the standby (once
    gRPC's reconnect backoff for that address, at most a second, has passed) and stay
    with it."""
    standby_port = free_port()
    active = FakeMaster().start()
    client = GrpcMasterClient(
        f"127.0.0.1:{standby_port}, {active.address}", TEST_CLUSTER_TOKEN, timeout_s=5
    )
    successor: FakeMaster | None = None
    try:
        _register(client)
        assert active.registration_count() == 1
        assert client.address == active.address
        active.stop()
        successor = FakeMaster(port=standby_port).start()
        eventually(lambda: _registered(client), timeout_s=10)
        assert successor.registration_count() == 1
        assert client.address == f"127.0.0.1:{standby_port}"
    finally:
        client.close()
        if successor is not None:
            successor.stop()


def test_with_no_master_answering_the_error_names_every_address() -> None:
    """When no address answers, the MasterError lists each one with its failure."""
    first, second = free_port(), free_port()
    client = GrpcMasterClient(f"127.0.0.1:{first},127.0.0.1:{second}", "t", timeout_s=2)
    try:
        with pytest.raises(MasterError) as failed:
            _register(client)
    finally:
        client.close()
    assert f"127.0.0.1:{first}" in str(failed.value)
    assert f"127.0.0.1:{second}" in str(failed.value)
    assert not failed.value.permanent
