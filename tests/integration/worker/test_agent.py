"""The real worker agent and its Worker gRPC server (port 0) against an in-process fake master,
running real subprocesses of a tiny contract-following job."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from protos.hadar.v1 import common_pb2, coordinator_pb2, worker_pb2, worker_pb2_grpc
from tests.integration.worker.fake_master import FakeMaster, eventually, worker_stub
from worker.agent.agent import WorkerAgent, settings_for_test
from worker.gpus import FakeGpuProvider

JOB_SCRIPT = Path(__file__).with_name("contract_job.py")
# The submitting user of test jobs: whoever runs the tests (so a root agent may run them).
TEST_USER = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    fake = FakeMaster().start()
    yield fake
    fake.stop()


def make_agent(master_address: str, state_dir: Path, **overrides: Any) -> WorkerAgent:
    settings = settings_for_test(master_address, state_dir, **overrides)
    return WorkerAgent(settings, FakeGpuProvider.from_spec("v100:2,k80:1"), workloads=["resnet"])


@pytest.fixture
def worker(master: FakeMaster, tmp_path: Path) -> Iterator[WorkerAgent]:
    agent = make_agent(master.address, tmp_path / "state")
    agent.start()
    yield agent
    agent.stop(grace_s=2.0)


def stub_for(agent: WorkerAgent) -> worker_pb2_grpc.WorkerStub:
    """A stub presenting the agent's cluster token."""
    return worker_stub(agent.address, agent.settings.token)


def assignment(
    job_id: int,
    lease: int,
    *,
    mode: str = "train",
    iterations: int = 1000,
    budget: int = 0,
    gpus: tuple[int, ...] = (0,),
    action: int = worker_pb2.ASSIGNMENT_ACTION_START,
    grace_s: float = 3.0,
    command: bool = False,
    env: dict[str, str] | None = None,
    **fields: object,
) -> worker_pb2.TaskAssignment:
    spec = common_pb2.JobSpec(
        name=f"job-{job_id}",
        num_gpus=len(gpus),
        iterations=iterations,
        env={"TEST_MODE": mode, **(env or {})},
    )
    argv = [sys.executable, str(JOB_SCRIPT)]
    if command:
        spec.command.argv.extend(argv)
    else:
        spec.script.argv.extend(argv)
    return worker_pb2.TaskAssignment(
        job_id=job_id,
        task_index=0,
        lease=lease,
        action=action,  # type: ignore[arg-type]
        spec=spec,
        gpu_indices=list(gpus),
        gpu_type="v100",
        iteration_budget=budget,
        grace_s=grace_s,
        user=TEST_USER,
        **fields,  # type: ignore[arg-type]
    )


def apply(
    stub: worker_pb2_grpc.WorkerStub, *assignments: worker_pb2.TaskAssignment
) -> list[worker_pb2.AssignmentResult]:
    response = stub.ApplyAssignments(
        worker_pb2.ApplyAssignmentsRequest(round=1, assignments=list(assignments)), timeout=5
    )
    return list(response.results)


def logs(
    stub: worker_pb2_grpc.WorkerStub,
    job_id: int,
    stream: common_pb2.LogStream = common_pb2.LOG_STREAM_STDOUT,
    **request: object,
) -> dict[int, bytes]:
    """One stream's output (standard output unless asked), by rank."""
    by_rank: dict[int, bytes] = {}
    start: dict[int, int] = {}
    for chunk in stub.StreamTaskLogs(
        worker_pb2.StreamTaskLogsRequest(job_id=job_id, **request),  # type: ignore[arg-type]
        timeout=10,
    ):
        if chunk.stream != stream:
            continue
        start.setdefault(chunk.rank, chunk.offset)
        expected = start[chunk.rank] + len(by_rank.get(chunk.rank, b""))
        assert chunk.offset == expected, "chunks are contiguous"
        by_rank[chunk.rank] = by_rank.get(chunk.rank, b"") + chunk.data
    return by_rank


def env_of(log: bytes) -> dict[str, str]:
    for line in log.decode().splitlines():
        if line.startswith("ENV "):
            env: dict[str, str] = json.loads(line[4:])
            return env
    raise AssertionError(f"no ENV line in {log!r}")


def test_registers_with_gpus_and_serves_status(master: FakeMaster, worker: WorkerAgent) -> None:
    """The agent registers its fake GPUs and address, heartbeats, and reports status."""
    eventually(lambda: master.registration_count() >= 1)
    registration = master.registrations[0]
    assert registration.node == "test-node"
    assert registration.address == worker.address
    assert [(g.index, g.type, g.fake) for g in registration.gpus] == [
        (0, "v100", True),
        (1, "v100", True),
        (2, "k80", True),
    ]
    assert list(registration.workloads) == ["resnet"]
    eventually(lambda: len(master.heartbeats) >= 1)
    status = stub_for(worker).GetWorkerStatus(worker_pb2.GetWorkerStatusRequest(), timeout=5)
    assert status.node == "test-node"
    assert status.connected
    assert len(status.gpus) == 3


def test_start_runs_ranks_with_contract_env_and_reports_lease_done(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """START spawns one process per GPU with torchrun and HADAR_* variables; progress is
    relayed and the end of the lease budget is reported as LEASE_DONE."""
    stub = stub_for(worker)
    a = assignment(
        7,
        3,
        iterations=100,
        budget=15,
        gpus=(0, 1),
        env={"USER_VAR": "hello"},
        rendezvous=worker_pb2.Rendezvous(
            master_addr="10.1.2.3", master_port=29999, world_size=4, rank_offset=2
        ),
        local_batch_sizes=[16, 8],
        iterations_done=5,
    )
    a.spec.batch_size = 24
    (result,) = apply(stub, a)
    assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message

    eventually(lambda: master.exits_for(7))
    (exit_report,) = master.exits_for(7)
    assert exit_report.kind == common_pb2.EXIT_KIND_LEASE_DONE
    assert exit_report.iterations_done == 20
    assert exit_report.lease == 3
    assert exit_report.node == "test-node"

    progress = master.progress_for(7)
    assert progress, "progress was relayed before the exit"
    assert all(p.lease == 3 and p.gpu_type == "v100" for p in progress)
    assert 5 < progress[-1].iterations_done <= 20
    assert [p.iterations_done for p in progress] == sorted(p.iterations_done for p in progress)

    by_rank = logs(stub, 7)
    assert sorted(by_rank) == [2, 3]
    for rank, local_rank, local_batch in ((2, 0, "16"), (3, 1, "8")):
        env = env_of(by_rank[rank])
        assert env["RANK"] == str(rank)
        assert env["LOCAL_RANK"] == str(local_rank)
        assert env["WORLD_SIZE"] == "4"
        assert env["LOCAL_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "10.1.2.3"
        assert env["MASTER_PORT"] == "29999"
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert env["HADAR_JOB_ID"] == "7"
        assert env["HADAR_LEASE"] == "3"
        assert env["HADAR_ITERATIONS"] == "100"
        assert env["HADAR_ITERATIONS_DONE"] == "5"
        assert env["HADAR_ITERATION_BUDGET"] == "15"
        assert env["HADAR_GLOBAL_BATCH_SIZE"] == "24"
        assert env["HADAR_LOCAL_BATCH_SIZE"] == local_batch
        assert float(env["HADAR_FAKE_GPU_SPEED"]) == pytest.approx(1.0 / 3.5)
        assert env["HADAR_GPU_TYPE"] == "v100"
        assert env["HADAR_DEVICE"] == "cpu"
        assert env["USER_VAR"] == "hello"
        assert env["HADAR_PROGRESS_FILE"].endswith(f"progress-rank{local_rank}.jsonl")
        assert Path(env["CWD"]) == worker.settings.resolved_jobs_dir() / "job-7"
        assert not any(k.startswith("HADAR_WORKER_") for k in env)


def test_job_that_runs_all_iterations_is_reported_completed(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """A job that reaches its total iterations writes exit/completed: COMPLETED."""
    (result,) = apply(stub_for(worker), assignment(8, 1, iterations=6, gpus=(2,)))
    assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
    eventually(lambda: master.exits_for(8))
    (report,) = master.exits_for(8)
    assert report.kind == common_pb2.EXIT_KIND_COMPLETED
    assert report.iterations_done == 6
    env = env_of(logs(stub_for(worker), 8)[0])
    assert float(env["HADAR_FAKE_GPU_SPEED"]) == pytest.approx(0.25 / 3.5)
    assert env["CUDA_VISIBLE_DEVICES"] == "2"


def test_resend_is_a_no_op_and_an_older_lease_is_stale(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """The same START twice starts one task; a START with an older lease is refused as
    STALE, also after the newer task exited."""
    stub = stub_for(worker)
    first = assignment(9, 5, iterations=8)
    assert apply(stub, first)[0].outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
    (again,) = apply(stub, first)
    assert again.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
    (older,) = apply(stub, assignment(9, 4, iterations=8))
    assert older.outcome == worker_pb2.ASSIGNMENT_OUTCOME_STALE
    assert "older than lease 5" in older.message
    eventually(lambda: master.exits_for(9))
    assert apply(stub, first)[0].outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
    assert apply(stub, assignment(9, 2))[0].outcome == worker_pb2.ASSIGNMENT_OUTCOME_STALE
    log = logs(stub, 9)[0].decode()
    assert log.count("ENV ") == 1, "the resend started nothing"
    assert len(master.exits_for(9)) == 1


def test_stop_task_checkpoints_and_is_reported_stopped(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """StopTask(checkpoint) sends SIGTERM; the job checkpoints, exits 0: STOPPED."""
    stub = stub_for(worker)
    apply(stub, assignment(10, 1, iterations=100_000))
    eventually(lambda: master.progress_for(10))
    response = stub.StopTask(
        worker_pb2.StopTaskRequest(job_id=10, checkpoint=True, grace_s=5, reason="cancel"),
        timeout=5,
    )
    assert response.was_running
    eventually(lambda: master.exits_for(10))
    (report,) = master.exits_for(10)
    assert report.kind == common_pb2.EXIT_KIND_STOPPED
    assert report.exit_code == 0
    assert report.iterations_done > 0
    again = stub.StopTask(worker_pb2.StopTaskRequest(job_id=10, checkpoint=True), timeout=5)
    assert not again.was_running


def test_process_ignoring_sigterm_is_killed_after_grace(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """A process that ignores SIGTERM is SIGKILLed after the grace period: KILLED."""
    stub = stub_for(worker)
    apply(stub, assignment(11, 1, mode="ignore_term"))
    eventually(lambda: b"ignoring SIGTERM" in logs(stub, 11).get(0, b""))
    stub.StopTask(worker_pb2.StopTaskRequest(job_id=11, checkpoint=True, grace_s=0.5), timeout=5)
    eventually(lambda: master.exits_for(11))
    (report,) = master.exits_for(11)
    assert report.kind == common_pb2.EXIT_KIND_KILLED
    assert report.signal == signal.SIGKILL
    assert not report.HasField("exit_code")


def test_failing_process_is_reported_failed_with_stderr_tail(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """A non-zero exit is FAILED with its exit code and the last lines it wrote."""
    apply(stub_for(worker), assignment(12, 1, mode="fail"))
    eventually(lambda: master.exits_for(12))
    (report,) = master.exits_for(12)
    assert report.kind == common_pb2.EXIT_KIND_FAILED
    assert report.exit_code == 3
    assert "boom, the model exploded" in report.message


def test_failing_rank_stops_the_other_ranks(master: FakeMaster, worker: WorkerAgent) -> None:
    """When one rank fails, the others are stopped and the task is FAILED (not hung)."""
    a = assignment(13, 1, gpus=(0, 1), iterations=100_000)
    # Rank 1 fails at once; rank 0 would train for a long time.
    a.spec.script.argv[:] = [
        sys.executable,
        "-c",
        "import os, runpy, sys; os.environ['TEST_MODE'] = 'fail' if os.environ['RANK'] == '1'"
        f" else 'train'; sys.argv = ['job']; runpy.run_path({str(JOB_SCRIPT)!r},"
        " run_name='__main__')",
    ]
    apply(stub_for(worker), a)
    eventually(lambda: master.exits_for(13))
    (report,) = master.exits_for(13)
    assert report.kind == common_pb2.EXIT_KIND_FAILED
    assert report.message.startswith("rank 1: exit code 3")


def test_stream_task_logs_follows_until_the_task_ends(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """StreamTaskLogs(follow) returns output as it is written and ends when the task ends;
    tail_lines starts with the last lines."""
    stub = stub_for(worker)
    apply(stub, assignment(14, 1, mode="print", command=True, env={"STEP_S": "0.01"}))
    received: list[bytes] = []
    done = threading.Event()

    def follow() -> None:
        for chunk in stub.StreamTaskLogs(
            worker_pb2.StreamTaskLogsRequest(job_id=14, follow=True), timeout=20
        ):
            received.append(chunk.data)
        done.set()

    reader = threading.Thread(target=follow)
    reader.start()
    eventually(lambda: b"line 30\n" in b"".join(received))
    assert not done.is_set(), "a follow stream stays open while the task runs"
    stub.StopTask(worker_pb2.StopTaskRequest(job_id=14, checkpoint=True, grace_s=2), timeout=5)
    assert done.wait(10), "the stream ends once the task has exited"
    reader.join()
    text = b"".join(received).decode()
    assert text.startswith("ENV ")
    assert text == logs(stub, 14)[0].decode(), "the stream saw everything, in order"
    tail = logs(stub, 14, tail_lines=2)[0].decode()
    assert tail.splitlines() == text.splitlines()[-2:]
    eventually(lambda: master.exits_for(14))
    # An opaque command terminated on request without a checkpoint.
    assert master.exits_for(14)[0].kind == common_pb2.EXIT_KIND_KILLED


def test_opaque_command_is_not_preempted_by_a_stop_assignment(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """A STOP assignment for an opaque command is refused; cancelling (StopTask) stops it."""
    stub = stub_for(worker)
    apply(stub, assignment(15, 1, mode="print", command=True, env={"STEP_S": "0.05"}))
    (result,) = apply(stub, assignment(15, 1, action=worker_pb2.ASSIGNMENT_ACTION_STOP))
    assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_FAILED
    assert "is not preemptible" in result.message
    assert worker.supervisor.is_running(15, 1)
    assert stub.StopTask(worker_pb2.StopTaskRequest(job_id=15, checkpoint=False), timeout=5)
    eventually(lambda: master.exits_for(15))
    assert master.exits_for(15)[0].kind == common_pb2.EXIT_KIND_KILLED


def test_stop_assignment_preempts_a_managed_task(master: FakeMaster, worker: WorkerAgent) -> None:
    """ASSIGNMENT_ACTION_STOP checkpoints and stops a managed task: STOPPED."""
    stub = stub_for(worker)
    apply(stub, assignment(16, 2, iterations=100_000))
    eventually(lambda: master.progress_for(16))
    (result,) = apply(stub, assignment(16, 2, action=worker_pb2.ASSIGNMENT_ACTION_STOP))
    assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
    eventually(lambda: master.exits_for(16))
    assert master.exits_for(16)[0].kind == common_pb2.EXIT_KIND_STOPPED


def test_stale_progress_ack_stops_the_task(master: FakeMaster, worker: WorkerAgent) -> None:
    """When the master answers a progress report with stale=True, the task is stopped."""
    master.stale_jobs.add(17)
    apply(stub_for(worker), assignment(17, 1, iterations=100_000))
    eventually(lambda: master.exits_for(17))
    assert master.exits_for(17)[0].kind == common_pb2.EXIT_KIND_STOPPED


def test_reregister_reports_running_tasks(master: FakeMaster, worker: WorkerAgent) -> None:
    """HeartbeatResponse.reregister makes the agent register again with its running tasks,
    which keep running."""
    apply(stub_for(worker), assignment(18, 4, iterations=100_000))
    eventually(lambda: master.progress_for(18))
    master.reregister_once = True
    eventually(lambda: master.registration_count() >= 2)
    tasks = master.registrations[-1].tasks
    assert [(t.job_id, t.lease, t.state) for t in tasks] == [(18, 4, common_pb2.TASK_STATE_RUNNING)]
    assert tasks[0].pids
    assert worker.supervisor.is_running(18, 4)


def test_master_restart_reregisters_and_stops_fenced_tasks(
    master: FakeMaster, tmp_path: Path
) -> None:
    """When the master goes away and comes back on the same address, the agent registers
    again reporting its tasks (which kept running) and stops those the master fences."""
    agent = make_agent(master.address, tmp_path / "state")
    agent.start()
    try:
        stub = stub_for(agent)
        apply(stub, assignment(20, 1, iterations=100_000))
        apply(stub, assignment(21, 1, iterations=100_000, gpus=(1,)))
        eventually(lambda: master.progress_for(20) and master.progress_for(21))
        master.stop()
        eventually(lambda: not agent.connected)
        assert agent.supervisor.is_running(20, 1) and agent.supervisor.is_running(21, 1)

        restarted = FakeMaster(port=master.port)
        restarted.register_stop = [coordinator_pb2.TaskRef(job_id=21, task_index=0, lease=1)]
        restarted.start()
        try:
            eventually(lambda: restarted.registration_count() >= 1)
            reported = {(t.job_id, t.lease) for t in restarted.registrations[0].tasks}
            assert reported == {(20, 1), (21, 1)}
            eventually(lambda: restarted.exits_for(21))
            assert restarted.exits_for(21)[0].kind == common_pb2.EXIT_KIND_STOPPED
            assert agent.supervisor.is_running(20, 1)
            assert not restarted.exits_for(20)
        finally:
            agent.stop(grace_s=2.0)
            restarted.stop()
    finally:
        agent.stop(grace_s=2.0)


def test_a_task_that_ended_while_the_master_was_away_is_registered_as_ended(
    master: FakeMaster, tmp_path: Path
) -> None:
    """A task that completes while no master answers is not among the running tasks of the
    next registration but among its ended ones (so the master does not take it for lost),
    and its exit report follows, once."""
    agent = make_agent(master.address, tmp_path / "state")
    agent.start()
    try:
        eventually(lambda: master.registration_count() >= 1)
        master.stop()
        eventually(lambda: not agent.connected)
        stub = stub_for(agent)
        apply(stub, assignment(28, 3, iterations=6))
        apply(stub, assignment(29, 1, iterations=100_000, gpus=(1,)))
        eventually(agent.pending_exits)
        assert agent.supervisor.is_running(29, 1)

        restarted = FakeMaster(port=master.port).start()
        try:
            eventually(lambda: restarted.exits_for(28))
            registration = restarted.registrations[0]
            assert [(t.job_id, t.lease) for t in registration.tasks] == [(29, 1)]
            assert [(r.job_id, r.task_index, r.lease) for r in registration.ended] == [(28, 0, 3)]
            (report,) = restarted.exits_for(28)
            assert report.kind == common_pb2.EXIT_KIND_COMPLETED
            eventually(lambda: not agent.pending_exits())
        finally:
            agent.stop(grace_s=2.0)
            restarted.stop()
    finally:
        agent.stop(grace_s=2.0)


def test_exit_reports_are_retried_until_acknowledged(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """A TaskExited that fails is kept and resent until the master takes it, exactly once."""
    master.fail_exits = 3
    apply(stub_for(worker), assignment(22, 1, mode="fail"))
    eventually(lambda: master.exits_for(22), timeout_s=15)
    assert master.exit_attempts >= 4
    assert len(master.exits_for(22)) == 1
    eventually(lambda: not worker.pending_exits())


def test_exit_report_the_master_refuses_does_not_block_later_ones(
    master: FakeMaster, worker: WorkerAgent
) -> None:
    """An exit report refused as INVALID_ARGUMENT is dropped (resending cannot help) and the
    reports after it still arrive."""
    master.reject_exit_jobs.add(25)
    stub = stub_for(worker)
    apply(stub, assignment(25, 1, mode="fail"))
    eventually(lambda: not worker.supervisor.running_keys())
    apply(stub, assignment(26, 1, mode="fail"))
    eventually(lambda: master.exits_for(26))
    assert not master.exits_for(25)
    eventually(lambda: not worker.pending_exits())
    assert worker.registrations == 1, "a refusal is an answer, not a lost connection"


def test_unsent_exit_survives_an_agent_restart(tmp_path: Path) -> None:
    """An exit the master never acknowledged is on disk; the next agent on the same state
    directory sends it."""
    down = FakeMaster().start()
    down.fail_exits = 1_000_000
    agent = make_agent(down.address, tmp_path / "state")
    agent.start()
    apply(stub_for(agent), assignment(23, 1, mode="fail"))
    eventually(agent.pending_exits)
    agent.stop(grace_s=1.0)
    down.stop()

    up = FakeMaster().start()
    again = make_agent(up.address, tmp_path / "state")
    again.start()
    try:
        eventually(lambda: up.exits_for(23))
        assert up.exits_for(23)[0].kind == common_pb2.EXIT_KIND_FAILED
    finally:
        again.stop(grace_s=1.0)
        up.stop()


def test_restarted_agent_adopts_the_task_its_predecessor_left(
    master: FakeMaster, tmp_path: Path
) -> None:
    """A task left running by an agent that died runs on under the next agent on the same
    state directory: the same process, registered with its pid, its progress relayed, and
    its completion reported exactly once."""
    agent = make_agent(master.address, tmp_path / "state")
    agent.start()
    apply(stub_for(agent), assignment(26, 1, iterations=120, env={"STEP_S": "0.04"}))
    eventually(lambda: master.progress_for(26))
    (task,) = agent.supervisor.snapshot()
    pid = task.pids[0]
    agent.stop(stop_tasks=False)
    progressed = max(r.iterations_done for r in master.progress_for(26))
    registered = master.registration_count()

    again = make_agent(master.address, tmp_path / "state")
    again.start()
    try:
        (adopted,) = again.supervisor.snapshot()
        assert list(adopted.pids) == [pid]
        eventually(lambda: master.registration_count() > registered)
        (listed,) = master.registrations[-1].tasks
        assert (listed.job_id, listed.lease, list(listed.pids)) == (26, 1, [pid])
        eventually(lambda: master.exits_for(26), timeout_s=30)
        assert max(r.iterations_done for r in master.progress_for(26)) > progressed
        heartbeats = len(master.heartbeats)
        eventually(lambda: len(master.heartbeats) >= heartbeats + 3)
        (report,) = master.exits_for(26)
        assert report.kind == common_pb2.EXIT_KIND_COMPLETED, report.message
        assert report.iterations_done == 120
        assert again.pending_exits() == []
        (resent,) = apply(stub_for(again), assignment(26, 1, iterations=120))
        assert "already ran and exited" in resent.message
    finally:
        again.stop(grace_s=1.0)


def test_adopted_task_is_stopped_on_the_masters_order(master: FakeMaster, tmp_path: Path) -> None:
    """An adopted task takes SIGTERM (to its process group) from a stop, checkpoints and is
    reported STOPPED; its log is still served."""
    agent = make_agent(master.address, tmp_path / "state")
    agent.start()
    apply(stub_for(agent), assignment(27, 1, iterations=100_000))
    eventually(lambda: master.progress_for(27))
    agent.stop(stop_tasks=False)

    again = make_agent(master.address, tmp_path / "state")
    again.start()
    try:
        stub = stub_for(again)
        stop = assignment(27, 2, action=worker_pb2.ASSIGNMENT_ACTION_STOP)
        (result,) = apply(stub, stop)
        assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message
        eventually(lambda: master.exits_for(27))
        (report,) = master.exits_for(27)
        assert report.kind == common_pb2.EXIT_KIND_STOPPED, report.message
        assert report.iterations_done > 0
        assert "ENV " in logs(stub, 27)[0].decode()
    finally:
        again.stop(grace_s=1.0)


def test_restarted_agent_stops_tasks_its_predecessor_left(
    master: FakeMaster, tmp_path: Path
) -> None:
    """Without adopt_on_restart, processes left by an agent that died are asked to
    checkpoint and reported by the next agent, so the master can place the job again."""
    agent = make_agent(master.address, tmp_path / "state")
    agent.start()
    apply(stub_for(agent), assignment(24, 1, iterations=100_000))
    eventually(lambda: master.progress_for(24))
    pid = agent.supervisor.snapshot()[0].pids[0]
    agent.stop(stop_tasks=False)

    again = make_agent(master.address, tmp_path / "state", adopt_on_restart=False)
    again.start()
    try:
        eventually(lambda: master.exits_for(24))
        (report,) = master.exits_for(24)
        assert report.kind == common_pb2.EXIT_KIND_STOPPED, report.message
        assert report.iterations_done > 0
        (resent,) = apply(stub_for(again), assignment(24, 1, iterations=100_000))
        assert "already ran and exited" in resent.message
        assert again.supervisor.running_keys() == []
        assert (
            not Path(f"/proc/{pid}/status").exists()
            or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )
    finally:
        again.stop(grace_s=1.0)


def test_calls_without_the_cluster_token_are_refused(tmp_path: Path) -> None:
    """The worker refuses calls without its cluster token or with another one, and sends it
    to the master."""
    fake = FakeMaster(token="s3cret").start()
    agent = make_agent(fake.address, tmp_path / "state", token="s3cret")
    agent.start()
    try:
        eventually(lambda: fake.registration_count() >= 1)
        stub = worker_pb2_grpc.WorkerStub(  # type: ignore[no-untyped-call]
            grpc.insecure_channel(agent.address)
        )
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetWorkerStatus(worker_pb2.GetWorkerStatusRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as wrong:
            list(
                stub.StreamTaskLogs(
                    worker_pb2.StreamTaskLogsRequest(job_id=1),
                    metadata=(("authorization", "Bearer nope"),),
                    timeout=5,
                )
            )
        assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED
        status = stub.GetWorkerStatus(
            worker_pb2.GetWorkerStatusRequest(),
            metadata=(("authorization", "Bearer s3cret"),),
            timeout=5,
        )
        assert status.node == "test-node"
    finally:
        agent.stop(grace_s=1.0)
        fake.stop()


def test_registers_with_a_tls_master_trusting_its_ca(tmp_path: Path) -> None:
    """With master_ca_file the agent talks TLS to the master and verifies its certificate."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out", str(cert),
            "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    fake = FakeMaster(tls=(key.read_bytes(), cert.read_bytes())).start()
    agent = make_agent(fake.address, tmp_path / "state", master_ca_file=cert)
    agent.start()
    try:
        eventually(lambda: fake.registration_count() >= 1)
        assert agent.connected
    finally:
        agent.stop(grace_s=1.0)
        fake.stop()


def test_bad_assignments_fail_with_a_reason(master: FakeMaster, worker: WorkerAgent) -> None:
    """Unknown GPU, unknown workload, missing program: FAILED with a message, nothing runs."""
    stub = stub_for(worker)
    bad_gpu = assignment(30, 1, gpus=(7,))
    unknown_workload = assignment(31, 1)
    unknown_workload.spec.workload.name = "nope"
    no_program = assignment(32, 1)
    no_program.spec.ClearField("script")
    results = apply(stub, bad_gpu, unknown_workload, no_program)
    assert [r.outcome for r in results] == [worker_pb2.ASSIGNMENT_OUTCOME_FAILED] * 3
    assert "GPU 7 does not exist" in results[0].message
    assert "workload 'nope' is not available" in results[1].message
    assert "no job spec with a program" in results[2].message
    assert worker.supervisor.running_keys() == []


def test_a_malformed_assignment_fails_alone(master: FakeMaster, worker: WorkerAgent) -> None:
    """A malformed assignment (no job id, a relative checkpoint directory) gets FAILED naming
    its field; the well-formed one in the same call still starts."""
    stub = stub_for(worker)
    relative = assignment(34, 1)
    relative.checkpoint_dir = "relative/dir"
    good = assignment(35, 1)
    results = apply(stub, assignment(0, 1), relative, good)
    assert [r.outcome for r in results] == [
        worker_pb2.ASSIGNMENT_OUTCOME_FAILED,
        worker_pb2.ASSIGNMENT_OUTCOME_FAILED,
        worker_pb2.ASSIGNMENT_OUTCOME_APPLIED,
    ]
    assert "assignments[0].job_id: must be set" in results[0].message
    assert "assignments[1].checkpoint_dir: must be an absolute path" in results[1].message
    assert [(r.job_id, r.lease) for r in results] == [(0, 1), (34, 1), (35, 1)]
    eventually(
        lambda: any(k[0] == 35 for k in worker.supervisor.running_keys()) or master.exits_for(35)
    )
    assert all(k[0] == 35 for k in worker.supervisor.running_keys())
    assert master.exits_for(0) == [] and master.exits_for(34) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as another user needs root")
def test_root_agent_runs_jobs_as_the_submitting_user(master: FakeMaster, shared_dir: Path) -> None:
    """As root, the agent runs the job as its submitting Unix user (in a working directory
    it owns, without the agent's privileges or a job-set LD_PRELOAD in the root step), and
    refuses a user that does not exist on the node."""
    agent = make_agent(master.address, shared_dir / "state")
    agent.start()
    try:
        stub = stub_for(agent)
        a = assignment(40, 1, command=True, iterations=1, env={"LD_PRELOAD": "/nonexistent.so"})
        a.user = "nobody"
        a.spec.command.argv[:] = [
            "/usr/bin/python3",
            "-c",
            "import os; print('uid', os.getuid(), os.getgid(), os.environ['USER'],"
            " os.getcwd(), os.environ['LD_PRELOAD'], flush=True)",
        ]
        (result,) = apply(stub, a)
        assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message
        eventually(lambda: master.exits_for(40))
        report = master.exits_for(40)[0]
        assert report.kind == common_pb2.EXIT_KIND_COMPLETED, report.message
        entry = pwd.getpwnam("nobody")
        workdir = agent.settings.resolved_jobs_dir() / "job-40"
        output = logs(stub, 40)[0].decode()
        assert f"uid {entry.pw_uid} {entry.pw_gid} nobody {workdir} /nonexistent.so" in output
        assert workdir.stat().st_uid == entry.pw_uid

        stranger = assignment(41, 1)
        stranger.user = "no-such-user-here"
        (refused,) = apply(stub, stranger)
        assert refused.outcome == worker_pb2.ASSIGNMENT_OUTCOME_FAILED
        assert "no Unix user 'no-such-user-here'" in refused.message
    finally:
        agent.stop(grace_s=2.0)


def test_checkpoint_dir_is_made_only_where_the_submitter_could_make_it(
    master: FakeMaster, shared_dir: Path
) -> None:
    """A job's checkpoint_dir is made with its user's rights (as root: the user `nobody`):
    under a directory the user cannot write, or through a symbolic link, the start fails
    naming checkpoint_dir and the reason, and nothing is made or handed to the user; where
    the user may create it, it is made, is the user's, and the job writes in it."""
    name = "nobody" if os.geteuid() == 0 else TEST_USER
    entry = pwd.getpwnam(name)
    locked = shared_dir / "locked"
    locked.mkdir()
    # Root's and 0755 when the user is nobody; the test user's own but read-only otherwise.
    locked.chmod(0o755 if os.geteuid() == 0 else 0o555)
    victim = shared_dir / "victim"
    victim.mkdir(mode=0o755)
    home = shared_dir / "home"
    home.mkdir(mode=0o755)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    (home / "link").symlink_to(victim)
    agent = make_agent(master.address, shared_dir / "state")
    agent.start()
    try:
        stub = stub_for(agent)

        def start(job_id: int, checkpoint_dir: Path) -> worker_pb2.AssignmentResult:
            a = assignment(
                job_id, 1, command=True, iterations=1, checkpoint_dir=str(checkpoint_dir)
            )
            a.user = name
            a.spec.checkpoint_dir = str(checkpoint_dir)
            a.spec.command.argv[:] = [
                "/usr/bin/python3",
                "-c",
                "import os, pathlib\n"
                "(pathlib.Path(os.environ['HADAR_CHECKPOINT_DIR']) / 'ckpt').write_text('x')\n",
            ]
            (result,) = apply(stub, a)
            return result

        refused = start(50, locked / "ckpt" / "run")
        assert refused.outcome == worker_pb2.ASSIGNMENT_OUTCOME_FAILED
        assert "checkpoint_dir: cannot create" in refused.message, refused.message
        assert "Permission denied" in refused.message
        assert list(locked.iterdir()) == []

        linked = start(51, home / "link" / "ckpt")
        assert linked.outcome == worker_pb2.ASSIGNMENT_OUTCOME_FAILED
        assert "is a symbolic link" in linked.message, linked.message
        assert list(victim.iterdir()) == []
        assert victim.stat().st_uid == os.geteuid()

        made = start(52, home / "runs" / "ckpt")
        assert made.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, made.message
        eventually(lambda: master.exits_for(52))
        report = master.exits_for(52)[0]
        assert report.kind == common_pb2.EXIT_KIND_COMPLETED, report.message
        for path in (home / "runs", home / "runs" / "ckpt", home / "runs" / "ckpt" / "ckpt"):
            assert path.stat().st_uid == entry.pw_uid, path
        assert agent.supervisor.running_keys() == []
    finally:
        agent.stop(grace_s=2.0)


@pytest.fixture
def unix_user() -> Iterator[tuple[str, str]]:
    """A real Unix user (no home) with its own primary group and one supplementary group;
    removed afterwards. Yields (user, supplementary group)."""
    if os.geteuid() != 0:
        pytest.skip("creating a Unix user needs root")
    if not all(shutil.which(tool) for tool in ("useradd", "groupadd", "userdel", "groupdel")):
        pytest.skip("useradd/groupadd are not installed")
    suffix = uuid.uuid4().hex[:8]
    user, primary, extra = f"hadar-u{suffix}", f"hadar-p{suffix}", f"hadar-s{suffix}"
    created: list[list[str]] = []
    try:
        for group in (primary, extra):
            subprocess.run(["groupadd", group], check=True, capture_output=True)
            created.append(["groupdel", group])
        subprocess.run(
            ["useradd", "-M", "-s", "/usr/sbin/nologin", "-g", primary, "-G", extra, user],
            check=True,
            capture_output=True,
        )
        created.append(["userdel", user])
        yield user, extra
    finally:
        for command in reversed(created):
            subprocess.run(command, check=False, capture_output=True)


def test_root_agent_runs_jobs_as_a_real_user_with_its_groups(
    master: FakeMaster, shared_dir: Path, unix_user: tuple[str, str]
) -> None:
    """As root, a job runs with its user's uid, primary gid and supplementary groups, and the
    working and checkpoint directories the agent makes for it are that user's (the job can
    write in both); a job submitted as root is refused unless allow_root_jobs is set."""
    name, extra_group = unix_user
    entry = pwd.getpwnam(name)
    extra_gid = grp.getgrnam(extra_group).gr_gid
    agent = make_agent(master.address, shared_dir / "state", allow_root_jobs=False)
    agent.start()
    try:
        stub = stub_for(agent)
        a = assignment(42, 1, command=True, iterations=1)
        a.user = name
        a.spec.command.argv[:] = [
            "/usr/bin/python3",
            "-c",
            "import os, pathlib\n"
            "print('ids', os.getuid(), os.getgid(), sorted(os.getgroups()), flush=True)\n"
            "pathlib.Path('made-by-job').write_text('x')\n"
            "(pathlib.Path(os.environ['HADAR_CHECKPOINT_DIR']) / 'ckpt').write_text('x')\n",
        ]
        (result,) = apply(stub, a)
        assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message
        eventually(lambda: master.exits_for(42))
        report = master.exits_for(42)[0]
        assert report.kind == common_pb2.EXIT_KIND_COMPLETED, report.message
        output = logs(stub, 42)[0].decode()
        groups = sorted({entry.pw_gid, extra_gid})
        assert f"ids {entry.pw_uid} {entry.pw_gid} {groups}" in output, output
        workdir = agent.settings.resolved_jobs_dir() / "job-42"
        checkpoints = agent.settings.resolved_checkpoint_dir() / "job-42"
        for path in (workdir, checkpoints, workdir / "made-by-job", checkpoints / "ckpt"):
            owner = path.stat()
            assert (owner.st_uid, owner.st_gid) == (entry.pw_uid, entry.pw_gid), path

        as_root = assignment(43, 1)
        as_root.user = "root"
        (refused,) = apply(stub, as_root)
        assert refused.outcome == worker_pb2.ASSIGNMENT_OUTCOME_FAILED
        assert "allow_root_jobs" in refused.message
    finally:
        agent.stop(grace_s=2.0)
