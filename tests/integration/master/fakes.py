"""An in-process fake worker: serves hadar.v1.Worker on port 0 and calls the master's
Coordinator like a real worker would. Training is simulated: the test says how far a job got.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from protos.hadar.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)


@dataclass
class FakeTask:
    job_id: int
    task_index: int
    lease: int
    gpu_indices: tuple[int, ...]
    gpu_type: str
    assignment: worker_pb2.TaskAssignment
    iterations_done: int = 0
    state: common_pb2.TaskState = common_pb2.TASK_STATE_RUNNING


@dataclass
class StopRecord:
    job_id: int
    lease: int
    reason: str
    via: str  # "StopTask" or "ApplyAssignments"
    # StopTask's checkpoint flag: stop gracefully (SIGTERM, checkpoint) or kill at once.
    checkpoint: bool = True
    # StopTask's resumes flag: the job runs again, and its output says from where.
    resumes: bool = False


@dataclass
class FakeWorker(worker_pb2_grpc.WorkerServicer):
    name: str
    master_address: str
    cluster_token: str
    gpu_type: str = "v100"
    num_gpus: int = 4
    gpu_memory_bytes: int = 16 << 30
    workloads: tuple[str, ...] = ("resnet", "lstm")
    # Report TaskExited(STOPPED) by itself when asked to stop (as a checkpointing worker does).
    auto_exit_on_stop: bool = True
    # Register again by itself when a heartbeat answer asks for it.
    auto_reregister: bool = True
    tasks: dict[tuple[int, int], FakeTask] = field(default_factory=dict)
    applied: list[worker_pb2.TaskAssignment] = field(default_factory=list)
    stops: list[StopRecord] = field(default_factory=list)
    # (time.monotonic(), round) of every EXTEND received, in order.
    extensions: list[tuple[float, int]] = field(default_factory=list)
    # The master_epoch of every ApplyAssignments and StopTask received, in order.
    epochs: list[int] = field(default_factory=list)
    # Refuse orders of an older master epoch, as a real worker that has seen this one does.
    follows_epoch: int = 0
    log_lines: dict[int, bytes] = field(default_factory=dict)
    # Output of one lease of a job (as a real worker keeps every lease's), before log_lines.
    lease_logs: dict[tuple[int, int], bytes] = field(default_factory=dict)
    # START of these jobs is answered FAILED with this message (as a malformed assignment
    # or a spawn error is on a real worker).
    fail_starts: dict[int, str] = field(default_factory=dict)
    # EXTEND of these jobs is answered FAILED with this message (as a worker answers for a
    # task it is stopping).
    refuse_extends: dict[int, str] = field(default_factory=dict)
    # Bumped to end every log stream open now, as a worker's agent restarting ends them.
    stream_epoch: int = 0
    # START of a job of one of these users is refused as a worker running as root refuses
    # a user without a Unix account on its node.
    unknown_users: frozenset[str] = frozenset()
    # What AttachTask saw, in order: "attach JOB LEASE ROWSxCOLS", "size ROWSxCOLS",
    # "exit CODE" and "hung up" (its caller went away before the exit).
    terminal_events: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        worker_pb2_grpc.add_WorkerServicer_to_server(self, self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.address = f"127.0.0.1:{self.port}"
        self._channel = grpc.insecure_channel(self.master_address)
        self.coordinator: Any = coordinator_pb2_grpc.CoordinatorStub(self._channel)  # type: ignore[no-untyped-call]
        self._beating = threading.Event()
        self._beat_thread: threading.Thread | None = None
        # Cleared while the worker is frozen: its service answers nothing until thawed.
        self._thawed = threading.Event()
        self._thawed.set()
        self.metadata: tuple[tuple[str, str], ...] = (
            ("authorization", f"Bearer {self.cluster_token}"),
        )

    # -- Coordinator calls ---------------------------------------------------------------

    def gpus(self) -> list[common_pb2.Gpu]:
        return [
            common_pb2.Gpu(
                index=i,
                type=self.gpu_type,
                memory_bytes=self.gpu_memory_bytes,
                health=common_pb2.GPU_HEALTH_HEALTHY,
                fake=True,
            )
            for i in range(self.num_gpus)
        ]

    def worker_tasks(self) -> list[common_pb2.WorkerTask]:
        with self._lock:
            return [
                common_pb2.WorkerTask(
                    job_id=t.job_id,
                    task_index=t.task_index,
                    lease=t.lease,
                    state=t.state,
                    gpu_indices=list(t.gpu_indices),
                    iterations_done=t.iterations_done,
                )
                for t in self.tasks.values()
            ]

    def connect(self, master_address: str) -> None:
        """Talk to another master from now on (after a master restart)."""
        self._channel.close()
        self.master_address = master_address
        self._channel = grpc.insecure_channel(master_address)
        self.coordinator = coordinator_pb2_grpc.CoordinatorStub(self._channel)  # type: ignore[no-untyped-call]

    def register(self, ended: Iterable[FakeTask] = ()) -> coordinator_pb2.RegisterWorkerResponse:
        """Register with the tasks it runs; `ended`: tasks whose exits are still to be sent."""
        response: coordinator_pb2.RegisterWorkerResponse = self.coordinator.RegisterWorker(
            coordinator_pb2.RegisterWorkerRequest(
                node=self.name,
                address=self.address,
                gpus=self.gpus(),
                agent_version="fake-1",
                workloads=list(self.workloads),
                tasks=self.worker_tasks(),
                ended=[
                    coordinator_pb2.TaskRef(job_id=t.job_id, task_index=t.task_index, lease=t.lease)
                    for t in ended
                ],
            ),
            metadata=self.metadata,
            timeout=10,
        )
        with self._lock:
            for ref in response.stop:
                self.tasks.pop((ref.job_id, ref.task_index), None)
        return response

    def heartbeat(self) -> coordinator_pb2.HeartbeatResponse:
        response: coordinator_pb2.HeartbeatResponse = self.coordinator.Heartbeat(
            coordinator_pb2.HeartbeatRequest(
                node=self.name, tasks=self.worker_tasks(), gpus=self.gpus()
            ),
            metadata=self.metadata,
            timeout=10,
        )
        with self._lock:
            for ref in response.stop:
                self.tasks.pop((ref.job_id, ref.task_index), None)
        if response.reregister and self.auto_reregister:
            self.register()
        return response

    def start_heartbeats(self, interval: float = 0.1) -> None:
        self._beating.set()

        def loop() -> None:
            while self._beating.is_set():
                with contextlib.suppress(grpc.RpcError):
                    self.heartbeat()
                time.sleep(interval)

        self._beat_thread = threading.Thread(target=loop, daemon=True)
        self._beat_thread.start()

    def stop_heartbeats(self) -> None:
        self._beating.clear()
        if self._beat_thread is not None:
            self._beat_thread.join(timeout=5)

    def progress(
        self, job_id: int, iterations: int, rate: float = 10.0
    ) -> coordinator_pb2.ReportProgressResponse:
        with self._lock:
            mine = [t for t in self.tasks.values() if t.job_id == job_id]
            for task in mine:
                task.iterations_done = iterations
        response: coordinator_pb2.ReportProgressResponse = self.coordinator.ReportProgress(
            coordinator_pb2.ReportProgressRequest(
                node=self.name,
                reports=[
                    coordinator_pb2.ProgressReport(
                        job_id=t.job_id,
                        task_index=t.task_index,
                        lease=t.lease,
                        iterations_done=iterations,
                        iterations_per_s=rate,
                        checkpoint_iterations=iterations,
                        gpu_type=t.gpu_type,
                    )
                    for t in mine
                ],
            ),
            metadata=self.metadata,
            timeout=10,
        )
        return response

    def exit(
        self,
        job_id: int,
        kind: common_pb2.ExitKind,
        exit_code: int | None = 0,
        message: str = "",
        contract_error: bool = False,
    ) -> coordinator_pb2.TaskExitedResponse:
        with self._lock:
            mine = [t for t in self.tasks.values() if t.job_id == job_id]
            for task in mine:
                del self.tasks[(task.job_id, task.task_index)]
        response = coordinator_pb2.TaskExitedResponse(accepted=False)
        for task in mine:
            request = coordinator_pb2.TaskExitedRequest(
                node=self.name,
                job_id=task.job_id,
                task_index=task.task_index,
                lease=task.lease,
                kind=kind,
                iterations_done=task.iterations_done,
                message=message,
                contract_error=contract_error,
            )
            if exit_code is not None:
                request.exit_code = exit_code
            response = self.coordinator.TaskExited(request, metadata=self.metadata, timeout=10)
        return response

    # -- Worker service --------------------------------------------------------------------

    def _fence(self, epoch: int, context: grpc.ServicerContext) -> None:
        if epoch < self.follows_epoch:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"fenced: the order comes from master epoch {epoch}, but this worker follows "
                f"epoch {self.follows_epoch}: a newer master is active",
            )

    def _check(self, context: grpc.ServicerContext) -> None:
        metadata = dict(context.invocation_metadata())
        if metadata.get("authorization") != f"Bearer {self.cluster_token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad cluster token")

    def ApplyAssignments(
        self, request: worker_pb2.ApplyAssignmentsRequest, context: grpc.ServicerContext
    ) -> worker_pb2.ApplyAssignmentsResponse:
        self._thawed.wait()
        self._check(context)
        results = []
        to_exit: list[FakeTask] = []
        self._fence(request.master_epoch, context)
        with self._lock:
            self.epochs.append(request.master_epoch)
            for a in request.assignments:
                self.applied.append(a)
                if a.action == worker_pb2.ASSIGNMENT_ACTION_EXTEND:
                    self.extensions.append((time.monotonic(), a.round))
                key = (a.job_id, a.task_index)
                current = self.tasks.get(key)
                outcome = worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
                message = ""
                unknown_user = ""
                if a.action == worker_pb2.ASSIGNMENT_ACTION_START and a.job_id in self.fail_starts:
                    outcome = worker_pb2.ASSIGNMENT_OUTCOME_FAILED
                    message = self.fail_starts[a.job_id]
                elif (
                    a.action == worker_pb2.ASSIGNMENT_ACTION_START and a.user in self.unknown_users
                ):
                    outcome = worker_pb2.ASSIGNMENT_OUTCOME_FAILED
                    message = (
                        f"cannot run as the submitting user: no Unix user {a.user!r} on this node"
                    )
                    unknown_user = a.user
                elif a.action == worker_pb2.ASSIGNMENT_ACTION_START:
                    if current is not None and current.lease > a.lease:
                        outcome = worker_pb2.ASSIGNMENT_OUTCOME_STALE
                    else:
                        self.tasks[key] = FakeTask(
                            a.job_id,
                            a.task_index,
                            a.lease,
                            tuple(a.gpu_indices),
                            a.gpu_type,
                            a,
                            iterations_done=a.iterations_done,
                        )
                elif a.action == worker_pb2.ASSIGNMENT_ACTION_EXTEND:
                    if a.job_id in self.refuse_extends:
                        outcome = worker_pb2.ASSIGNMENT_OUTCOME_FAILED
                        message = self.refuse_extends[a.job_id]
                    elif current is None or current.lease != a.lease:
                        outcome = worker_pb2.ASSIGNMENT_OUTCOME_STALE
                elif current is not None and current.lease == a.lease:
                    self.stops.append(StopRecord(a.job_id, a.lease, "round", "ApplyAssignments"))
                    to_exit.append(current)
                results.append(
                    worker_pb2.AssignmentResult(
                        job_id=a.job_id,
                        task_index=a.task_index,
                        lease=a.lease,
                        outcome=outcome,
                        message=message,
                        unknown_user=unknown_user,
                    )
                )
        self._exit_later(to_exit)
        return worker_pb2.ApplyAssignmentsResponse(results=results)

    def StopTask(
        self, request: worker_pb2.StopTaskRequest, context: grpc.ServicerContext
    ) -> worker_pb2.StopTaskResponse:
        self._thawed.wait()
        self._check(context)
        with self._lock:
            self.epochs.append(request.master_epoch)
            mine = [
                t
                for t in self.tasks.values()
                if t.job_id == request.job_id and request.lease in (0, t.lease)
            ]
            self.stops.append(
                StopRecord(
                    request.job_id,
                    request.lease,
                    request.reason,
                    "StopTask",
                    request.checkpoint,
                    request.resumes,
                )
            )
        self._exit_later(mine)
        return worker_pb2.StopTaskResponse(was_running=bool(mine))

    def _exit_later(self, tasks: list[FakeTask]) -> None:
        if not tasks or not self.auto_exit_on_stop:
            return

        def report() -> None:
            for task in tasks:
                with self._lock:
                    self.tasks.pop((task.job_id, task.task_index), None)
                # A test that ends meanwhile closes the channel (ValueError): the worker is
                # gone, and its report with it.
                with contextlib.suppress(grpc.RpcError, ValueError):
                    self.coordinator.TaskExited(
                        coordinator_pb2.TaskExitedRequest(
                            node=self.name,
                            job_id=task.job_id,
                            task_index=task.task_index,
                            lease=task.lease,
                            kind=common_pb2.EXIT_KIND_STOPPED,
                            exit_code=0,
                            iterations_done=task.iterations_done,
                        ),
                        metadata=self.metadata,
                        timeout=10,
                    )

        threading.Thread(target=report, daemon=True).start()

    def StreamTaskLogs(
        self, request: worker_pb2.StreamTaskLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[common_pb2.LogChunk]:
        self._check(context)

        def output() -> bytes | None:
            data = self.lease_logs.get((request.job_id, request.lease))
            return data if data is not None else self.log_lines.get(request.job_id)

        def running() -> bool:
            with self._lock:
                return any(
                    t.job_id == request.job_id and t.lease == request.lease
                    for t in self.tasks.values()
                )

        if output() is None and not (request.follow and running()):
            # As a real worker answers for a job it has no task of.
            context.abort(grpc.StatusCode.NOT_FOUND, f"no task of job {request.job_id} here")
        # Following, as a real worker does: what is added to the lease's output while its
        # task runs, then the rest once it has ended.
        sent = 0
        epoch = self.stream_epoch
        while True:
            if self.stream_epoch != epoch:
                return  # as a stream ends when the worker's agent stops
            live = request.follow and running()
            data = output() or b""
            while len(data) > sent:
                # At most 64 KiB a chunk, as a real worker reads.
                part = data[sent : sent + 65536]
                yield common_pb2.LogChunk(
                    job_id=request.job_id,
                    node=self.name,
                    data=part,
                    lease=request.lease,
                    offset=sent,
                )
                sent += len(part)
            if not live or not context.is_active():
                return
            time.sleep(0.05)

    def AttachTask(
        self,
        request_iterator: Iterator[common_pb2.TerminalInput],
        context: grpc.ServicerContext,
    ) -> Iterator[common_pb2.TerminalOutput]:
        """An echoing terminal: what is typed comes back; typing `exit N` ends it with N."""
        self._check(context)
        first = next(request_iterator)
        with self._lock:
            known = any(
                (t.job_id, t.lease) == (first.job_id, first.lease) for t in self.tasks.values()
            )
        if not known:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no interactive task of job {first.job_id}")
        size = f"{first.size.rows}x{first.size.cols}"
        self.terminal_events.append(f"attach {first.job_id} {first.lease} {size}")
        exited = False
        try:
            for message in request_iterator:
                if message.HasField("size"):
                    self.terminal_events.append(f"size {message.size.rows}x{message.size.cols}")
                if message.data.startswith(b"exit "):
                    code = int(message.data.split()[1])
                    self.terminal_events.append(f"exit {code}")
                    exited = True
                    yield common_pb2.TerminalOutput(exited=True, exit_code=code)
                    return
                if message.data:
                    yield common_pb2.TerminalOutput(data=b"echo:" + message.data)
        except grpc.RpcError:
            pass  # the caller went away: the same as the end of its input
        finally:
            if not exited:
                self.terminal_events.append("hung up")

    def GetWorkerStatus(
        self, request: worker_pb2.GetWorkerStatusRequest, context: grpc.ServicerContext
    ) -> worker_pb2.GetWorkerStatusResponse:
        self._check(context)
        return worker_pb2.GetWorkerStatusResponse(node=self.name, tasks=self.worker_tasks())

    # -- test helpers ----------------------------------------------------------------------

    def freeze(self) -> None:
        """Answer no call of the master's (they hang, as on a stopped agent) until thaw()."""
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    def extended_in(self) -> set[int]:
        """Rounds whose EXTEND reached this worker."""
        with self._lock:
            return {round_number for _, round_number in self.extensions}

    def running_jobs(self) -> set[int]:
        with self._lock:
            return {t.job_id for t in self.tasks.values()}

    def close(self) -> None:
        self.thaw()
        self.stop_heartbeats()
        self._server.stop(0).wait()
        self._channel.close()


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.02)
