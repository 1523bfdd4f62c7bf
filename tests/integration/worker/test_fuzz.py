"""Malformed and extreme requests against a real worker agent (port 0, fake GPUs, the cluster
token): every call of the Worker service is answered or refused with a specific status
(INVALID_ARGUMENT naming its field, NOT_FOUND, ...), never UNKNOWN or INTERNAL, and the agent
keeps serving. A malformed assignment fails alone (FAILED naming its field) and starts no
process; a refused StopTask signals nothing.

Processes are real but harmless: the launcher runs ``sh -c 'exec sleep'`` with the job's
argv as ignored arguments and the job's own environment and working directory, so whatever
the operating system would refuse in a real job's argv, environment or directory is refused
here too. The test runs in its own working directory, so relative paths land there."""

from __future__ import annotations

import os
import pwd
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos.hadar.v1 import common_pb2, worker_pb2
from tests.integration.master.protostrategies import around, of
from tests.integration.rpcs import bearer, call
from tests.integration.worker.fake_master import FakeMaster, eventually
from worker.agent.agent import WorkerAgent, settings_for_test
from worker.agent.processes import ProcessHandle, ProcessSpec, RunAs, SubprocessLauncher
from worker.gpus import FakeGpuProvider

WORKER = worker_pb2.DESCRIPTOR.services_by_name["Worker"]
EXAMPLES = int(os.environ.get("HADAR_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
Code = grpc.StatusCode
# Served, refused naming a field, or too large for gRPC to take at all.
ALLOWED = frozenset({Code.OK, Code.INVALID_ARGUMENT, Code.RESOURCE_EXHAUSTED})
# Logs may name a job or rank this node does not have; a follow of a task that writes no
# log waits out the short deadline.
LOGS_ALLOWED = ALLOWED | {Code.NOT_FOUND, Code.DEADLINE_EXCEEDED}
USER = pwd.getpwuid(os.geteuid()).pw_name
FIELD = re.compile(r"^[a-z_]+(\[\d+\])?(\.[a-z_]+)*: ")


class SleepLauncher:
    """Launches ``sh -c 'exec sleep 300'`` in place of the job, handing the real launcher
    the job's argv (as arguments sh ignores), environment, directory and user."""

    def __init__(self) -> None:
        self._real = SubprocessLauncher()
        self._lock = threading.Lock()
        self.launched: list[ProcessHandle] = []

    def launch(self, spec: ProcessSpec) -> ProcessHandle:
        harmless = ["/bin/sh", "-c", "exec sleep 300", "fuzz", *spec.argv]
        handle = self._real.launch(replace(spec, argv=harmless))
        with self._lock:
            self.launched.append(handle)
        return handle

    def make_directory(self, path: Path, run_as: RunAs | None) -> None:
        self._real.make_directory(path, run_as)

    def count(self) -> int:
        with self._lock:
            return len(self.launched)

    def kill_all(self) -> None:
        with self._lock:
            for handle in self.launched:
                handle.signal_group(9)


@dataclass
class Target:
    agent: WorkerAgent
    launcher: SleepLauncher
    channel: grpc.Channel

    def call(
        self,
        method: str,
        request: Message,
        allowed: frozenset[Code] = ALLOWED,
        timeout: float = 30.0,
    ) -> tuple[Code, Any]:
        """Sends `request` with the cluster token (a streamed answer is read up to its first
        message); checks the status is allowed and that INVALID_ARGUMENT names a field.
        Returns the status and the response (None for a stream or an error)."""
        outcome = call(
            self.channel,
            WORKER.methods_by_name[method],
            request,
            bearer(self.agent.settings.token),
            timeout,
        )
        code, details = outcome.code, outcome.details
        assert code in allowed, f"{method}: {code.name} {details!r} for {_brief(request)}"
        if code is Code.INVALID_ARGUMENT:
            assert FIELD.match(details), f"{method}: no field named in {details!r}"
        return code, outcome.response

    def table(self) -> list[tuple[int, int, int, int, tuple[int, ...]]]:
        """The agent's task table: (job, task, lease, state, GPUs) of every task."""
        return sorted(
            (t.job_id, t.task_index, t.lease, t.state, tuple(t.gpu_indices))
            for t in self.agent.supervisor.snapshot()
        )

    def settled_table(self) -> list[tuple[int, int, int, int, tuple[int, ...]]]:
        """The task table once every task runs: stopping ones have exited and waiting ones
        started, so nothing changes it but a call (the fake jobs sleep for minutes)."""
        running = common_pb2.TASK_STATE_RUNNING
        eventually(lambda: all(state == running for _, _, _, state, _ in self.table()))
        return self.table()

    def assert_serving(self) -> None:
        code, status = self.call("GetWorkerStatus", worker_pb2.GetWorkerStatusRequest())
        assert code is Code.OK
        assert status.node == self.agent.node
        assert len(status.gpus) == 3
        # The supervision loop still runs (it is what the systemd watchdog watches).
        eventually(lambda: time.monotonic() - self.agent.supervised_at < 1.0)


def _brief(request: Message) -> str:
    text = str(request)
    return text if len(text) < 600 else text[:600] + "..."


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)
    master = FakeMaster().start()
    launcher = SleepLauncher()
    agent = WorkerAgent(
        settings_for_test(master.address, tmp_path / "state", grace_s=1.0),
        FakeGpuProvider.from_spec("v100:2,k80:1"),
        launcher=launcher,
        workloads=["resnet"],
    )
    agent.start()
    channel = grpc.insecure_channel(agent.address)
    try:
        eventually(lambda: master.registration_count() >= 1)
        yield Target(agent, launcher, channel)
    finally:
        channel.close()
        agent.stop(grace_s=1.0)
        launcher.kill_all()
        master.stop()


def start(job_id: int, lease: int = 1, **fields: Any) -> worker_pb2.TaskAssignment:
    """A valid START of a one-GPU script job."""
    spec = common_pb2.JobSpec(name=f"job-{job_id}", num_gpus=1, iterations=10)
    spec.script.argv.extend([sys.executable, "job.py"])
    values: dict[str, Any] = {
        "job_id": job_id,
        "task_index": 0,
        "lease": lease,
        "action": worker_pb2.ASSIGNMENT_ACTION_START,
        "spec": spec,
        "gpu_indices": [0],
        "gpu_type": "v100",
        "grace_s": 1.0,
        "user": USER,
    }
    values.update(fields)
    return worker_pb2.TaskAssignment(**values)


def found_assignments() -> list[worker_pb2.TaskAssignment]:
    """Assignments that once crashed the agent or reached outside its directories; each is
    refused (FAILED, or the call INVALID_ARGUMENT)."""
    with_env = start(9001)
    with_env.spec.env["A=B"] = "x"
    nul_env = start(9002)
    nul_env.spec.env["A"] = "x\0y"
    nul_argv = start(9003)
    nul_argv.spec.script.argv.append("a\0b")
    return [
        start(9004, user="a\0b"),
        start(9005, checkpoint_dir="a\0b"),
        start(9006, checkpoint_dir="relative/dir"),
        start(9007, grace_s=float("nan")),
        start(9008, grace_s=float("inf")),
        start(9009, grace_s=-1.0),
        with_env,
        nul_env,
        nul_argv,
        start(9010, spec=common_pb2.JobSpec(name="x", checkpoint_dir="\0", script={"argv": ["x"]})),
        start(9011, spec=common_pb2.JobSpec(name="x", workdir="\0", script={"argv": ["x"]})),
    ]


def apply_and_check(target: Target, request: worker_pb2.ApplyAssignmentsRequest) -> Code:
    """Applies `request`; a refused call or assignment starts nothing and leaves the table."""
    before, launched = target.settled_table(), target.launcher.count()
    code, response = target.call("ApplyAssignments", request)
    after, now_launched = target.table(), target.launcher.count()
    if code is not Code.OK:
        assert (after, now_launched) == (before, launched), "a refused call changed tasks"
        return code
    applied = [r for r in response.results if r.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED]
    if not applied:
        assert (after, now_launched) == (before, launched), (
            f"refused assignments changed tasks: {list(response.results)}"
        )
    # Whatever is new in the table was applied.
    applied_keys = {(r.job_id, r.lease) for r in applied}
    new = {(job, lease) for job, _, lease, _, _ in after} - {(j, le) for j, _, le, _, _ in before}
    assert new <= applied_keys, (new, applied_keys)
    return code


def test_apply_assignments_survives_malformed_requests(target: Target) -> None:
    """Fuzzed assignments are applied or refused; a refusal changes nothing. Each malformed
    assignment found so far gets FAILED naming its problem, not a refused call."""
    for assignment in found_assignments():
        request = worker_pb2.ApplyAssignmentsRequest(round=1, assignments=[assignment])
        before, launched = target.settled_table(), target.launcher.count()
        code, response = target.call("ApplyAssignments", request)
        assert code is Code.OK, assignment
        (result,) = response.results
        assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_FAILED, (assignment, result)
        assert result.message, assignment
        assert (target.table(), target.launcher.count()) == (before, launched), assignment
    seen: dict[str, int] = {}

    @FUZZ
    @given(
        request=st.one_of(
            of(worker_pb2.ApplyAssignmentsRequest),
            around(worker_pb2.ApplyAssignmentsRequest(round=1, assignments=[start(1)])),
            around(start(2)).map(
                lambda a: worker_pb2.ApplyAssignmentsRequest(round=2, assignments=[a])
            ),
        )
    )
    def send(request: worker_pb2.ApplyAssignmentsRequest) -> None:
        # One random high master epoch would fence every later example (test_fencing.py
        # covers epochs); the fuzzing here is of the orders themselves.
        request.master_epoch = 0
        # Nor may an earlier example's task stop on its own mid-check: a fuzzed lease end a
        # moment away stops it while a later example is compared (leases have their own
        # tests).
        for assignment in request.assignments:
            assignment.ClearField("lease_expires_at")
        code = apply_and_check(target, request)
        seen[code.name] = seen.get(code.name, 0) + 1

    send()
    assert seen.get("OK", 0) > 0, seen
    target.assert_serving()


def test_stop_task_survives_malformed_requests(target: Target) -> None:
    """Fuzzed stops are answered or refused; a refused stop signals no task."""
    code, response = target.call(
        "ApplyAssignments", worker_pb2.ApplyAssignmentsRequest(assignments=[start(7)])
    )
    assert response.results[0].outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
    for request in (
        worker_pb2.StopTaskRequest(job_id=7, grace_s=float("nan")),
        worker_pb2.StopTaskRequest(job_id=7, grace_s=float("inf")),
        worker_pb2.StopTaskRequest(job_id=7, grace_s=-1.0),
        worker_pb2.StopTaskRequest(job_id=0),
    ):
        before = target.settled_table()
        code, _ = target.call("StopTask", request)
        assert code is Code.INVALID_ARGUMENT, request
        assert target.table() == before

    @FUZZ
    @given(
        request=st.one_of(
            of(worker_pb2.StopTaskRequest),
            around(worker_pb2.StopTaskRequest(job_id=7, lease=1, checkpoint=True, grace_s=1)),
        )
    )
    def send(request: worker_pb2.StopTaskRequest) -> None:
        request.master_epoch = 0  # as for ApplyAssignments above
        before = target.settled_table()
        code, _ = target.call("StopTask", request)
        if code is not Code.OK:
            assert target.table() == before

    send()
    target.assert_serving()


def test_stream_task_logs_survives_malformed_requests(target: Target) -> None:
    """Fuzzed log requests get logs, NOT_FOUND or a named field, never a crash."""
    target.call("ApplyAssignments", worker_pb2.ApplyAssignmentsRequest(assignments=[start(5)]))

    @settings(FUZZ, max_examples=max(10, EXAMPLES // 2))
    @given(
        request=st.one_of(
            of(worker_pb2.StreamTaskLogsRequest),
            around(worker_pb2.StreamTaskLogsRequest(job_id=5)),
        )
    )
    def send(request: worker_pb2.StreamTaskLogsRequest) -> None:
        target.call("StreamTaskLogs", request, LOGS_ALLOWED, timeout=0.5)

    for request in (
        worker_pb2.StreamTaskLogsRequest(job_id=5, offset=2**64 - 1),
        worker_pb2.StreamTaskLogsRequest(job_id=5, tail_lines=2**32 - 1),
        worker_pb2.StreamTaskLogsRequest(job_id=5, rank=2**32 - 1),
        worker_pb2.StreamTaskLogsRequest(job_id=2**64 - 1),
    ):
        target.call("StreamTaskLogs", request, LOGS_ALLOWED, timeout=2)
    send()
    target.assert_serving()


# A terminal may be asked of a job this node does not run, or of one that is no session.
ATTACH_ALLOWED = LOGS_ALLOWED | {Code.FAILED_PRECONDITION}


def test_attach_task_survives_malformed_requests(target: Target) -> None:
    """Fuzzed terminal input (the first message names the job and lease; bytes; window
    sizes at both ends of their range) is answered or refused, never a crash, and starts
    nothing."""
    target.call("ApplyAssignments", worker_pb2.ApplyAssignmentsRequest(assignments=[start(6)]))
    launched = target.launcher.count()

    @settings(FUZZ, max_examples=max(10, EXAMPLES // 2))
    @given(
        request=st.one_of(
            of(common_pb2.TerminalInput),
            around(common_pb2.TerminalInput(job_id=6, lease=1)),
        )
    )
    def send(request: common_pb2.TerminalInput) -> None:
        target.call("AttachTask", request, ATTACH_ALLOWED, timeout=0.5)

    for request in (
        common_pb2.TerminalInput(job_id=2**64 - 1, lease=2**64 - 1),
        common_pb2.TerminalInput(
            job_id=6, lease=1, size=common_pb2.WindowSize(rows=2**32 - 1, cols=2**32 - 1)
        ),
        common_pb2.TerminalInput(job_id=6, lease=1, data=b"\x00" * 65536),
    ):
        target.call("AttachTask", request, ATTACH_ALLOWED, timeout=2)
    send()
    assert target.launcher.count() == launched
    target.assert_serving()


def test_get_worker_status_and_every_method_are_covered(target: Target) -> None:
    """Every Worker RPC has a fuzz test here; the status call answers throughout."""
    assert {m.name for m in WORKER.methods} == {
        "ApplyAssignments",
        "StopTask",
        "StreamTaskLogs",
        "AttachTask",
        "GetWorkerStatus",
    }
    for _ in range(3):
        target.assert_serving()
