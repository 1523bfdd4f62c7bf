"""Idempotency keys against a real master and its database (SQLite and PostgreSQL): a
resend of the same spec answers with the job stored first; the key reused for another spec
is ALREADY_EXISTS naming that job, and stores nothing."""

from __future__ import annotations

from functools import partial
from typing import Any

import grpc
import pytest

from clients import Conflict, HadarClient, JobSpec, Program
from clients.cli.command import Context, ExitCode
from clients.cli.main import describe_failure
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.test_api import error_of, spec


def submit(api: Api, key: str, request_spec: common_pb2.JobSpec) -> common_pb2.Job:
    response = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=request_spec, idempotency_key=key))
    job: common_pb2.Job = response.job
    return job


def count(api: Api) -> int:
    return len(api.ListJobs(hadar_pb2.ListJobsRequest(page_size=1000)).jobs)


LIMITS: list[dict[str, Any]] = [
    {},
    # The pending-jobs limit counts and inserts under a lock of its own.
    {"max_pending_jobs_per_user": 10},
    # Past the rate limit a resend is still answered from the store.
    {"submit_rate_per_user": 0.001, "submit_burst_per_user": 1},
]


@pytest.mark.parametrize("limits", LIMITS, ids=["plain", "pending-limit", "rate-limited"])
def test_a_key_reused_with_another_spec_is_already_exists_naming_the_first_job(
    cluster: Cluster, limits: dict[str, Any]
) -> None:
    """The same key and spec answers with the first job; the same key with more GPUs, with
    another command or environment is ALREADY_EXISTS naming the key and the first job, and
    nothing more is stored; another user may use the same key for anything."""
    master = cluster.master(**limits)
    cluster.worker(master, "n1", num_gpus=4)
    alice = cluster.api(master, "alice", admin=False)
    bob = cluster.api(master, "bob", admin=False)

    first = submit(alice, "k", spec(env={"A": "1", "B": "2"}))
    # A map's order is no part of the request.
    assert submit(alice, "k", spec(env={"B": "2", "A": "1"})).id == first.id
    for changed in (
        spec(num_gpus=2, env={"A": "1", "B": "2"}),
        spec(env={"A": "1", "B": "3"}),
        spec(name="other", env={"A": "1", "B": "2"}),
    ):
        error = error_of(partial(submit, alice, "k", changed))
        assert error.code == grpc.StatusCode.ALREADY_EXISTS, error
        assert (
            f"idempotency key 'k' was used for job {first.id} with a different spec"
            in error.details
        )
    assert count(alice) == 1
    if not limits.get("submit_rate_per_user"):
        assert submit(bob, "k", spec(num_gpus=2)).id != first.id


def test_an_array_resent_in_another_notation_is_the_same_array(cluster: Cluster) -> None:
    """`0-3` and `0,1,2,3` are one array: the resend answers with its first element. Another
    range under the same key is ALREADY_EXISTS naming the array."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master, "alice", admin=False)
    first = submit(api, "sweep", spec(array="0-3"))
    assert submit(api, "sweep", spec(array="0,1,2,3")).id == first.id
    error = error_of(lambda: submit(api, "sweep", spec(array="0-4")))
    assert error.code == grpc.StatusCode.ALREADY_EXISTS
    assert f"idempotency key 'sweep' was used for array {first.id}" in error.details
    assert count(api) == 4


def test_a_resend_after_the_default_time_limit_changed_is_the_same_job(cluster: Cluster) -> None:
    """The cluster's default time limit is no part of what was asked for: a resend to a
    master restarted with another default answers with the job stored first."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=1)
    first = submit(cluster.api(master, "alice", admin=False), "k", spec())
    master.stop(grace=0.5)
    restarted = cluster.master(default_time_limit="1h")
    api = cluster.api(restarted, "alice", admin=False)
    assert submit(api, "k", spec()).id == first.id
    assert error_of(lambda: submit(api, "k", spec(time_limit_s=60))).code == (
        grpc.StatusCode.ALREADY_EXISTS
    )


def test_the_client_raises_conflict_and_hctl_reports_it_in_one_line(cluster: Cluster) -> None:
    """The Python client raises Conflict with the master's message; hctl turns it into
    exit 7 and a line naming the key and the job."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=2)
    token = master.create_token("alice", admin=False, description="test")
    with HadarClient(master.address, token, timeout=10) as hadar:
        first = hadar.submit_job(
            JobSpec("a", Program.builtin("resnet"), iterations=10), idempotency_key="exp-1"
        )
        with pytest.raises(Conflict) as caught:
            hadar.submit_job(
                JobSpec("a", Program.builtin("resnet"), iterations=20), idempotency_key="exp-1"
            )
    failure = describe_failure(caught.value, Context(master=master.address, command_name="submit"))
    assert failure.code == ExitCode.CONFLICT
    assert (
        f"idempotency key 'exp-1' was used for job {first.id} with a different spec"
        in failure.line()
    )
