"""The connection to the master's Coordinator service, behind a seam."""

from __future__ import annotations

from typing import Protocol

import grpc

from protos.hadar.v1 import coordinator_pb2, coordinator_pb2_grpc

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


class GrpcMasterClient:
    """Calls the master over gRPC with the cluster token; every failure is a MasterError."""

    def __init__(
        self,
        address: str,
        token: str = "",
        timeout_s: float = 10.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.address = address
        self._channel = (
            grpc.secure_channel(address, credentials, options=RECONNECT_OPTIONS)
            if credentials is not None
            else grpc.insecure_channel(address, options=RECONNECT_OPTIONS)
        )
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout_s

    def _call(self, name: str, method: object, request: object) -> object:
        assert callable(method)
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise MasterError(f"{name} to {self.address}: {code}: {details}", code) from exc

    def register(
        self, request: coordinator_pb2.RegisterWorkerRequest
    ) -> coordinator_pb2.RegisterWorkerResponse:
        response = self._call("RegisterWorker", self._stub.RegisterWorker, request)
        assert isinstance(response, coordinator_pb2.RegisterWorkerResponse)
        return response

    def heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest
    ) -> coordinator_pb2.HeartbeatResponse:
        response = self._call("Heartbeat", self._stub.Heartbeat, request)
        assert isinstance(response, coordinator_pb2.HeartbeatResponse)
        return response

    def report_progress(
        self, request: coordinator_pb2.ReportProgressRequest
    ) -> coordinator_pb2.ReportProgressResponse:
        response = self._call("ReportProgress", self._stub.ReportProgress, request)
        assert isinstance(response, coordinator_pb2.ReportProgressResponse)
        return response

    def task_exited(
        self, request: coordinator_pb2.TaskExitedRequest
    ) -> coordinator_pb2.TaskExitedResponse:
        response = self._call("TaskExited", self._stub.TaskExited, request)
        assert isinstance(response, coordinator_pb2.TaskExitedResponse)
        return response

    def report_profile(
        self, request: coordinator_pb2.ReportProfileRequest
    ) -> coordinator_pb2.ReportProfileResponse:
        response = self._call("ReportProfile", self._stub.ReportProfile, request)
        assert isinstance(response, coordinator_pb2.ReportProfileResponse)
        return response

    def close(self) -> None:
        self._channel.close()
