"""Admission against a real master: a user's streams past the cap are refused with
RESOURCE_EXHAUSTED naming it, their slots come back when they close, and workers are
served while users hold every stream the master admits."""

from __future__ import annotations

from typing import Any

import grpc

from protos.hadar.v1 import hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for
from tests.integration.master.test_api import error_of, spec


def open_watch(api: Api) -> Any:
    """A WatchJobs stream that has been admitted (its first message arrived)."""
    stream = api.WatchJobs(hadar_pb2.WatchJobsRequest(include_initial=True), timeout=60)
    next(stream)
    return stream


def test_streams_past_a_users_cap_are_refused_and_come_back_when_closed(
    cluster: Cluster,
) -> None:
    """alice holds her 3 streams; the 4th is refused naming max_streams_per_user while bob
    still opens one; once alice cancels one, her next stream is admitted."""
    master = cluster.master(max_streams_per_user=3)
    alice = cluster.api(master, "alice", admin=False)
    bob = cluster.api(master, "bob", admin=False)
    alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec()))
    held = [open_watch(alice) for _ in range(3)]

    refused = error_of(lambda: open_watch(alice))
    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "alice already has 3 open streams" in refused.details
    assert "max_streams_per_user = 3" in refused.details
    held.append(open_watch(bob))

    held.pop(0).cancel()

    def admitted() -> Any:
        try:
            return open_watch(alice)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            return None

    held.append(wait_for(admitted, timeout=10, what="alice's slot to come back"))
    for stream in held:
        stream.cancel()


def test_workers_are_served_while_users_hold_every_stream(cluster: Cluster) -> None:
    """With the master's streams all held by users (more users than the overall cap
    admits), a worker's heartbeats are still answered at once, and a user's unary calls
    still pass."""
    master = cluster.master(max_streams=4, max_streams_per_user=2, grpc_threads=4)
    worker = cluster.worker(master, "n1")
    users = [cluster.api(master, f"user{i}", admin=False) for i in range(3)]
    users[0].SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec()))
    held = [open_watch(users[0]), open_watch(users[0]), open_watch(users[1])]
    held.append(open_watch(users[1]))

    refused = error_of(lambda: open_watch(users[2]))
    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_streams = 4" in refused.details

    # Each heartbeat has a deadline: one left waiting for a thread would fail the test.
    for _ in range(20):
        assert not worker.heartbeat().reregister
    listed = users[2].ListJobs(hadar_pb2.ListJobsRequest(), timeout=5)
    assert len(listed.jobs) == 1
    for stream in held:
        stream.cancel()
