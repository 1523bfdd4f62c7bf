"""Fair share and GPU quotas through a real master, its database (SQLite and PostgreSQL)
and fake workers: the quota refusal at submission and the quota wait, a user over their
share preempted for one under it with reasons naming the share, and each user's decayed
usage read from the usage records."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import pytest

from master.rounds.snapshot import user_usage
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for
from tests.integration.master.test_api import error_of


def workload(gpus: int = 1) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="train",
        num_gpus=gpus,
        iterations=1000,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )


def submit(api: Api, gpus: int = 1) -> int:
    job_id: int = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload(gpus))).job.id
    return job_id


def get(api: Api, job_id: int) -> common_pb2.Job:
    job: common_pb2.Job = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    return job


def test_a_job_larger_than_its_users_quota_is_refused(cluster: Cluster) -> None:
    """max_gpus_per_user 2 with an override of 4 for carol: alice's 3-GPU job is refused
    INVALID_ARGUMENT naming the quota and nothing is stored; carol's is accepted."""
    master = cluster.master(max_gpus_per_user=2, gpu_quotas={"carol": 4})
    alice = cluster.api(master, "alice")
    failure = error_of(lambda: submit(alice, gpus=3))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "quota of 2 GPUs" in failure.details and "alice" in failure.details
    assert not alice.ListJobs(hadar_pb2.ListJobsRequest()).jobs
    assert submit(cluster.api(master, "carol"), gpus=3) > 0


def test_a_user_at_quota_waits_with_the_quota_as_reason(cluster: Cluster) -> None:
    """Four free GPUs, a quota of 2: two of alice's three one-GPU jobs start, the third
    waits saying alice is at her quota, and starts once one of hers ends."""
    master = cluster.master(max_gpus_per_user=2)
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice")
    ids = [submit(alice) for _ in range(3)]
    result = master.run_round()
    assert sorted(result.started) == ids[:2]
    assert get(alice, ids[2]).reason == "waiting: user alice at quota of 2 GPUs"
    wait_for(lambda: ids[0] in worker.running_jobs(), what="START of the first job")
    worker.exit(ids[0], common_pb2.EXIT_KIND_COMPLETED)
    wait_for(lambda: get(alice, ids[0]).state == common_pb2.JOB_STATE_COMPLETED, what="end")
    assert master.run_round().started == (ids[2],)


def test_a_user_over_share_makes_room_for_one_under_it(cluster: Cluster) -> None:
    """bob fills the 4 GPUs with 6 jobs; alice (equal shares) submits 2. The next round
    stops two of bob's jobs (latest first) and gives their GPUs to alice's (started once
    the stops are acknowledged); bob's waiting jobs name the fair-share hold."""
    master = cluster.master(fair_share=True)
    worker = cluster.worker(master, "n1")
    bob, alice = cluster.api(master, "bob"), cluster.api(master, "alice")
    bobs = [submit(bob) for _ in range(6)]
    assert sorted(master.run_round().started) == bobs[:4]
    wait_for(lambda: set(bobs[:4]) <= set(worker.running_jobs()), what="bob's STARTs")
    for job_id in bobs[:4]:
        worker.progress(job_id, 10)
    alices = [submit(alice) for _ in range(2)]
    result = master.run_round()
    assert sorted(result.stopped) == bobs[2:4]
    wait_for(lambda: not set(bobs[2:4]) & set(worker.running_jobs()), what="bob's stops")
    wait_for(lambda: get(bob, bobs[3]).state == common_pb2.JOB_STATE_PREEMPTED, what="PREEMPTED")
    master.run_round()
    wait_for(lambda: set(alices) <= set(worker.running_jobs()), what="alice's STARTs")
    assert set(worker.running_jobs()) == {*bobs[:2], *alices}
    reason = get(bob, bobs[5]).reason
    assert reason == (
        "waiting: bob over fair share (holds 2 of 4 GPUs, 50% share) while others wait"
    )


def test_decayed_usage_comes_from_the_usage_records(cluster: Cluster) -> None:
    """After bob's 2-GPU job ran and ended, his usage read for the round is its
    GPU-seconds (a half-life of years leaves them whole); alice, who ran nothing, has
    none; a half-life far shorter than the time since leaves almost nothing. GetFairShare
    lists bob (7 days barely decays seconds) with all the usage and the factor 1/2."""
    master = cluster.master(fair_share=True)
    worker = cluster.worker(master, "n1")
    bob = cluster.api(master, "bob")
    job_id = submit(bob, gpus=2)
    master.run_round()
    wait_for(lambda: job_id in worker.running_jobs(), what="START")
    worker.progress(job_id, 10)
    worker.exit(job_id, common_pb2.EXIT_KIND_COMPLETED)
    wait_for(lambda: get(bob, job_id).state == common_pb2.JOB_STATE_COMPLETED, what="end")
    records = master.tx.read(lambda uow: uow.usage.ended(user="bob"))
    now = datetime.now(UTC)
    expected = sum(r.gpu_seconds(now) for r in records)
    assert expected > 0
    usage = master.tx.read(lambda uow: user_usage(uow, now, 1e9))
    assert usage["bob"] == pytest.approx(expected, abs=1e-3)
    assert "alice" not in usage
    report = bob.GetFairShare(hadar_pb2.GetFairShareRequest())
    assert report.enabled and report.half_life_s == 7 * 86400
    (row,) = report.rows
    assert (row.user, row.raw_share, row.share, row.usage, row.gpus) == ("bob", 1, 1, 1, 0)
    assert row.usage_gpu_seconds == pytest.approx(expected, rel=1e-3)
    assert row.factor == pytest.approx(0.5)
    later = datetime.fromtimestamp(now.timestamp() + 3600, UTC)
    faded = master.tx.read(lambda uow: user_usage(uow, later, 60.0))
    assert faded.get("bob", 0.0) < expected * 1e-15
