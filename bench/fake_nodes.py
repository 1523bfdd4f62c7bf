"""Fake worker nodes for load benchmarks, built on the protocol alone.

Each node answers the master's pushes (ApplyAssignments, StopTask) on its own gRPC port:
a push does not name the node it is for, so a node is told apart by the address it
registered. It remembers the tasks it was given and reports them as the worker agent does:
its heartbeats list them (job, task, lease, GPUs, iterations) with the GPUs' utilization,
its progress reports carry their cumulative iterations, and when a task runs out of
iterations (the job's or the lease's budget) or is stopped, it reports the exit. Tasks
progress at ITERATIONS_PER_S without running anything.

The nodes' servers run on an event loop of their own (`NodeLoop`, in a thread), apart from
the loop that sends the nodes' calls and times the master's answers: real nodes answer
pushes on machines of their own, and a round's burst of pushes answered on the timing loop
held it for tens of milliseconds, which counted against the master. A node's state is
shared by the two loops behind the node's lock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from protos.hadar.v1 import common_pb2, coordinator_pb2, worker_pb2, worker_pb2_grpc

ITERATIONS_PER_S = 10.0
# What a busy GPU's counter reads; idle ones read 0.
BUSY_UTILIZATION = 0.93
GPU_MEMORY = {"k80": 12, "v100": 16, "rtx3090": 24, "a100-40gb": 40}
WORKLOADS = ("resnet", "lstm", "transformer", "recommendation")
GIB = 1 << 30

# (exit message, due time) -> sends TaskExited; called on either loop.
ExitReporter = Callable[[coordinator_pb2.TaskExitedRequest, float], None]


class NodeLoop:
    """An event loop in a thread of its own, for the nodes' servers and their timers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="fake-nodes", daemon=True
        )
        self._thread.start()

    async def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Runs `coro` on the nodes' loop and waits for it from the caller's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@dataclass(eq=False)
class FakeTask:
    job_id: int
    task_index: int
    lease: int
    gpu_indices: tuple[int, ...]
    gpu_type: str
    total: int
    # Iterations done when this lease started, and where it stops (the job's total or the
    # lease's budget).
    start_done: int
    target: int
    started: float
    reported: int = 0
    timer: asyncio.TimerHandle | None = None
    timer_loop: asyncio.AbstractEventLoop | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.job_id, self.lease)

    def done(self, now: float) -> int:
        return min(self.target, self.start_done + int((now - self.started) * ITERATIONS_PER_S))


class FakeNode(worker_pb2_grpc.WorkerServicer):
    def __init__(self, name: str, gpu_type: str, gpus: int, report_exit: ExitReporter) -> None:
        self.name = name
        self.gpu_type = gpu_type
        self.address = ""
        self.tasks: dict[tuple[int, int], FakeTask] = {}
        self.registered = False
        self.registering = False
        self.reregistered = 0
        self.pushes = 0
        self.assignments = 0
        self._report_exit = report_exit
        # Its tasks are read by the loop sending its calls and changed by its server's.
        self._lock = threading.Lock()
        # Highest lease applied per job: older ones are refused, as a worker fences them.
        self._leases: dict[int, int] = {}
        # How each (job, lease) that ran here ended: a resent START or a late EXTEND for it
        # is answered as the agent answers it, not taken for a new task.
        self._exited: dict[tuple[int, int], int] = {}
        memory = GPU_MEMORY.get(gpu_type, 16) * GIB
        base = {
            "type": gpu_type,
            "memory_bytes": memory,
            "device_name": f"bench {gpu_type}",
            "health": common_pb2.GPU_HEALTH_HEALTHY,
        }
        self._registered_gpus = [
            common_pb2.Gpu(index=i, uuid=f"GPU-{name}-{i}", **base)  # type: ignore[arg-type]
            for i in range(gpus)
        ]
        self._idle = [
            common_pb2.Gpu(index=i, uuid=f"GPU-{name}-{i}", utilization=0.0, **base)  # type: ignore[arg-type]
            for i in range(gpus)
        ]
        self._busy = [
            common_pb2.Gpu(
                index=i,
                uuid=f"GPU-{name}-{i}",
                utilization=BUSY_UTILIZATION,
                **base,  # type: ignore[arg-type]
            )
            for i in range(gpus)
        ]

    # -- what the node sends

    def register_request(self) -> coordinator_pb2.RegisterWorkerRequest:
        with self._lock:
            tasks = self._worker_tasks(asyncio.get_running_loop().time())
        return coordinator_pb2.RegisterWorkerRequest(
            node=self.name,
            address=self.address,
            gpus=self._registered_gpus,
            agent_version="bench",
            workloads=WORKLOADS,
            tasks=tasks,
        )

    def heartbeat_request(self, now: float) -> coordinator_pb2.HeartbeatRequest:
        with self._lock:
            busy = {i for t in self.tasks.values() for i in t.gpu_indices}
            tasks = self._worker_tasks(now)
        return coordinator_pb2.HeartbeatRequest(
            node=self.name,
            tasks=tasks,
            gpus=[self._busy[i] if i in busy else g for i, g in enumerate(self._idle)],
        )

    def progress_request(self, now: float) -> coordinator_pb2.ReportProgressRequest | None:
        """The progress of every task that advanced since its last report; None when none
        did (the agent then sends nothing)."""
        reports = []
        at = Timestamp()
        at.FromNanoseconds(time.time_ns())
        with self._lock:
            moved = []
            for task in self.tasks.values():
                done = task.done(now)
                if done > task.reported:
                    task.reported = done
                    moved.append((task, done))
        for task, done in moved:
            reports.append(
                coordinator_pb2.ProgressReport(
                    job_id=task.job_id,
                    task_index=task.task_index,
                    lease=task.lease,
                    iterations_done=done,
                    iterations_per_s=ITERATIONS_PER_S,
                    samples_per_s=ITERATIONS_PER_S * 32,
                    loss=1.0 / (1.0 + done),
                    at=at,
                    checkpoint_iterations=task.start_done,
                    gpu_type=task.gpu_type,
                )
            )
        if not reports:
            return None
        return coordinator_pb2.ReportProgressRequest(node=self.name, reports=reports)

    def _worker_tasks(self, now: float) -> list[common_pb2.WorkerTask]:
        return [
            common_pb2.WorkerTask(
                job_id=t.job_id,
                task_index=t.task_index,
                lease=t.lease,
                state=common_pb2.TASK_STATE_RUNNING,
                gpu_indices=t.gpu_indices,
                iterations_done=t.done(now),
            )
            for t in self.tasks.values()
        ]

    # -- what the master answers

    def stop_refs(self, refs: list[coordinator_pb2.TaskRef], now: float) -> None:
        """Stops the tasks a heartbeat, a registration or a progress ack fenced off."""
        if not refs:
            return
        with self._lock:
            for ref in refs:
                task = self.tasks.get((ref.job_id, ref.lease))
                if task is not None:
                    self._end(task, common_pb2.EXIT_KIND_STOPPED, now)

    # -- the Worker service

    async def ApplyAssignments(  # noqa: N802
        self,
        request: worker_pb2.ApplyAssignmentsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> worker_pb2.ApplyAssignmentsResponse:
        now = asyncio.get_running_loop().time()
        self.pushes += 1
        self.assignments += len(request.assignments)
        results = []
        with self._lock:
            outcomes = [self._apply(a, now) for a in request.assignments]
        for a, (outcome, message) in zip(request.assignments, outcomes, strict=True):
            results.append(
                worker_pb2.AssignmentResult(
                    job_id=a.job_id,
                    task_index=a.task_index,
                    lease=a.lease,
                    outcome=outcome,
                    message=message,
                )
            )
        return worker_pb2.ApplyAssignmentsResponse(results=results)

    async def StopTask(  # noqa: N802
        self, request: worker_pb2.StopTaskRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> worker_pb2.StopTaskResponse:
        now = asyncio.get_running_loop().time()
        kind = common_pb2.EXIT_KIND_STOPPED if request.checkpoint else common_pb2.EXIT_KIND_KILLED
        with self._lock:
            found = [
                t
                for t in self.tasks.values()
                if t.job_id == request.job_id and request.lease in (0, t.lease)
            ]
            for task in found:
                self._end(task, kind, now)
        return worker_pb2.StopTaskResponse(was_running=bool(found))

    def _apply(
        self, a: worker_pb2.TaskAssignment, now: float
    ) -> tuple[worker_pb2.AssignmentOutcome, str]:
        applied = self._leases.get(a.job_id, 0)
        if a.lease < applied:
            return worker_pb2.ASSIGNMENT_OUTCOME_STALE, f"lease {applied} already applied"
        self._leases[a.job_id] = a.lease
        exited = self._exited.get((a.job_id, a.lease))
        if exited is not None and a.action != worker_pb2.ASSIGNMENT_ACTION_STOP:
            kind = common_pb2.ExitKind.Name(exited)
            return worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, f"already exited ({kind})"
        if a.action == worker_pb2.ASSIGNMENT_ACTION_START:
            if (a.job_id, a.lease) in self.tasks:
                return worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, "already running"
            for old in [t for t in self.tasks.values() if t.job_id == a.job_id]:
                self._end(old, common_pb2.EXIT_KIND_STOPPED, now)
            self._start(a, now)
            return worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, "started"
        current = next((t for t in self.tasks.values() if t.job_id == a.job_id), None)
        if a.action == worker_pb2.ASSIGNMENT_ACTION_EXTEND:
            if current is None:
                return worker_pb2.ASSIGNMENT_OUTCOME_FAILED, f"no running task of {a.job_id}"
            if current.lease != a.lease:
                del self.tasks[current.key]
                current.lease = a.lease
                self.tasks[current.key] = current
            return worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, "extended"
        if a.action == worker_pb2.ASSIGNMENT_ACTION_STOP:
            if current is None:
                return worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, "not running"
            self._end(current, common_pb2.EXIT_KIND_STOPPED, now)
            return worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, "stopped"
        return worker_pb2.ASSIGNMENT_OUTCOME_FAILED, f"unknown action {a.action}"

    def _start(self, a: worker_pb2.TaskAssignment, now: float) -> None:
        total = a.spec.iterations
        target = total
        if a.iteration_budget:
            target = min(total, a.iterations_done + a.iteration_budget)
        task = FakeTask(
            job_id=a.job_id,
            task_index=a.task_index,
            lease=a.lease,
            gpu_indices=tuple(a.gpu_indices),
            gpu_type=a.gpu_type,
            total=total,
            start_done=a.iterations_done,
            target=target,
            started=now,
            reported=a.iterations_done,
        )
        self.tasks[task.key] = task
        finish = now + max(0, target - a.iterations_done) / ITERATIONS_PER_S
        loop = asyncio.get_running_loop()
        task.timer, task.timer_loop = loop.call_at(finish, self._finish, task, finish), loop

    def _finish(self, task: FakeTask, due: float) -> None:
        with self._lock:
            if self.tasks.get(task.key) is not task:
                return
            kind = (
                common_pb2.EXIT_KIND_COMPLETED
                if task.target >= task.total
                else common_pb2.EXIT_KIND_LEASE_DONE
            )
            self._end(task, kind, due)

    def _end(self, task: FakeTask, kind: common_pb2.ExitKind, due: float) -> None:
        self.tasks.pop(task.key, None)
        self._exited[task.key] = kind
        if (
            task.timer is not None
            and task.timer_loop is not None
            and not task.timer_loop.is_closed()
        ):
            # Ended from either loop; the timer belongs to the nodes' (and one that fires
            # meanwhile finds the task gone).
            task.timer_loop.call_soon_threadsafe(task.timer.cancel)
        done = task.target if kind != common_pb2.EXIT_KIND_KILLED else task.start_done
        if kind == common_pb2.EXIT_KIND_STOPPED:
            done = task.done(due)  # checkpointed as it stopped
        request = coordinator_pb2.TaskExitedRequest(
            node=self.name,
            job_id=task.job_id,
            task_index=task.task_index,
            lease=task.lease,
            kind=kind,
            iterations_done=done,
        )
        if kind in (common_pb2.EXIT_KIND_COMPLETED, common_pb2.EXIT_KIND_LEASE_DONE):
            request.exit_code = 0
        self._report_exit(request, due)
