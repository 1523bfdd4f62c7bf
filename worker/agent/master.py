"""The connection to the master's Coordinator service, behind a seam."""

from __future__ import annotations

import threading
from typing import Protocol

import grpc

from protos.hadar.v1 import coordinator_pb2, coordinator_pb2_grpc

# Answers after which the next master is tried: this one is down, or not the active one.
_NEXT_MASTER = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

# Answers that will never change on a resend: the request itself is bad.
_PERMANENT = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE})


class MasterError(Exception):
    """A call to the master failed (unreachable, timed out, refused)."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def permanent(self) -> bool:
        """The master refused this request for what it says: resending cannot help."""
        return self.code in _PERMANENT

    @property
    def busy(self) -> bool:
        """The master is up and refused the request for now only (its cap on reports in
        flight): it is to be sent again later, and the connection is not lost."""
        return self.code == grpc.StatusCode.RESOURCE_EXHAUSTED


class MasterClient(Protocol):
    def register(
        self, request: coordinator_pb2.RegisterWorkerRequest
    ) -> coordinator_pb2.RegisterWorkerResponse: ...

    def heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest
    ) -> coordinator_pb2.HeartbeatResponse: ...

    def report_progress(
        self, request: coordinator_pb2.ReportProgressRequest
    ) -> coordinator_pb2.ReportProgressResponse: ...

    def task_exited(
        self, request: coordinator_pb2.TaskExitedRequest
    ) -> coordinator_pb2.TaskExitedResponse: ...

    def report_profile(
        self, request: coordinator_pb2.ReportProfileRequest
    ) -> coordinator_pb2.ReportProfileResponse: ...

    def close(self) -> None: ...


# gRPC's default reconnect backoff grows to two minutes; a restarted master must see its
# workers again well within its heartbeat timeout, or it declares their nodes lost.
RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


def master_addresses(text: str) -> list[str]:
    """The masters of a `master` setting: one HOST:PORT, or several separated by commas (an
    active master and its standbys, tried in turn)."""
    return [part.strip() for part in text.split(",") if part.strip()]


class GrpcMasterClient:
    """Calls the master over gRPC with the cluster token; every failure is a MasterError.

    With several addresses (an active master and standbys) it calls the one that answered
    last; when that one does not answer (UNAVAILABLE: down, or a standby that does not
    listen) the same call goes to the next, each address once per call. A call that timed
    out is not repeated, but the next call starts with the next address."""

    def __init__(
        self,
        address: str,
        token: str = "",
        timeout_s: float = 10.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.addresses = master_addresses(address) or [address]
        self._channels = [
            grpc.secure_channel(a, credentials, options=RECONNECT_OPTIONS)
            if credentials is not None
            else grpc.insecure_channel(a, options=RECONNECT_OPTIONS)
            for a in self.addresses
        ]
        self._stubs = [
            coordinator_pb2_grpc.CoordinatorStub(channel)  # type: ignore[no-untyped-call]
            for channel in self._channels
        ]
        self._current = 0
        self._lock = threading.Lock()
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout_s

    @property
    def address(self) -> str:
        """The master called last (or next)."""
        with self._lock:
            return self.addresses[self._current]

    def _call(self, name: str, method: str, request: object) -> object:
        with self._lock:
            first = self._current
        failures: list[str] = []
        code: grpc.StatusCode | None = None
        for step in range(len(self.addresses)):
            index = (first + step) % len(self.addresses)
            address = self.addresses[index]
            try:
                response = getattr(self._stubs[index], method)(
                    request, timeout=self._timeout, metadata=self._metadata
                )
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
                failures.append(f"{address}: {code}: {details}")
                if code in _NEXT_MASTER and len(self.addresses) > 1:
                    with self._lock:
                        self._current = (index + 1) % len(self.addresses)
                    if code == grpc.StatusCode.UNAVAILABLE:
                        continue
                break
            with self._lock:
                self._current = index
            return response
        raise MasterError(f"{name} to {'; '.join(failures)}", code)

    def register(
        self, request: coordinator_pb2.RegisterWorkerRequest
    ) -> coordinator_pb2.RegisterWorkerResponse:
        response = self._call("RegisterWorker", "RegisterWorker", request)
        assert isinstance(response, coordinator_pb2.RegisterWorkerResponse)
        return response

    def heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest
    ) -> coordinator_pb2.HeartbeatResponse:
        response = self._call("Heartbeat", "Heartbeat", request)
        assert isinstance(response, coordinator_pb2.HeartbeatResponse)
        return response

    def report_progress(
        self, request: coordinator_pb2.ReportProgressRequest
    ) -> coordinator_pb2.ReportProgressResponse:
        response = self._call("ReportProgress", "ReportProgress", request)
        assert isinstance(response, coordinator_pb2.ReportProgressResponse)
        return response

    def task_exited(
        self, request: coordinator_pb2.TaskExitedRequest
    ) -> coordinator_pb2.TaskExitedResponse:
        response = self._call("TaskExited", "TaskExited", request)
        assert isinstance(response, coordinator_pb2.TaskExitedResponse)
        return response

    def report_profile(
        self, request: coordinator_pb2.ReportProfileRequest
    ) -> coordinator_pb2.ReportProfileResponse:
        response = self._call("ReportProfile", "ReportProfile", request)
        assert isinstance(response, coordinator_pb2.ReportProfileResponse)
        return response

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
