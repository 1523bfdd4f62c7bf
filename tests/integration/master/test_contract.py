"""The API's contract on job ids and per-job retry limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for

NO_JOB_CAN_HAVE = 2**64 - 1


def _first(stream: Any) -> Any:
    return next(iter(stream))


CALLS: dict[str, Callable[[Api], object]] = {
    "GetJob": lambda api: api.GetJob(hadar_pb2.GetJobRequest(job_id=NO_JOB_CAN_HAVE)),
    "CancelJob": lambda api: api.CancelJob(hadar_pb2.CancelJobRequest(job_id=NO_JOB_CAN_HAVE)),
    "StreamLogs": lambda api: _first(
        api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=NO_JOB_CAN_HAVE))
    ),
    "WatchJobs": lambda api: _first(
        api.WatchJobs(hadar_pb2.WatchJobsRequest(job_ids=[NO_JOB_CAN_HAVE]))
    ),
}


@pytest.mark.parametrize("method", sorted(CALLS))
def test_a_job_id_no_job_can_have_is_not_found(cluster: Cluster, method: str) -> None:
    """A job id past what the store can hold names no job: NOT_FOUND, as for any unknown
    id, on every call that takes a job id (not INVALID_ARGUMENT)."""
    master = cluster.master()
    api = cluster.api(master)
    with pytest.raises(grpc.RpcError) as caught:
        CALLS[method](api)
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
    assert str(NO_JOB_CAN_HAVE) in error.details()


def spec(max_retries: int | None, *, command: bool = False) -> common_pb2.JobSpec:
    out = common_pb2.JobSpec(name="flaky", num_gpus=1, iterations=100)
    if command:
        out.command.argv.append("./run.sh")
    else:
        out.workload.name = "resnet"
    if max_retries is not None:
        out.max_retries = max_retries
    return out


def _job(api: Api, job_id: int) -> common_pb2.Job:
    job: common_pb2.Job = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    return job


def _fail_current_attempt(
    master: Any, worker: FakeWorker, api: Api, job_id: int, code: int
) -> common_pb2.Job:
    starts = sum(1 for a in worker.applied if a.job_id == job_id)
    assert job_id in master.run_round().started
    wait_for(
        lambda: (
            sum(1 for a in worker.applied if a.job_id == job_id) > starts
            and job_id in worker.running_jobs()
        ),
        what="the attempt started",
    )
    assert worker.exit(job_id, common_pb2.EXIT_KIND_FAILED, code, "boom").accepted
    return _job(api, job_id)


def test_a_no_requeue_job_fails_after_its_first_failed_attempt(cluster: Cluster) -> None:
    """max_retries 0 (`hctl submit --no-requeue`): the first failed attempt ends the job
    FAILED, although the cluster retries 3 times by default; no round starts it again."""
    master = cluster.master(max_retries=3)
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(0))).job
    assert job.spec.HasField("max_retries") and job.spec.max_retries == 0

    failed = _fail_current_attempt(master, worker, api, job.id, 3)

    assert failed.state == common_pb2.JOB_STATE_FAILED, failed.reason
    assert failed.retries == 0 and failed.retry_limit == 0
    assert "no retries left (0 allowed)" in failed.reason
    assert master.run_round().started == ()
    assert sum(1 for a in worker.applied if a.job_id == job.id) == 1


def test_a_job_with_one_retry_is_retried_exactly_once(cluster: Cluster) -> None:
    """max_retries 1 (`hctl submit --retries 1`): the first failure is retried, the second
    ends the job FAILED, whatever the cluster's default."""
    master = cluster.master(max_retries=3)
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(1))).job

    first = _fail_current_attempt(master, worker, api, job.id, 3)
    assert first.state == common_pb2.JOB_STATE_PREEMPTED, first.reason
    assert first.retries == 1 and "retry 1 of 1" in first.reason

    second = _fail_current_attempt(master, worker, api, job.id, 4)
    assert second.state == common_pb2.JOB_STATE_FAILED, second.reason
    assert second.retries == 1 and second.exit_code == 4
    assert "no retries left (1 allowed)" in second.reason


def test_an_opaque_command_is_not_retried_unless_it_asks(cluster: Cluster) -> None:
    """Like a Slurm batch job, a failed opaque command is FAILED at once by default; a
    managed job without a limit gets the cluster's max_retries."""
    master = cluster.master(max_retries=3)
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    command = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(None, command=True))).job
    managed = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(None))).job
    assert not command.spec.HasField("max_retries")
    assert _job(api, command.id).retry_limit == 0
    assert _job(api, managed.id).retry_limit == 3

    failed = _fail_current_attempt(master, worker, api, command.id, 1)
    assert failed.state == common_pb2.JOB_STATE_FAILED, failed.reason
    assert failed.retries == 0


def test_a_retry_limit_above_the_cap_is_refused_naming_the_field(cluster: Cluster) -> None:
    """More than 10 retries is INVALID_ARGUMENT naming spec.max_retries."""
    master = cluster.master()
    cluster.worker(master, "n1")
    api = cluster.api(master)
    with pytest.raises(grpc.RpcError) as caught:
        api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(11)))
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.max_retries" in error.details() and "at most 10" in error.details()
    accepted = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(10))).job
    assert accepted.spec.max_retries == 10
