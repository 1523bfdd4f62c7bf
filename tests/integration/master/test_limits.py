"""Per-user limits against a real master: waiting jobs, submission rate, message and field
sizes. Every refusal is RESOURCE_EXHAUSTED (or INVALID_ARGUMENT for a field) with a message
that names the limit, and stores nothing; idempotent resubmits are never counted twice."""

from __future__ import annotations

import os
from typing import Any

import grpc
import pytest

from clients.cli.command import ExitCode
from clients.cli.main import main
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.test_api import error_of, spec


def submit(api: Api, key: str = "", **changes: Any) -> hadar_pb2.SubmitJobResponse:
    request = hadar_pb2.SubmitJobRequest(spec=spec(**changes), idempotency_key=key)
    response: hadar_pb2.SubmitJobResponse = api.SubmitJob(request)
    return response


def job_ids(api: Api, user: str) -> list[int]:
    response = api.ListJobs(hadar_pb2.ListJobsRequest(user=user))
    return [job.id for job in response.jobs]


def test_pending_limit_refuses_the_next_job_and_stores_nothing(cluster: Cluster) -> None:
    """With max_pending_jobs_per_user = 2, alice's third waiting job is refused with
    RESOURCE_EXHAUSTED naming the limit, her count and hctl's queue and cancel; resending
    a stored job's idempotency key still answers; bob is not affected; a cancellation
    frees a slot."""
    master = cluster.master(max_pending_jobs_per_user=2)
    cluster.worker(master, "n1", num_gpus=2)
    alice = cluster.api(master, "alice", admin=False)
    bob = cluster.api(master, "bob", admin=False)
    first = submit(alice, "k1").job.id
    submit(alice, "k2")

    error = error_of(lambda: submit(alice, "k3"))
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "alice already has 2 jobs waiting" in error.details
    assert "max_pending_jobs_per_user is 2" in error.details
    assert "hctl queue --me" in error.details and "hctl cancel" in error.details
    assert len(job_ids(alice, "alice")) == 2

    assert submit(alice, "k1").job.id == first
    assert len(job_ids(alice, "alice")) == 2
    submit(bob, "b1")

    alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=first))
    submit(alice, "k3")
    assert len(job_ids(alice, "alice")) == 3


def test_submission_rate_refuses_with_a_retry_hint(cluster: Cluster) -> None:
    """A burst of 2 at 0.01 submissions a second: the third submission is refused with the
    seconds to wait (in the message and as trailing metadata); resending a stored key
    still answers with its job; another user has a bucket of their own."""
    master = cluster.master(submit_rate_per_user=0.01, submit_burst_per_user=2)
    cluster.worker(master, "n1", num_gpus=2)
    alice = cluster.api(master, "alice", admin=False)
    bob = cluster.api(master, "bob", admin=False)
    first = submit(alice, "k1").job.id
    submit(alice, "k2")

    error = error_of(lambda: submit(alice, "k3"))
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "submit_rate_per_user" in error.details and "retry in" in error.details
    retry_after = float(error.trailing["x-hadar-retry-after-s"])
    assert 90 <= retry_after <= 100
    assert len(job_ids(alice, "alice")) == 2

    assert submit(alice, "k1").job.id == first
    submit(bob, "b1")


def test_a_submission_refused_by_the_pending_limit_costs_no_rate_token(
    cluster: Cluster,
) -> None:
    """Refused submissions give their token back: with one waiting job allowed and a burst
    of two, a refusal, a cancellation and a new submission all fit in the burst."""
    master = cluster.master(
        max_pending_jobs_per_user=1, submit_rate_per_user=0.01, submit_burst_per_user=2
    )
    cluster.worker(master, "n1", num_gpus=2)
    alice = cluster.api(master, "alice", admin=False)
    first = submit(alice, "k1").job.id
    for _ in range(3):
        assert error_of(lambda: submit(alice)).code == grpc.StatusCode.RESOURCE_EXHAUSTED
    alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=first))
    submit(alice, "k2")
    error = error_of(lambda: submit(alice, "k3"))
    assert "submit_rate_per_user" in error.details


def test_a_request_over_the_message_limit_is_refused_by_grpc(cluster: Cluster) -> None:
    """max_receive_message_bytes = 64 KiB: a 100 KiB submission gets RESOURCE_EXHAUSTED
    from gRPC before the master reads it; nothing is stored; small requests still pass."""
    master = cluster.master(max_receive_message_bytes=64 * 1024)
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    error = error_of(lambda: submit(api, env={"BIG": "x" * 100 * 1024}))
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in error.details.lower()
    assert job_ids(api, "") == []
    submit(api, env={"SMALL": "x" * 1024})
    assert len(job_ids(api, "")) == 1


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"env": {"BIG": "x" * 70_000}}, "spec.env", "at most 65536 bytes"),
        ({"env": {f"V{i}": "" for i in range(1025)}}, "spec.env", "at most 1024 allowed"),
        ({"workload": "w" * 129}, "spec.workload.name", "at most 128 characters"),
        ({"job_type": "t" * 256}, "spec.job_type", "at most 255 characters"),
        ({"workdir": "/" + "d" * 5000}, "spec.workdir", "at most 4096 bytes"),
    ],
)
def test_oversized_fields_are_refused_by_name(
    cluster: Cluster, changes: dict[str, Any], field: str, words: str
) -> None:
    """Fields over their size limits: INVALID_ARGUMENT naming the field and the limit."""
    master = cluster.master()
    api = cluster.api(master)
    error = error_of(lambda: submit(api, **changes))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details.startswith(f"{field}: "), error.details
    assert words in error.details
    assert job_ids(api, "") == []


def test_command_argv_total_size_is_limited(cluster: Cluster) -> None:
    """An opaque command's arguments: at most 64 KiB in all, and a long program name still
    gives a job type the store can hold."""
    master = cluster.master()
    api = cluster.api(master)
    request = hadar_pb2.SubmitJobRequest(
        spec=common_pb2.JobSpec(
            name="big",
            num_gpus=1,
            iterations=1,
            preemptible=False,
            command=common_pb2.CommandProgram(argv=["run.sh", *["a" * 1000] * 70]),
        )
    )
    error = error_of(lambda: api.SubmitJob(request))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details.startswith("spec.command.argv: "), error.details
    del request.spec.command.argv[1:]
    request.spec.command.argv[0] = "/opt/" + "p" * 300
    job = api.SubmitJob(request).job
    assert len(job.spec.job_type) <= 255


def test_hctl_reports_a_limit_with_its_exit_code(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """hctl submit over the pending limit: exit code 8 (limit reached) and one line that
    carries the master's message and what to do."""
    monkeypatch.setenv("HADAR_CONFIG", os.devnull)
    master = cluster.master(max_pending_jobs_per_user=1)
    cluster.worker(master, "n1", num_gpus=2)
    token = master.create_token("carol")
    argv = ["--master", master.address, "--token", token, "submit", "--workload", "resnet"]
    assert main([*argv, "--iterations", "10"]) == ExitCode.OK
    capsys.readouterr()
    assert main([*argv, "--iterations", "10"]) == ExitCode.RESOURCE_EXHAUSTED
    err = capsys.readouterr().err
    assert "limit reached: carol already has 1 job waiting" in err
    assert "hctl queue --me" in err
