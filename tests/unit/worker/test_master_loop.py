"""The agent's master loop against an in-memory MasterClient: registration retries with
exponential backoff and jitter, and the interval the master asks for."""

from __future__ import annotations

import getpass
import threading
import time
from pathlib import Path

import grpc

from protos.hadar.v1 import common_pb2, coordinator_pb2, worker_pb2
from worker.agent.agent import WorkerAgent, settings_for_test
from worker.agent.master import MasterError
from worker.agent.processes import FakeLauncher
from worker.gpus import FakeGpuProvider


class MemoryMaster:
    """A MasterClient that refuses registration `failures` times, then accepts."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.lock = threading.Lock()
        self.register_times: list[float] = []
        self.heartbeats = 0

    def register(
        self, request: coordinator_pb2.RegisterWorkerRequest
    ) -> coordinator_pb2.RegisterWorkerResponse:
        with self.lock:
            self.register_times.append(time.monotonic())
            if self.failures > 0:
                self.failures -= 1
                raise MasterError("down", grpc.StatusCode.UNAVAILABLE)
        return coordinator_pb2.RegisterWorkerResponse(heartbeat_interval_s=0.05)

    def heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest
    ) -> coordinator_pb2.HeartbeatResponse:
        with self.lock:
            self.heartbeats += 1
        return coordinator_pb2.HeartbeatResponse(heartbeat_interval_s=0.05)

    def report_progress(
        self, request: coordinator_pb2.ReportProgressRequest
    ) -> coordinator_pb2.ReportProgressResponse:
        return coordinator_pb2.ReportProgressResponse()

    def task_exited(
        self, request: coordinator_pb2.TaskExitedRequest
    ) -> coordinator_pb2.TaskExitedResponse:
        return coordinator_pb2.TaskExitedResponse(accepted=True)

    def report_profile(
        self, request: coordinator_pb2.ReportProfileRequest
    ) -> coordinator_pb2.ReportProfileResponse:
        return coordinator_pb2.ReportProfileResponse()

    def close(self) -> None:
        pass


class RecordingRandom:
    """Jitter factors in order, recorded, instead of random ones."""

    def __init__(self, factors: list[float]) -> None:
        self.factors = factors
        self.calls: list[tuple[float, float]] = []

    def uniform(self, low: float, high: float) -> float:
        self.calls.append((low, high))
        return self.factors[len(self.calls) - 1]


def test_registration_backs_off_exponentially_with_jitter(tmp_path: Path) -> None:
    """Failed registrations are retried after 0.05, 0.1, 0.2, 0.4 s (doubling up to the cap),
    each scaled by a jitter factor drawn from [0.5, 1.5); then the master's heartbeat
    interval is used."""
    master = MemoryMaster(failures=5)
    jitter = RecordingRandom([1.0, 1.5, 0.5, 1.0, 1.0])
    settings = settings_for_test(
        "127.0.0.1:1",
        tmp_path,
        register_backoff_initial_s=0.05,
        register_backoff_max_s=0.4,
    )
    agent = WorkerAgent(
        settings,
        FakeGpuProvider.from_spec("v100:1"),
        master=master,
        launcher=FakeLauncher(),
        workloads=[],
        rng=jitter,
    )
    agent.start()
    try:
        assert agent.wait_registered(10)
        deadline = time.monotonic() + 10
        while master.heartbeats < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert master.heartbeats >= 3, "heartbeats follow at the master's 0.05 s interval"
    finally:
        agent.stop()
    assert jitter.calls == [(0.5, 1.5)] * 5
    expected = [0.05 * 1.0, 0.1 * 1.5, 0.2 * 0.5, 0.4 * 1.0, 0.4 * 1.0]
    gaps = [b - a for a, b in zip(master.register_times, master.register_times[1:], strict=False)]
    assert len(gaps) == 5
    for gap, delay in zip(gaps, expected, strict=True):
        assert gap >= delay * 0.95, (gaps, expected)
    assert agent.backoffs == [], "a successful registration resets the backoff"


class BusyMaster(MemoryMaster):
    """Refuses exit reports as busy `refusals` times, then records them."""

    def __init__(self, refusals: int) -> None:
        super().__init__(failures=0)
        self.refusals = refusals
        self.exits: list[coordinator_pb2.TaskExitedRequest] = []

    def task_exited(
        self, request: coordinator_pb2.TaskExitedRequest
    ) -> coordinator_pb2.TaskExitedResponse:
        with self.lock:
            if self.refusals > 0:
                self.refusals -= 1
                raise MasterError("busy", grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.exits.append(request)
        return coordinator_pb2.TaskExitedResponse(accepted=True)


def test_a_busy_masters_refused_exit_report_is_sent_again_and_the_agent_stays_registered(
    tmp_path: Path,
) -> None:
    """The master refuses a task's exit report as busy (its cap on reports in flight) three
    times: the agent keeps the report and sends it again until it is taken, registering
    once and heartbeating throughout (a busy master is not a lost one)."""
    master = BusyMaster(refusals=3)
    launcher = FakeLauncher()
    agent = WorkerAgent(
        settings_for_test("127.0.0.1:1", tmp_path),
        FakeGpuProvider.from_spec("v100:1"),
        master=master,
        launcher=launcher,
        workloads=["resnet"],
    )
    agent.start()
    try:
        assert agent.wait_registered(10)
        spec = common_pb2.JobSpec(name="j", num_gpus=1, iterations=100)
        spec.workload.name = "resnet"
        assignment = worker_pb2.TaskAssignment(
            job_id=1,
            lease=1,
            action=worker_pb2.ASSIGNMENT_ACTION_START,
            spec=spec,
            gpu_indices=[0],
            gpu_type="v100",
            user=getpass.getuser(),
        )
        assert agent.supervisor.apply(assignment).outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
        (process,) = launcher.processes
        process.exit(0)
        deadline = time.monotonic() + 20
        while not master.exits and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [(e.job_id, e.lease) for e in master.exits] == [(1, 1)]
        assert master.refusals == 0
        assert len(master.register_times) == 1
        assert agent.registered
    finally:
        agent.stop()
