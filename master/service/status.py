"""The one place where domain errors become gRPC status codes, plus RPC timing.

Servicers never call ``context.abort`` themselves: they raise domain errors, and the
decorators here turn each into its status code.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import grpc
import structlog

from master.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    LogsNotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from master.process.metrics import MasterMetrics
from store.errors import AlreadyExistsError, ConflictError, InvalidTransitionError, NotFoundError

log = structlog.get_logger(__name__)

FIELD_METADATA_KEY = "x-hadar-field"
RETRY_AFTER_METADATA_KEY = "x-hadar-retry-after-s"

STATUS_BY_ERROR: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (LogsNotFoundError, grpc.StatusCode.NOT_FOUND),
    (UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (InvalidTransitionError, grpc.StatusCode.FAILED_PRECONDITION),
    (AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (ConflictError, grpc.StatusCode.ABORTED),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
)

Servicer = TypeVar("Servicer")
Request = TypeVar("Request")
Response = TypeVar("Response")


def status_for(exc: Exception) -> grpc.StatusCode | None:
    for kind, code in STATUS_BY_ERROR:
        if isinstance(exc, kind):
            return code
    return None


def metadata(context: grpc.ServicerContext) -> dict[str, str]:
    return {
        key: value if isinstance(value, str) else value.decode(errors="replace")
        for key, value in context.invocation_metadata()
    }


def abort_with(context: grpc.ServicerContext, method: str, exc: Exception) -> NoReturn:
    """End the call with `exc`'s status code (INTERNAL, logged, for an unexpected error)."""
    code = status_for(exc)
    if code is None:
        log.exception("unexpected error serving a call", method=method)
        context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method}; see the master's log")
    if isinstance(exc, InvalidArgumentError):
        context.set_trailing_metadata(((FIELD_METADATA_KEY, exc.field),))
    if isinstance(exc, ResourceExhaustedError) and exc.retry_after_s is not None:
        context.set_trailing_metadata(((RETRY_AFTER_METADATA_KEY, f"{exc.retry_after_s:g}"),))
    context.abort(code, str(exc))


def unary(
    metrics: Callable[[Any], MasterMetrics],
) -> Callable[
    [Callable[[Servicer, Request, grpc.ServicerContext], Response]],
    Callable[[Servicer, Request, grpc.ServicerContext], Response],
]:
    """Map errors and time the call. `metrics(self)` gives the servicer's metrics."""

    def wrap(
        fn: Callable[[Servicer, Request, grpc.ServicerContext], Response],
    ) -> Callable[[Servicer, Request, grpc.ServicerContext], Response]:
        name = fn.__name__

        @functools.wraps(fn)
        def call(self: Servicer, request: Request, context: grpc.ServicerContext) -> Response:
            started = time.perf_counter()
            code = "OK"
            try:
                return fn(self, request, context)
            except Exception as exc:
                found = status_for(exc)
                code = found.name if found else "INTERNAL"
                abort_with(context, name, exc)
            finally:
                metrics(self).rpc_latency.labels(name, code).observe(time.perf_counter() - started)

        return call

    return wrap


def streaming(
    metrics: Callable[[Any], MasterMetrics],
) -> Callable[
    [Callable[[Servicer, Request, grpc.ServicerContext], Iterator[Response]]],
    Callable[[Servicer, Request, grpc.ServicerContext], Iterator[Response]],
]:
    """Like :func:`unary`, for server-streaming calls."""

    def wrap(
        fn: Callable[[Servicer, Request, grpc.ServicerContext], Iterator[Response]],
    ) -> Callable[[Servicer, Request, grpc.ServicerContext], Iterator[Response]]:
        name = fn.__name__

        @functools.wraps(fn)
        def call(
            self: Servicer, request: Request, context: grpc.ServicerContext
        ) -> Iterator[Response]:
            started = time.perf_counter()
            code = "OK"
            try:
                yield from fn(self, request, context)
            except Exception as exc:
                found = status_for(exc)
                code = found.name if found else "INTERNAL"
                abort_with(context, name, exc)
            finally:
                metrics(self).rpc_latency.labels(name, code).observe(time.perf_counter() - started)

        return call

    return wrap
