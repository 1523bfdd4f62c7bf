"""A worker agent with fake GPUs that runs nothing: tests decide what its tasks do.

It serves the real ``hadar.v1.Worker`` gRPC service on port 0, registers and heartbeats over
the master's real ``Coordinator`` API, acknowledges assignments, and reports progress and exits
when the test says so. Stop requests are honoured like a real agent would: the task exits as
stopped, with its last checkpoint.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from protos.hadar.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

GIB = 1024**3


@dataclass
class FakeTask:
    job_id: int
    task_index: int
    lease: int
    gpu_indices: tuple[int, ...]
    gpu_type: str
    iterations_done: int = 0
    exited: bool = False
    log: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)


class FakeWorker(worker_pb2_grpc.WorkerServicer):
    def __init__(
        self,
        node: str,
        gpu_types: Sequence[str],
        *,
        cluster_token: str = "",
        workloads: Sequence[str] = ("resnet", "lstm"),
    ) -> None:
        self.node = node
        self.gpu_types = list(gpu_types)
        self.workloads = list(workloads)
        self._token = cluster_token
        self._lock = threading.Condition()
        self.tasks: dict[int, FakeTask] = {}  # by job id; one task per job on this node
        # Every task this node ran, by job and lease: a real worker keeps each attempt's logs.
        self.history: dict[tuple[int, int], FakeTask] = {}
        # START of these jobs is answered FAILED with this message (a refused start).
        self.fail_starts: dict[int, str] = {}
        self._stop = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        worker_pb2_grpc.add_WorkerServicer_to_server(self, self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self._channel: grpc.Channel | None = None
        self._coordinator: coordinator_pb2_grpc.CoordinatorStub | None = None
        self._heartbeats: threading.Thread | None = None
        self._interval = 1.0

    # -- life --------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def gpus(self) -> list[common_pb2.Gpu]:
        return [
            common_pb2.Gpu(
                index=i,
                type=t,
                memory_bytes=16 * GIB,
                health=common_pb2.GPU_HEALTH_HEALTHY,
                fake=True,
            )
            for i, t in enumerate(self.gpu_types)
        ]

    def register(self, master_address: str) -> None:
        self._channel = grpc.insecure_channel(master_address)
        self._coordinator = coordinator_pb2_grpc.CoordinatorStub(self._channel)  # type: ignore[no-untyped-call]
        response = self._coordinator.RegisterWorker(
            coordinator_pb2.RegisterWorkerRequest(
                node=self.node,
                address=self.address,
                gpus=self.gpus(),
                agent_version="fake",
                workloads=self.workloads,
            ),
            metadata=self._metadata(),
            timeout=10,
        )
        self._interval = max(0.2, min(response.heartbeat_interval_s or 1.0, 1.0))
        self._heartbeats = threading.Thread(target=self._heartbeat_loop, daemon=True)
        self._heartbeats.start()

    def close(self) -> None:
        self._stop.set()
        if self._heartbeats is not None:
            self._heartbeats.join(timeout=5)
        self._server.stop(grace=None)
        if self._channel is not None:
            self._channel.close()

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self._token}"),) if self._token else ()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self._interval):
            assert self._coordinator is not None
            try:
                self._coordinator.Heartbeat(
                    coordinator_pb2.HeartbeatRequest(
                        node=self.node, tasks=self._worker_tasks(), gpus=self.gpus()
                    ),
                    metadata=self._metadata(),
                    timeout=5,
                )
            except grpc.RpcError:
                continue  # the master may be shutting down at the end of a test

    def _worker_tasks(self) -> list[common_pb2.WorkerTask]:
        with self._lock:
            return [
                common_pb2.WorkerTask(
                    job_id=t.job_id,
                    task_index=t.task_index,
                    lease=t.lease,
                    state=common_pb2.TASK_STATE_RUNNING,
                    gpu_indices=list(t.gpu_indices),
                    iterations_done=t.iterations_done,
                )
                for t in self.tasks.values()
                if not t.exited
            ]

    # -- what the test drives ----------------------------------------------------------------

    def wait_for_task(self, job_id: int, timeout: float = 20.0) -> FakeTask:
        deadline = time.monotonic() + timeout
        with self._lock:
            while job_id not in self.tasks or self.tasks[job_id].exited:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.node}: job {job_id} was never started here")
                self._lock.wait(remaining)
            return self.tasks[job_id]

    def report_progress(
        self, job_id: int, iterations_done: int, iterations_per_s: float = 5.0
    ) -> None:
        with self._lock:
            task = self.tasks[job_id]
            task.iterations_done = iterations_done
        assert self._coordinator is not None
        now = Timestamp()
        now.GetCurrentTime()
        self._coordinator.ReportProgress(
            coordinator_pb2.ReportProgressRequest(
                node=self.node,
                reports=[
                    coordinator_pb2.ProgressReport(
                        job_id=job_id,
                        task_index=task.task_index,
                        lease=task.lease,
                        iterations_done=iterations_done,
                        iterations_per_s=iterations_per_s,
                        samples_per_s=iterations_per_s * 32,
                        loss=1.0,
                        at=now,
                        checkpoint_iterations=iterations_done,
                        gpu_type=task.gpu_type,
                    )
                ],
            ),
            metadata=self._metadata(),
            timeout=10,
        )

    def write_log(self, job_id: int, text: str, *, stderr: bool = False) -> None:
        with self._lock:
            task = self.tasks[job_id]
            (task.err if stderr else task.log).extend(text.encode())
            self._lock.notify_all()

    def exit(
        self,
        job_id: int,
        kind: common_pb2.ExitKind,
        *,
        exit_code: int = 0,
        iterations_done: int | None = None,
        message: str = "",
    ) -> bool:
        with self._lock:
            task = self.tasks[job_id]
            if task.exited:
                return False
            task.exited = True
            done = task.iterations_done if iterations_done is None else iterations_done
            self._lock.notify_all()
        assert self._coordinator is not None
        response = self._coordinator.TaskExited(
            coordinator_pb2.TaskExitedRequest(
                node=self.node,
                job_id=job_id,
                task_index=task.task_index,
                lease=task.lease,
                kind=kind,
                exit_code=exit_code,
                iterations_done=done,
                message=message,
            ),
            metadata=self._metadata(),
            timeout=10,
        )
        return bool(response.accepted)

    # -- the Worker service ------------------------------------------------------------------

    def ApplyAssignments(self, request, context):
        results = []
        stops = []
        with self._lock:
            for a in request.assignments:
                if a.action == worker_pb2.ASSIGNMENT_ACTION_START and a.job_id in self.fail_starts:
                    results.append(
                        worker_pb2.AssignmentResult(
                            job_id=a.job_id,
                            task_index=a.task_index,
                            lease=a.lease,
                            outcome=worker_pb2.ASSIGNMENT_OUTCOME_FAILED,
                            message=self.fail_starts[a.job_id],
                        )
                    )
                    continue
                if a.action == worker_pb2.ASSIGNMENT_ACTION_STOP:
                    stops.append(a.job_id)
                elif a.action in (
                    worker_pb2.ASSIGNMENT_ACTION_START,
                    worker_pb2.ASSIGNMENT_ACTION_EXTEND,
                ):
                    current = self.tasks.get(a.job_id)
                    if current is None or current.exited or current.lease != a.lease:
                        self.tasks[a.job_id] = FakeTask(
                            job_id=a.job_id,
                            task_index=a.task_index,
                            lease=a.lease,
                            gpu_indices=tuple(a.gpu_indices),
                            gpu_type=a.gpu_type,
                            iterations_done=a.iterations_done,
                        )
                        self.history[(a.job_id, a.lease)] = self.tasks[a.job_id]
                results.append(
                    worker_pb2.AssignmentResult(
                        job_id=a.job_id,
                        task_index=a.task_index,
                        lease=a.lease,
                        outcome=worker_pb2.ASSIGNMENT_OUTCOME_APPLIED,
                    )
                )
            self._lock.notify_all()
        for job_id in stops:
            self._stop_later(job_id)
        return worker_pb2.ApplyAssignmentsResponse(results=results)

    def StopTask(self, request, context):
        with self._lock:
            task = self.tasks.get(request.job_id)
            running = task is not None and not task.exited
        if running:
            self._stop_later(request.job_id)
        return worker_pb2.StopTaskResponse(was_running=running)

    def _stop_later(self, job_id: int) -> None:
        # A real agent answers at once and reports the exit when its processes are gone.
        def stop() -> None:
            # The master may have stopped already, or the task ended on its own meanwhile.
            with contextlib.suppress(grpc.RpcError, KeyError):
                self.exit(job_id, common_pb2.EXIT_KIND_STOPPED)

        threading.Thread(target=stop, daemon=True).start()

    def StreamTaskLogs(self, request, context) -> Iterator[common_pb2.LogChunk]:
        # As the real worker: the task of the lease asked for (else the newest), NOT_FOUND
        # when this node has none; both streams, each from the same offset.
        with self._lock:
            if request.lease:
                task = self.history.get((request.job_id, request.lease))
            else:
                task = self.tasks.get(request.job_id)
        if task is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no task of job {request.job_id} here")
            return
        streams = (
            (common_pb2.LOG_STREAM_STDOUT, task.log),
            (common_pb2.LOG_STREAM_STDERR, task.err),
        )
        sent: dict[int, int] = {}
        for stream, buffer in streams:
            sent[stream] = int(request.offset)
            if request.tail_lines and not request.offset:
                with self._lock:
                    log = bytes(buffer)
                lines = log.splitlines(keepends=True)
                sent[stream] = len(log) - sum(len(line) for line in lines[-request.tail_lines :])
        while True:
            with self._lock:
                new = [(stream, bytes(buffer[sent[stream] :])) for stream, buffer in streams]
                exited = task.exited
                if (
                    not any(data for _, data in new)
                    and request.follow
                    and not exited
                    and context.is_active()
                ):
                    self._lock.wait(0.2)
                    continue
            for stream, data in new:
                if data:
                    yield common_pb2.LogChunk(
                        job_id=task.job_id,
                        task_index=task.task_index,
                        rank=0,
                        node=self.node,
                        data=data,
                        offset=sent[stream],
                        lease=task.lease,
                        stream=stream,
                    )
                    sent[stream] += len(data)
            if not request.follow or exited or not context.is_active():
                return

    def GetWorkerStatus(self, request, context):
        return worker_pb2.GetWorkerStatusResponse(
            node=self.node,
            gpus=self.gpus(),
            tasks=self._worker_tasks(),
            agent_version="fake",
            connected=True,
        )
