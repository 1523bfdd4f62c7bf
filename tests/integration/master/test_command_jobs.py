"""Plain commands as sbatch runs them: the master's checks of their environment, amount of
work and warning signal, preemptible commands, and failures no retry can pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Cluster
from tests.integration.master.fakes import wait_for
from tests.integration.master.test_api import error_of


def command(**changes: Any) -> common_pb2.JobSpec:
    base = common_pb2.JobSpec(
        name="cmd", num_gpus=1, command=common_pb2.CommandProgram(argv=["python", "train.py"])
    )
    for key, value in changes.items():
        if key == "env":
            base.env.update(value)
        else:
            setattr(base, key, value)
    return base


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "spec.env['CUDA_VISIBLE_DEVICES']", "GPUs"),
        ({"env": {"RANK": "1"}}, "spec.env['RANK']", "torchrun"),
        ({"env": {"PWD": "/tmp"}}, "spec.env['PWD']", "--workdir"),
        ({"env": {"HADAR_JOB_ID": "7"}}, "spec.env['HADAR_JOB_ID']", "HADAR_SEED"),
        ({"env": {"HADAR_ARRAY_INDEX": "7"}}, "spec.env['HADAR_ARRAY_INDEX']", "set by Hadar"),
        ({"warn_signal": 9, "warn_before_s": 10}, "spec.warn_signal", "SIGKILL"),
        ({"warn_signal": 10}, "spec.warn_before_s", "1 to 600"),
        ({"warn_signal": 10, "warn_before_s": 601}, "spec.warn_before_s", "1 to 600"),
        ({"warn_before_s": 5}, "spec.warn_before_s", "needs a warn_signal"),
        ({"warn_signal": 999, "warn_before_s": 5}, "spec.warn_signal", "not a signal"),
    ],
)
def test_runtime_owned_variables_and_bad_warnings_are_refused(
    cluster: Cluster, changes: dict[str, object], field: str, words: str
) -> None:
    """A variable the runtime sets for each job, or a warning that cannot be sent, is
    INVALID_ARGUMENT on its field, saying why; nothing is stored."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    error = error_of(lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=command(**changes))))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details.startswith(f"{field}: "), error.details
    assert words in error.details, error.details
    assert list(api.ListJobs(hadar_pb2.ListJobsRequest()).jobs) == []


def test_a_command_with_the_users_environment_and_no_iterations_is_accepted(
    cluster: Cluster,
) -> None:
    """PATH, the runtime's settings a job may choose (HADAR_SEED) and no iterations at all
    are a command's to send; a workload still needs its iterations."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    env = {"PATH": "/home/alice/venv/bin:/usr/bin", "HADAR_SEED": "3", "LR": "0.1"}
    job = api.SubmitJob(
        hadar_pb2.SubmitJobRequest(spec=command(env=env, warn_signal=10, warn_before_s=30))
    ).job
    assert job.spec.iterations == 0
    assert dict(job.spec.env) == env
    assert (job.spec.warn_signal, job.spec.warn_before_s) == (10, 30)
    workload = common_pb2.JobSpec(
        name="w", num_gpus=1, workload=common_pb2.WorkloadProgram(name="resnet")
    )
    error = error_of(lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload)))
    assert error.details.startswith("spec.iterations: must be 1 to"), error.details


def test_a_preemptible_command_is_stopped_and_placed_again(cluster: Cluster) -> None:
    """A command submitted preemptible is no longer pinned: draining its node stops it, it
    waits PREEMPTED, and it is started again (from scratch) once GPUs are free."""
    master = cluster.master()
    first = cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    job = api.SubmitJob(
        hadar_pb2.SubmitJobRequest(spec=command(preemptible=True, warn_signal=10, warn_before_s=5))
    ).job
    assert job.spec.preemptible
    master.run_round()
    wait_for(lambda: job.id in first.running_jobs(), what="START on n1")
    api.DrainNode(hadar_pb2.DrainNodeRequest(node="n1"))
    master.run_round()
    wait_for(lambda: [s for s in first.stops if s.job_id == job.id], what="STOP on n1")
    wait_for(lambda: job.id not in first.running_jobs(), what="the stop reported")
    stopped = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert stopped.state == common_pb2.JOB_STATE_PREEMPTED, stopped.reason
    second = cluster.worker(master, "n2", num_gpus=1)
    master.run_round()
    wait_for(lambda: job.id in second.running_jobs(), what="START again on n2")
    again = [a for a in second.applied if a.job_id == job.id]
    assert again[-1].spec.warn_signal == 10 and again[-1].spec.preemptible


def test_a_contract_error_fails_the_job_without_a_retry(cluster: Cluster) -> None:
    """An attempt whose runtime refused the job's setup fails the job at once, whatever
    retries it has left, saying a retry would fail the same way; the runtime's words stay
    in the owner's failure output."""
    master = cluster.master(max_retries=3)
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    spec = common_pb2.JobSpec(
        name="ddp",
        num_gpus=1,
        iterations=10,
        script=common_pb2.ScriptProgram(argv=["python", "train.py"]),
    )
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    message = (
        "rank 0: exit code 1\nworker.runtime.settings.ContractError: HADAR_GLOBAL_BATCH_SIZE "
        "is not set: submit the job with --batch-size N"
    )
    assert worker.exit(job.id, common_pb2.EXIT_KIND_FAILED, 1, message, contract_error=True)
    failed = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert failed.state == common_pb2.JOB_STATE_FAILED, failed.reason
    assert failed.retries == 0
    assert "ContractError" in failed.reason and "not retried" in failed.reason
    assert "--batch-size" in failed.failure_output


def test_a_warned_jobs_lost_lease_is_held_its_warning_longer(cluster: Cluster) -> None:
    """A lost node's worker warns a preemptible command when its lease ends unrenewed and
    sends SIGTERM only the warning's time later: the master starts the job elsewhere only
    once that time has passed as well as the usual hold."""
    master = cluster.master(heartbeat_timeout_s=2.0)
    first = cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    job = api.SubmitJob(
        hadar_pb2.SubmitJobRequest(
            spec=command(preemptible=True, warn_signal=10, warn_before_s=300)
        )
    ).job
    master.run_round()
    wait_for(lambda: job.id in first.running_jobs(), what="START on n1")
    second = cluster.worker(master, "n2", num_gpus=1)
    second.start_heartbeats()
    before = datetime.now(UTC)

    def lost() -> bool:
        master.check_nodes(force=True)
        nodes = {n.name: n.state for n in api.ListNodes(hadar_pb2.ListNodesRequest()).nodes}
        return bool(nodes["n1"] == common_pb2.NODE_STATE_UNREACHABLE)

    wait_for(lost, what="n1 lost")
    after = datetime.now(UTC)
    hold = timedelta(seconds=master.settings.lost_lease_hold_s)
    held = master.rounds.run(now=after + hold + timedelta(seconds=5))
    assert held.started == ()
    assert "(lost) ends at" in api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job.reason
    placed = master.rounds.run(now=before + hold + timedelta(seconds=301) + (after - before))
    assert placed.started == (job.id,)
