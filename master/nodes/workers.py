"""gRPC clients for the workers' Worker service: one channel per address (TLS when the
master has a worker CA), deadlines and bounded retries, the cluster token on every call."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
import structlog

from master.settings import DISPATCH_BACKOFF_S
from protos.hadar.v1 import common_pb2, worker_pb2, worker_pb2_grpc

T = TypeVar("T")
log = structlog.get_logger(__name__)

# How a worker's refusal of an order from an older master's term begins (worker.agent.fence).
FENCED_PREFIX = "fenced:"

# Codes worth retrying: the worker is down, restarting or slow. Anything else is an answer.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class WorkerUnreachableError(Exception):
    def __init__(self, address: str, detail: str) -> None:
        super().__init__(f"worker at {address} did not answer: {detail}")
        self.address = address


class WorkerClients:
    def __init__(
        self,
        cluster_token: str,
        *,
        timeout_s: float,
        attempts: int,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        # With credentials every worker is called over TLS (see master.service.tls).
        self._credentials = credentials
        self._metadata = (("authorization", f"Bearer {cluster_token}"),) if cluster_token else ()
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[grpc.Channel, Any]] = {}
        # The epoch every order carries, or raises when this master may not send orders
        # (master.process.leadership.Leadership.fence); None: epoch 0, no election (tests).
        self.epoch: Callable[[], int] | None = None
        # Told when a worker refuses an order as fenced: a newer master is active.
        self.on_fenced: Callable[[str], None] | None = None

    def _stub(self, address: str) -> Any:
        return self._entry(address)[1]

    def _entry(self, address: str) -> tuple[grpc.Channel, Any]:
        with self._lock:
            entry = self._channels.get(address)
            if entry is None:
                channel = (
                    grpc.secure_channel(address, self._credentials)
                    if self._credentials is not None
                    else grpc.insecure_channel(address)
                )
                entry = (channel, worker_pb2_grpc.WorkerStub(channel))  # type: ignore[no-untyped-call]
                self._channels[address] = entry
            return entry

    def _call(self, address: str, fn: Callable[[Any], T]) -> T:
        delay = DISPATCH_BACKOFF_S
        last = ""
        for attempt in range(1, self._attempts + 1):
            try:
                return fn(self._stub(address))
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                detail = exc.details() if hasattr(exc, "details") else str(exc)
                last = f"{code.name if code else 'error'}: {detail}"
                if (
                    code == grpc.StatusCode.FAILED_PRECONDITION
                    and str(detail).startswith(FENCED_PREFIX)
                    and self.on_fenced is not None
                ):
                    self.on_fenced(f"worker at {address} refused an order: {detail}")
                if code not in RETRYABLE:
                    raise WorkerUnreachableError(address, last) from exc
                if attempt < self._attempts:
                    time.sleep(delay)
                    delay *= 2
        raise WorkerUnreachableError(address, last)

    def _current_epoch(self) -> int:
        return self.epoch() if self.epoch is not None else 0

    def apply(
        self, address: str, request: worker_pb2.ApplyAssignmentsRequest
    ) -> worker_pb2.ApplyAssignmentsResponse:
        stamped = worker_pb2.ApplyAssignmentsRequest()
        stamped.CopyFrom(request)
        stamped.master_epoch = self._current_epoch()
        request = stamped
        response: worker_pb2.ApplyAssignmentsResponse = self._call(
            address,
            lambda stub: stub.ApplyAssignments(
                request, timeout=self._timeout_s, metadata=self._metadata
            ),
        )
        return response

    def stop(
        self, address: str, request: worker_pb2.StopTaskRequest
    ) -> worker_pb2.StopTaskResponse:
        stamped = worker_pb2.StopTaskRequest()
        stamped.CopyFrom(request)
        stamped.master_epoch = self._current_epoch()
        request = stamped
        response: worker_pb2.StopTaskResponse = self._call(
            address,
            lambda stub: stub.StopTask(request, timeout=self._timeout_s, metadata=self._metadata),
        )
        return response

    def connect(self, address: str) -> None:
        """Returns once the worker at `address` is connected; raises WorkerUnreachableError
        as soon as connecting fails, or after the call timeout without an answer (an
        address that drops packets would otherwise hold a stream without deadline)."""
        channel = self._entry(address)[0]
        states: queue.Queue[grpc.ChannelConnectivity] = queue.Queue()
        seen = states.put
        channel.subscribe(seen, try_to_connect=True)
        deadline = time.monotonic() + self._timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerUnreachableError(
                        address, f"no connection within {self._timeout_s:g} s"
                    )
                try:
                    state = states.get(timeout=left)
                except queue.Empty:
                    continue
                if state is grpc.ChannelConnectivity.READY:
                    return
                if state in (
                    grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                    grpc.ChannelConnectivity.SHUTDOWN,
                ):
                    raise WorkerUnreachableError(address, "cannot connect")
        finally:
            channel.unsubscribe(seen)

    def stream_logs(
        self, address: str, request: worker_pb2.StreamTaskLogsRequest
    ) -> Iterator[common_pb2.LogChunk]:
        """The worker's log stream; the returned call can be cancelled. It has no deadline
        (a follow lasts as long as the job): :meth:`connect` first."""
        call: Iterator[common_pb2.LogChunk] = self._stub(address).StreamTaskLogs(
            request, metadata=self._metadata
        )
        return call

    def attach_task(
        self, address: str, requests: Iterator[common_pb2.TerminalInput]
    ) -> Iterator[common_pb2.TerminalOutput]:
        """An interactive task's terminal: `requests` are sent from gRPC's own thread as
        they come; the returned call can be cancelled. No deadline (a session lasts as long
        as it lasts): :meth:`connect` first."""
        call: Iterator[common_pb2.TerminalOutput] = self._stub(address).AttachTask(
            requests, metadata=self._metadata
        )
        return call

    def close(self) -> None:
        with self._lock:
            for channel, _ in self._channels.values():
                channel.close()
            self._channels.clear()
