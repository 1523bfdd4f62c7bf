"""Errors of the master's domain. The service layer maps each to one gRPC status code
(master/service/status.py); nothing else decides codes."""

from __future__ import annotations


class MasterError(Exception):
    """Base of the master's deliberate errors."""


class InvalidArgumentError(MasterError):
    """A request field is wrong; `field` is its path in the request (``spec.num_gpus``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class PermissionDeniedError(MasterError):
    """The caller is known but may not do this."""


class UnauthenticatedError(MasterError):
    """No credentials, or credentials the master does not accept."""


class FailedPreconditionError(MasterError):
    """The request is valid but the system is not in a state that allows it."""


class UnavailableError(MasterError):
    """The master is shutting down, or a worker it must reach does not answer."""
