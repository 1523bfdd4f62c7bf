"""Protobuf messages convert to plain values and back without loss."""

from __future__ import annotations

from datetime import UTC, datetime

from clients import convert
from clients.types import JobSpec, JobState, Program, ProgramKind
from protos.hadar.v1 import common_pb2, hadar_pb2


def test_specs_round_trip_through_protobuf():
    """Every field, the program kind and an explicit preemptible survive the trip."""
    for program in (
        Program.builtin("resnet"),
        Program.script(["python", "t.py"]),
        Program.command(["ls"]),
    ):
        spec = JobSpec(
            "n",
            program,
            iterations=10,
            num_gpus=2,
            batch_size=64,
            priority=2.5,
            allowed_gpu_types=("v100",),
            preemptible=False,
            shareable=True,
            env={"A": "1"},
            workdir="/w",
            checkpoint_dir="/c",
            job_type="t",
            gpu_memory_bytes=5,
            max_retries=0,
        )
        assert convert.spec_from_proto(convert.spec_to_proto(spec)) == spec


def test_unset_preemptible_stays_unset_and_priority_zero_means_one():
    """The master's defaults are not overwritten by the client."""
    message = convert.spec_to_proto(JobSpec("n", Program.builtin("x"), iterations=1))
    assert not message.HasField("preemptible")
    assert not message.HasField("max_retries")
    message.priority = 0
    assert convert.spec_from_proto(message).priority == 1.0


def test_jobs_convert_with_absent_timestamps_as_none():
    """A pending job has no start time; states map to the client's enum."""
    message = common_pb2.Job(id=3, user="bob", state=common_pb2.JOB_STATE_PREEMPTED)
    message.spec.workload.name = "lstm"
    message.submitted_at.FromDatetime(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    message.exit_code = 0
    job = convert.job(message)
    assert job.state is JobState.PREEMPTED
    assert job.submitted_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert job.started_at is None
    assert job.exit_code == 0
    assert job.spec.program.kind is ProgramKind.WORKLOAD
    assert convert.job(common_pb2.Job(id=4)).exit_code is None


def test_cluster_status_without_a_round_has_no_last_round():
    """Before the first round, last_round is None rather than round 0."""
    response = hadar_pb2.GetClusterStatusResponse(
        jobs=[hadar_pb2.JobStateCount(state=common_pb2.JOB_STATE_PENDING, count=2)]
    )
    status = convert.cluster_status(response)
    assert status.last_round is None
    assert status.queue_length == 2
    assert convert.job_state_number(JobState.CANCELLED) == common_pb2.JOB_STATE_CANCELLED
