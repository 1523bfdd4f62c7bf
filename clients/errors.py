"""Errors the client raises, mapped from gRPC status codes in one place (:func:`from_rpc_error`).

Catch :class:`HadarError` for everything; the subclasses say what a caller can act on.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Only annotations here: `hctl` imports this module before it knows whether the command
    # talks to the master at all, and gRPC takes a while to load.
    import grpc


class HadarError(Exception):
    """Base of every error the client raises. ``details`` is the master's message."""

    def __init__(self, details: str, *, code: grpc.StatusCode | None = None) -> None:
        super().__init__(details)
        self.details = details
        self.code = code


class NotFound(HadarError):  # noqa: N818 - the gRPC status names read best
    """The job, node or token does not exist (NOT_FOUND)."""


class PermissionDenied(HadarError):  # noqa: N818 - the gRPC status names read best
    """The caller may not do this (PERMISSION_DENIED), e.g. cancel another user's job."""


class Unauthenticated(PermissionDenied):
    """No token, or a token the master does not accept (UNAUTHENTICATED)."""


class InvalidArgument(HadarError):  # noqa: N818 - the gRPC status names read best
    """The request was rejected (INVALID_ARGUMENT); ``field`` names the bad field if known."""

    def __init__(
        self, details: str, *, field: str = "", code: grpc.StatusCode | None = None
    ) -> None:
        super().__init__(details, code=code)
        self.field = field


class Conflict(HadarError):  # noqa: N818 - the gRPC status names read best
    """The request clashes with the current state (ALREADY_EXISTS, ABORTED,
    FAILED_PRECONDITION), e.g. a concurrent change or a node in the wrong state."""


class ResourceExhausted(HadarError):  # noqa: N818 - the gRPC status names read best
    """A limit refused the request (RESOURCE_EXHAUSTED): too many of the caller's jobs wait,
    it submits too fast, or the message is too large. ``retry_after_s``: when the master says
    a retry may pass (submission rate), else None."""

    def __init__(
        self,
        details: str,
        *,
        retry_after_s: float | None = None,
        code: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(details, code=code)
        self.retry_after_s = retry_after_s


class Unavailable(HadarError):  # noqa: N818 - the gRPC status names read best
    """The master cannot be reached, or did not answer in time (UNAVAILABLE,
    DEADLINE_EXCEEDED)."""


class DeadlineExceeded(Unavailable):
    """The call's deadline passed before the master answered."""


# The master starts INVALID_ARGUMENT details with the field path: "spec.num_gpus: must be >= 1".
_FIELD_PREFIX = re.compile(r"^\s*(?:invalid\s+)?([A-Za-z_][\w]*(?:(?:\.|\[)[\w\]\"']+)*)\s*:\s")
# Trailing metadata a server may set to name the bad field explicitly.
FIELD_METADATA_KEY = "x-hadar-field"
# Trailing metadata: seconds after which a refused submission may pass the rate limit.
RETRY_AFTER_METADATA_KEY = "x-hadar-retry-after-s"


def field_of(details: str) -> str:
    """The field path a message starts with (``"spec.num_gpus: ..."`` -> ``spec.num_gpus``)."""
    match = _FIELD_PREFIX.match(details)
    return match.group(1) if match else ""


@cache
def _classes_by_code() -> dict[grpc.StatusCode, type[HadarError]]:
    import grpc

    return {
        grpc.StatusCode.NOT_FOUND: NotFound,
        grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
        grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
        grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
        grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
        grpc.StatusCode.ALREADY_EXISTS: Conflict,
        grpc.StatusCode.ABORTED: Conflict,
        grpc.StatusCode.FAILED_PRECONDITION: Conflict,
        grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
        grpc.StatusCode.UNAVAILABLE: Unavailable,
        grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    }


def from_rpc_error(error: grpc.RpcError) -> HadarError:
    """The :class:`HadarError` for a failed call; codes with no better class map to the base."""
    code: grpc.StatusCode | None = None
    details = ""
    code_of = getattr(error, "code", None)
    if callable(code_of):
        code = code_of()
    details_of = getattr(error, "details", None)
    if callable(details_of):
        details = details_of() or ""
    if not details:
        details = code.name.lower().replace("_", " ") if code is not None else str(error)
    cls = _classes_by_code().get(code, HadarError) if code is not None else HadarError
    if cls is InvalidArgument:
        return InvalidArgument(details, field=_field_from(error, details), code=code)
    if cls is ResourceExhausted:
        return ResourceExhausted(details, retry_after_s=_retry_after(error), code=code)
    return cls(details, code=code)


def _trailing(error: grpc.RpcError, key: str) -> str | None:
    trailing = getattr(error, "trailing_metadata", None)
    if callable(trailing):
        for name, value in trailing() or ():
            if name == key:
                return value.decode() if isinstance(value, bytes) else str(value)
    return None


def _retry_after(error: grpc.RpcError) -> float | None:
    value = _trailing(error, RETRY_AFTER_METADATA_KEY)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _field_from(error: grpc.RpcError, details: str) -> str:
    named = _trailing(error, FIELD_METADATA_KEY)
    return named if named is not None else field_of(details)
