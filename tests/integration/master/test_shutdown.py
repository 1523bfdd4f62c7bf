"""Graceful shutdown, observed in the middle: a scheduling round is held inside the policy
while the master stops, so the test sees the state between "stopping" and "stopped"."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from master.daemon import Master
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.views import Snapshot
from protos.hadar.v1 import common_pb2, hadar_pb2
from store import Database
from store.states import JobState
from tests.integration.master.conftest import Cluster, make_settings
from tests.integration.master.fakes import wait_for

HELD_S = 30.0


@dataclass
class HeldPolicy:
    """Places every job on n1's GPU 0, but each plan waits in `plan` until the test
    releases it: the round stays in progress for as long as the test needs."""

    name: str = "held"
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    planned: int = 0

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self.entered.set()
        if not self.release.wait(HELD_S):
            raise AssertionError("the test never released the round")
        self.planned += 1
        return Plan(
            {job.id: Allocation.on([GpuSlot("n1", 0)], job.batch_size) for job in snapshot.jobs}
        )


def spec(name: str) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=name, num_gpus=1, iterations=100, workload=common_pb2.WorkloadProgram(name="resnet")
    )


def test_stopping_master_refuses_submissions_as_unavailable_and_finishes_its_round(
    cluster: Cluster, tmp_path: Path
) -> None:
    """While a round is in progress, stop() turns health NOT_SERVING and refuses SubmitJob
    with UNAVAILABLE (which clients retry) without storing the job; the round still stores
    and pushes its plan, and stop() returns only after that."""
    policy = HeldPolicy()
    settings = make_settings(
        cluster.database, tmp_path, early_rounds=True, early_round_delay_s=0.01
    )
    master = Master(settings, policy=policy)
    master.start()
    cluster.masters.append(master)
    stopper: threading.Thread | None = None
    try:
        worker = cluster.worker(master, "n1", num_gpus=1)
        api = cluster.api(master)
        channel = grpc.insecure_channel(master.address)
        cluster.channels.append(channel)
        health = health_pb2_grpc.HealthStub(channel)

        def status() -> int:
            answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            return int(answer.status)

        # The submission finds an idle GPU, so the scheduler starts an early round, which
        # then waits inside the policy.
        first = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("first"))).job
        assert policy.entered.wait(HELD_S), "no scheduled round started"

        stopper = threading.Thread(target=master.stop, kwargs={"grace": 5.0}, daemon=True)
        stopper.start()
        wait_for(
            lambda: status() == health_pb2.HealthCheckResponse.NOT_SERVING,
            what="health NOT_SERVING",
        )
        assert stopper.is_alive()  # the held round keeps stop() waiting
        assert policy.planned == 0

        with pytest.raises(grpc.RpcError) as refused:
            api.SubmitJob(
                hadar_pb2.SubmitJobRequest(spec=spec("second"), idempotency_key="second-1")
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in (refused.value.details() or "")
        listed = api.ListJobs(hadar_pb2.ListJobsRequest())
        assert [job.id for job in listed.jobs] == [first.id]
        assert first.id not in worker.running_jobs()  # the round has not pushed yet

        policy.release.set()
        stopper.join(HELD_S)
        assert not stopper.is_alive(), "stop() did not return after the round finished"
    finally:
        policy.release.set()
        if stopper is not None:
            stopper.join(HELD_S)

    # The round that was in progress completed: planned, stored, and its START delivered.
    assert policy.planned == 1
    assert first.id in worker.running_jobs()
    database = Database(cluster.database)
    try:
        with database.transaction() as uow:
            jobs = uow.jobs.query()
            assert [(job.id, job.spec.name) for job in jobs] == [(first.id, "first")]
            assert jobs[0].state is JobState.RUNNING
            last = uow.rounds.last()
            assert last is not None and last.actions == 1
    finally:
        database.dispose()
