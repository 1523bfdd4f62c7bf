"""An in-process Coordinator (the master's API for workers) that records what workers send
and answers as a test scripts it. Serves on 127.0.0.1, port 0 unless a port is given (to
play a restarted master on the same address). Like a real master it requires the cluster
token, the test workers' one unless told otherwise; `worker_stub` calls a worker with it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from protos.hadar.v1 import coordinator_pb2, coordinator_pb2_grpc, worker_pb2_grpc
from worker.agent.agent import TEST_CLUSTER_TOKEN


class FakeMaster(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(
        self,
        port: int = 0,
        token: str = TEST_CLUSTER_TOKEN,
        heartbeat_interval_s: float = 0.3,
        tls: tuple[bytes, bytes] | None = None,
    ) -> None:
        self.token = token
        self.heartbeat_interval_s = heartbeat_interval_s
        self.lock = threading.Lock()
        self.registrations: list[coordinator_pb2.RegisterWorkerRequest] = []
        self.heartbeats: list[coordinator_pb2.HeartbeatRequest] = []
        self.progress: list[coordinator_pb2.ProgressReport] = []
        self.exits: list[coordinator_pb2.TaskExitedRequest] = []
        self.exit_attempts = 0
        self.profiles: list[coordinator_pb2.ReportProfileRequest] = []
        self.auth_seen: list[str] = []
        # Scripted answers.
        self.register_stop: list[coordinator_pb2.TaskRef] = []
        self.reregister_once = False
        self.heartbeat_stop: list[coordinator_pb2.TaskRef] = []
        self.stale_jobs: set[int] = set()
        self.fail_exits = 0  # answer UNAVAILABLE to this many TaskExited calls first
        self.reject_exit_jobs: set[int] = set()  # answer INVALID_ARGUMENT for these jobs
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        if tls is not None:
            credentials = grpc.ssl_server_credentials([tls])
            self.port = self.server.add_secure_port(f"127.0.0.1:{port}", credentials)
        else:
            self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        if self.port == 0:
            raise OSError(f"cannot bind 127.0.0.1:{port}")
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> FakeMaster:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(grace=None).wait()

    def _auth(self, context: grpc.ServicerContext) -> None:
        presented = dict(context.invocation_metadata()).get("authorization", "")
        with self.lock:
            self.auth_seen.append(str(presented))
        if presented != f"Bearer {self.token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad cluster token")

    def RegisterWorker(self, request, context):
        self._auth(context)
        with self.lock:
            self.registrations.append(request)
            stop = list(self.register_stop)
            stop_keys = {(r.job_id, r.lease) for r in stop}
            keep = [
                coordinator_pb2.TaskRef(job_id=t.job_id, task_index=t.task_index, lease=t.lease)
                for t in request.tasks
                if (t.job_id, t.lease) not in stop_keys
            ]
        return coordinator_pb2.RegisterWorkerResponse(
            heartbeat_interval_s=self.heartbeat_interval_s, keep=keep, stop=stop
        )

    def Heartbeat(self, request, context):
        self._auth(context)
        with self.lock:
            self.heartbeats.append(request)
            reregister = self.reregister_once
            self.reregister_once = False
            stop = list(self.heartbeat_stop)
            self.heartbeat_stop = []
        return coordinator_pb2.HeartbeatResponse(
            reregister=reregister, stop=stop, heartbeat_interval_s=self.heartbeat_interval_s
        )

    def ReportProgress(self, request, context):
        self._auth(context)
        acks = []
        with self.lock:
            self.progress.extend(request.reports)
            for report in request.reports:
                acks.append(
                    coordinator_pb2.ProgressAck(
                        job_id=report.job_id,
                        task_index=report.task_index,
                        lease=report.lease,
                        stale=report.job_id in self.stale_jobs,
                    )
                )
        return coordinator_pb2.ReportProgressResponse(acks=acks)

    def TaskExited(self, request, context):
        self._auth(context)
        with self.lock:
            self.exit_attempts += 1
            if self.fail_exits > 0:
                self.fail_exits -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "master busy (scripted)")
            if request.job_id in self.reject_exit_jobs:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "kind: scripted refusal")
            self.exits.append(request)
        return coordinator_pb2.TaskExitedResponse(accepted=True)

    def ReportProfile(self, request, context):
        self._auth(context)
        with self.lock:
            self.profiles.append(request)
        return coordinator_pb2.ReportProfileResponse(stored=len(request.entries))

    # -- helpers for tests

    def exits_for(self, job_id: int) -> list[coordinator_pb2.TaskExitedRequest]:
        with self.lock:
            return [e for e in self.exits if e.job_id == job_id]

    def progress_for(self, job_id: int) -> list[coordinator_pb2.ProgressReport]:
        with self.lock:
            return [p for p in self.progress if p.job_id == job_id]

    def registration_count(self) -> int:
        with self.lock:
            return len(self.registrations)


def eventually(predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Waits for `predicate` to hold, failing the test with its last value at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    assert predicate(), f"condition not met within {timeout_s}s"


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    """Adds `authorization: Bearer <token>` to every call."""

    def __init__(self, token: str) -> None:
        self._metadata = ("authorization", f"Bearer {token}")

    def _details(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), self._metadata]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)


def worker_channel(
    address: str,
    token: str = TEST_CLUSTER_TOKEN,
    credentials: grpc.ChannelCredentials | None = None,
) -> grpc.Channel:
    """A channel to a worker that presents the cluster token on every call."""
    channel = (
        grpc.secure_channel(address, credentials)
        if credentials is not None
        else grpc.insecure_channel(address)
    )
    return grpc.intercept_channel(channel, _Bearer(token))


def worker_stub(address: str, token: str = TEST_CLUSTER_TOKEN) -> worker_pb2_grpc.WorkerStub:
    """A Worker stub that presents the cluster token (the test workers' one by default)."""
    return worker_pb2_grpc.WorkerStub(worker_channel(address, token))  # type: ignore[no-untyped-call]
