"""Errors of the master's domain. The service layer maps each to one gRPC status code
(master/service/status.py); nothing else decides codes."""

from __future__ import annotations


class MasterError(Exception):
    """Base of the master's deliberate errors."""


class InvalidArgumentError(MasterError):
    """A request field is wrong; `field` is its path in the request (``spec.num_gpus``).

    The path travels in a gRPC trailer, which carries printable ASCII only: anything else
    in it (a map key the client chose) is escaped, in the message too, so both agree.
    """

    def __init__(self, field: str, message: str) -> None:
        field = "".join(ch if " " <= ch <= "~" else ascii(ch)[1:-1] for ch in field)
        super().__init__(f"{field}: {message}")
        self.field = field


class PermissionDeniedError(MasterError):
    """The caller is known but may not do this."""


class UnauthenticatedError(MasterError):
    """No credentials, or credentials the master does not accept."""


class FailedPreconditionError(MasterError):
    """The request is valid but the system is not in a state that allows it."""


class LogsNotFoundError(MasterError):
    """A job's output that was asked for does not exist: an attempt or rank the job has not
    had, or a task's logs its worker no longer keeps."""


class UnavailableError(MasterError):
    """The master is shutting down, or a worker it must reach does not answer."""


class ResourceExhaustedError(MasterError):
    """A per-user limit refuses the request; `retry_after_s` says when it may pass, if known."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
