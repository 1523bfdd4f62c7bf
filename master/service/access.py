"""Who may call which method of the master: one server interceptor in front of every service.

Every method is looked up in a table built from the service descriptors: Hadar methods
need a user's API token, Coordinator methods the cluster token, health and reflection stay
open so that load balancers and grpcurl can probe. A method the table does not name is
refused, so nothing new is left open by accident.

gRPC runs interceptors on its single polling thread, so checking a token there (a database
read on a cache miss) would stall every call: the interceptor only wraps the handler, and
the check runs first thing in the wrapped handler on the server's thread pool, before the
request is looked at. The authenticated caller reaches the servicer through a context
variable that lives only for the call's own code (see :func:`current_caller`).
"""

from __future__ import annotations

import contextvars
import enum
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc
import structlog
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from master.errors import PermissionDeniedError, UnauthenticatedError, UnavailableError
from master.jobs.manager import Caller
from master.process.metrics import MasterMetrics
from master.service.admission import Admission, Ticket
from master.service.auth import Authenticator
from master.service.status import abort_with, metadata, status_for
from protos.hadar.v1 import coordinator_pb2, hadar_pb2

log = structlog.get_logger(__name__)


class Access(enum.Enum):
    """What a method asks of its caller."""

    OPEN = "open"
    USER = "user"
    WORKER = "worker"


SERVICE_ACCESS: tuple[tuple[ServiceDescriptor, Access], ...] = (
    (hadar_pb2.DESCRIPTOR.services_by_name["Hadar"], Access.USER),
    (coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"], Access.WORKER),
    (health_pb2.DESCRIPTOR.services_by_name["Health"], Access.OPEN),
    (reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"], Access.OPEN),
)

# Workers act for the cluster, not for a person.
WORKER = Caller(user="", admin=False)
# The workers' calls that wait for the store; heartbeats and registrations are not among them.
WORKER_REPORTS = frozenset(
    f"/{coordinator_pb2.DESCRIPTOR.services_by_name['Coordinator'].full_name}/{name}"
    for name in ("ReportProgress", "TaskExited", "ReportProfile")
)

_CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("hadar_caller")


def method_path(service: ServiceDescriptor, method: str) -> str:
    """The path gRPC names a method by: ``/hadar.v1.Hadar/SubmitJob``."""
    return f"/{service.full_name}/{method}"


def access_table(
    services: tuple[tuple[ServiceDescriptor, Access], ...] = SERVICE_ACCESS,
) -> dict[str, Access]:
    """Every method of every listed service, by path."""
    return {
        method_path(service, method.name): access
        for service, access in services
        for method in service.methods
    }


def current_caller() -> Caller:
    """The caller the interceptor authenticated for the call being served.

    Fails closed: a servicer reached without the interceptor (a wiring mistake) refuses the
    call instead of serving it anonymously.
    """
    try:
        return _CALLER.get()
    except LookupError:
        log.error("a user call reached its servicer without an authenticated caller")
        raise UnauthenticatedError("no authenticated caller") from None


class AccessInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Authenticates every call by its method's :class:`Access` before the handler runs."""

    def __init__(
        self,
        auth: Authenticator,
        metrics: MasterMetrics,
        table: Mapping[str, Access] | None = None,
        active: Callable[[], bool] | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._auth = auth
        # Caps on users' streams and calls in flight; None: every call is taken on.
        self._admission = admission
        self._metrics = metrics
        self._table = dict(access_table() if table is None else table)
        # Whether this master may serve (it holds an unexpired term); None: always.
        self._active = active

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None  # gRPC answers UNIMPLEMENTED
        path = handler_call_details.method
        access = self._table.get(path)
        if access is Access.OPEN:
            return handler
        streaming = handler.unary_stream is not None or handler.stream_stream is not None
        return _wrap(
            handler,
            lambda context: self._check(path, access, context, streaming),
            self._release,
        )

    def _release(self, ticket: Ticket) -> None:
        if self._admission is not None:
            self._admission.leave(ticket)

    def _check(
        self, path: str, access: Access | None, context: grpc.ServicerContext, streaming: bool
    ) -> tuple[Caller, Ticket | None]:
        """The caller of a call to `path` and, for a user's call, its admission ticket; or
        the call is aborted with the refusal's status."""
        started = time.perf_counter()
        try:
            if self._active is not None and not self._active():
                # Lost its term and about to exit: even a read could hand a worker a stale
                # answer (a heartbeat's stop list), so nothing is served.
                raise UnavailableError("this master is no longer the active one")
            if access is None:
                raise PermissionDeniedError(f"{path} is open to nobody")
            if access is Access.WORKER:
                self._auth.worker(metadata(context))
                if self._admission is None or path not in WORKER_REPORTS:
                    return WORKER, None
                return WORKER, self._admission.enter_report()
            caller = self._auth.user(metadata(context))
            if self._admission is None:
                return caller, None
            return caller, self._admission.enter(caller.user, streaming=streaming)
        except Exception as exc:
            code = status_for(exc)
            name = path.rsplit("/", 1)[-1]
            self._metrics.rpc_latency.labels(name, code.name if code else "INTERNAL").observe(
                time.perf_counter() - started
            )
            abort_with(context, name, exc)


def _wrap(
    handler: grpc.RpcMethodHandler[Any, Any],
    check: Callable[[grpc.ServicerContext], tuple[Caller, Ticket | None]],
    release: Callable[[Ticket], None],
) -> grpc.RpcMethodHandler[Any, Any]:
    """`handler` with `check` run before its behaviour, the caller visible inside it only,
    and the call's admission ticket given back when it ends."""

    def entered(context: grpc.ServicerContext) -> tuple[contextvars.Context, Ticket | None]:
        caller, ticket = check(context)
        scope = contextvars.copy_context()
        scope.run(_CALLER.set, caller)
        return scope, ticket

    def unary(behaviour: Callable[[Any, grpc.ServicerContext], Any]) -> Any:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            scope, ticket = entered(context)
            try:
                return scope.run(behaviour, request, context)
            finally:
                if ticket is not None:
                    release(ticket)

        return call

    def streaming(behaviour: Callable[[Any, grpc.ServicerContext], Iterator[Any]]) -> Any:
        def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            scope, ticket = entered(context)
            if ticket is not None:
                # A stream whose client went away may never be iterated again: the slot is
                # given back when gRPC ends the call, not only when the generator closes.
                context.add_callback(lambda: release(ticket))
            try:
                responses = scope.run(lambda: iter(behaviour(request, context)))
                # Each step runs in the call's scope, so the caller never leaks into
                # whatever the pool thread serves next, even when the client walks away.
                try:
                    while True:
                        try:
                            item = scope.run(next, responses)
                        except StopIteration:
                            return
                        yield item
                finally:
                    close = getattr(responses, "close", None)
                    if callable(close):
                        scope.run(close)
            finally:
                if ticket is not None:
                    release(ticket)

        return call

    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **options)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream), **options)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **options)
    assert handler.stream_stream is not None
    return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream), **options)
