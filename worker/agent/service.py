"""The Worker gRPC service the master calls, and the cluster-token check in front of it."""

from __future__ import annotations

import hmac
import math
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from protos.hadar.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from worker.agent.fence import FencedError
from worker.agent.progressfile import tail_offset
from worker.agent.tasklogs import TASK_DIR_RE, rank_logs
from worker.agent.terminals import TerminalBusyError, relay

if TYPE_CHECKING:
    from worker.agent.agent import WorkerAgent

CHUNK_BYTES = 64 * 1024
FOLLOW_POLL_S = 0.2


class TokenInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Refuses every call whose `authorization` metadata is not `Bearer <token>`."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        presented = ""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                presented = value if isinstance(value, str) else value.decode(errors="replace")
        if hmac.compare_digest(presented.encode(), self._expected):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        message = "missing cluster token" if not presented else "wrong cluster token"

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(deny)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(deny)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(deny)
        return grpc.unary_unary_rpc_method_handler(deny)


# The range of a valid google.protobuf.Timestamp (years 1 to 9999).
_MIN_SECONDS = -62_135_596_800
_MAX_SECONDS = 253_402_300_799
_ACTIONS = frozenset(
    {
        worker_pb2.ASSIGNMENT_ACTION_START,
        worker_pb2.ASSIGNMENT_ACTION_EXTEND,
        worker_pb2.ASSIGNMENT_ACTION_STOP,
    }
)


def _nul_field(message: Message, prefix: str = "") -> str | None:
    """The first text field (map keys and values included, nested messages too) that holds
    a NUL character, which no argv, environment, path or user name can carry."""
    for field, value in message.ListFields():
        name = f"{prefix}{field.name}"
        entry = field.message_type
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if entry is not None and entry.GetOptions().map_entry:
                for key, item in value.items():
                    if (isinstance(key, str) and "\0" in key) or (
                        isinstance(item, str) and "\0" in item
                    ):
                        return name
                    if isinstance(item, Message) and _nul_field(item) is not None:
                        return name
                continue
            items = value if field.is_repeated else [value]
            for item in items:
                found = _nul_field(item, f"{name}.")
                if found is not None:
                    return found
        elif field.type == FieldDescriptor.TYPE_STRING:
            items = value if field.is_repeated else [value]
            if any("\0" in item for item in items):
                return name
    return None


def assignment_problem(a: worker_pb2.TaskAssignment) -> str | None:
    """What makes an assignment impossible to carry out, as ``field: reason`` (the field
    relative to the assignment); None when it is well formed."""
    if a.job_id == 0:
        return "job_id: must be set"
    if a.lease == 0:
        return "lease: must be set"
    if a.action not in _ACTIONS:
        return f"action: unknown action {a.action}"
    if not (math.isfinite(a.grace_s) and a.grace_s >= 0):
        return "grace_s: must be a finite number >= 0"
    if a.HasField("lease_expires_at"):
        ends = a.lease_expires_at
        if not (_MIN_SECONDS <= ends.seconds <= _MAX_SECONDS and 0 <= ends.nanos < 10**9):
            return "lease_expires_at: not a valid timestamp"
    nul = _nul_field(a)
    if nul is not None:
        return f"{nul}: must not contain a NUL character"
    for key in a.spec.env:
        if not key or "=" in key:
            return f"spec.env: variable name {key!r} is empty or contains '='"
    for name, path in (
        ("checkpoint_dir", a.checkpoint_dir),
        ("spec.checkpoint_dir", a.spec.checkpoint_dir),
        ("spec.workdir", a.spec.workdir),
    ):
        if path and not Path(path).is_absolute():
            return f"{name}: must be an absolute path, got {path!r}"
        if ".." in Path(path).parts:
            return f"{name}: must not contain '..' components, got {path!r}"
    return None


class WorkerService(worker_pb2_grpc.WorkerServicer):
    # Method names are the gRPC service's.

    def __init__(self, agent: WorkerAgent, stopping: threading.Event) -> None:
        self._agent = agent
        self._stopping = stopping

    def ApplyAssignments(  # noqa: N802
        self, request: worker_pb2.ApplyAssignmentsRequest, context: grpc.ServicerContext
    ) -> worker_pb2.ApplyAssignmentsResponse:
        # A malformed assignment fails alone: refusing the whole call would leave the
        # node's other assignments unapplied on every resend, while a FAILED result lets
        # the master end that one attempt with the reason.
        results = []
        try:
            with self._agent.fence.admit(request.master_epoch):
                for i, assignment in enumerate(request.assignments):
                    problem = assignment_problem(assignment)
                    if problem is None:
                        results.append(self._agent.apply(assignment))
                        continue
                    results.append(
                        worker_pb2.AssignmentResult(
                            job_id=assignment.job_id,
                            task_index=assignment.task_index,
                            lease=assignment.lease,
                            outcome=worker_pb2.ASSIGNMENT_OUTCOME_FAILED,
                            message=f"malformed assignment: assignments[{i}].{problem}",
                        )
                    )
        except FencedError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return worker_pb2.ApplyAssignmentsResponse(results=results)

    def StopTask(  # noqa: N802
        self, request: worker_pb2.StopTaskRequest, context: grpc.ServicerContext
    ) -> worker_pb2.StopTaskResponse:
        if request.job_id == 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "job_id: must be set")
        if not (math.isfinite(request.grace_s) and request.grace_s >= 0):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "grace_s: must be a finite number >= 0")
        try:
            with self._agent.fence.admit(request.master_epoch):
                was_running = self._agent.stop_task(
                    request.job_id,
                    lease=request.lease,
                    graceful=request.checkpoint,
                    grace_s=request.grace_s,
                    reason=request.reason or "StopTask",
                    # The master's reason is its decision about the job, for its output.
                    note=request.reason,
                    resumes=request.resumes,
                )
        except FencedError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return worker_pb2.StopTaskResponse(was_running=was_running)

    def GetWorkerStatus(  # noqa: N802
        self, request: worker_pb2.GetWorkerStatusRequest, context: grpc.ServicerContext
    ) -> worker_pb2.GetWorkerStatusResponse:
        return self._agent.status()

    def StreamTaskLogs(  # noqa: N802
        self, request: worker_pb2.StreamTaskLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[common_pb2.LogChunk]:
        supervisor = self._agent.supervisor
        dirs = supervisor.task_dirs(request.job_id)
        if request.lease:
            live = supervisor.live_task_dir(request.job_id, request.lease)
            named = [d for d in dirs if _lease_of(d) == request.lease]
            dirs = [live] if live is not None else named
        if not dirs:
            which = f"lease {request.lease} of job" if request.lease else "job"
            context.abort(grpc.StatusCode.NOT_FOUND, f"no task of {which} {request.job_id} here")
        task_dir = dirs[0]
        match = TASK_DIR_RE.fullmatch(task_dir.name)
        assert match is not None
        task_index, lease = int(match.group(2)), int(match.group(3))
        only_rank = request.rank if request.HasField("rank") else None
        offsets: dict[Path, int] = {}

        while True:
            # Read after checking: once the task is gone, one more pass drains everything.
            running = supervisor.runs_in(task_dir)
            logs = rank_logs(task_dir, only_rank)
            if not logs and not running and only_rank is not None:
                context.abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"rank {only_rank} has no log in task {task_index} of job {request.job_id}",
                )
            for entry in logs:
                if entry.path not in offsets:
                    offsets[entry.path] = (
                        tail_offset(entry.path, request.tail_lines)
                        if request.tail_lines
                        else request.offset
                    )
                for data in _read_from(entry.path, offsets):
                    yield common_pb2.LogChunk(
                        job_id=request.job_id,
                        task_index=task_index,
                        rank=entry.rank,
                        node=self._agent.node,
                        data=data,
                        offset=offsets[entry.path] - len(data),
                        lease=lease,
                        stream=entry.stream,
                    )
            if not request.follow or not running or not context.is_active():
                return
            if self._stopping.wait(FOLLOW_POLL_S):
                return

    def AttachTask(  # noqa: N802
        self,
        request_iterator: Iterator[common_pb2.TerminalInput],
        context: grpc.ServicerContext,
    ) -> Iterator[common_pb2.TerminalOutput]:
        first = next(request_iterator, None)
        if first is None or not first.job_id:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "job_id: the first message must name it"
            )
        assert first is not None
        if not first.lease:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "lease: the first message must name it")
        terminal = self._agent.supervisor.terminal(first.job_id, first.lease)
        if terminal is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no interactive task of lease {first.lease} of job {first.job_id} runs here",
            )
        assert terminal is not None
        try:
            yield from relay(terminal, first, request_iterator, context.is_active)
        except TerminalBusyError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"job {first.job_id}: {exc}")


def _lease_of(task_dir: Path) -> int | None:
    match = TASK_DIR_RE.fullmatch(task_dir.name)
    return int(match.group(3)) if match else None


def _read_from(path: Path, offsets: dict[Path, int]) -> Iterator[bytes]:
    try:
        with path.open("rb") as handle:
            # An offset past the end reads nothing (seeking there may fail: EINVAL).
            if offsets[path] >= os.fstat(handle.fileno()).st_size:
                return
            handle.seek(offsets[path])
            while True:
                data = handle.read(CHUNK_BYTES)
                if not data:
                    return
                offsets[path] += len(data)
                yield data
    except FileNotFoundError:
        return
