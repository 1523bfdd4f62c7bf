"""gRPC status codes map to the client's exception classes in one place."""

from __future__ import annotations

import grpc
import pytest

from clients import errors


class FailedCall(grpc.RpcError):
    """A failed call as grpc raises it: an RpcError that is also a Call."""

    def __init__(self, code: grpc.StatusCode, details: str = "", trailing=()) -> None:
        super().__init__(details)
        self._code = code
        self._details = details
        self._trailing = tuple(trailing)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        return self._trailing


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.NOT_FOUND, errors.NotFound),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgument),
        (grpc.StatusCode.ALREADY_EXISTS, errors.Conflict),
        (grpc.StatusCode.ABORTED, errors.Conflict),
        (grpc.StatusCode.FAILED_PRECONDITION, errors.Conflict),
        (grpc.StatusCode.UNAVAILABLE, errors.Unavailable),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.ResourceExhausted),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceeded),
        (grpc.StatusCode.INTERNAL, errors.HadarError),
    ],
)
def test_each_status_code_maps_to_its_exception(code, cls):
    """The exception class follows the status code and keeps the master's message."""
    error = errors.from_rpc_error(FailedCall(code, "the details"))
    assert type(error) is cls
    assert error.details == "the details"
    assert error.code == code


def test_subclasses_let_callers_catch_broadly():
    """Unauthenticated is a PermissionDenied, DeadlineExceeded an Unavailable, all HadarErrors."""
    assert issubclass(errors.Unauthenticated, errors.PermissionDenied)
    assert issubclass(errors.DeadlineExceeded, errors.Unavailable)
    for cls in (errors.NotFound, errors.InvalidArgument, errors.Conflict, errors.Unavailable):
        assert issubclass(cls, errors.HadarError)


def test_invalid_argument_names_the_field_from_the_message():
    """'spec.num_gpus: must be >= 1' names spec.num_gpus."""
    error = errors.from_rpc_error(
        FailedCall(grpc.StatusCode.INVALID_ARGUMENT, "spec.num_gpus: must be >= 1")
    )
    assert isinstance(error, errors.InvalidArgument)
    assert error.field == "spec.num_gpus"
    assert errors.field_of('spec.env["1X"]: bad name') == 'spec.env["1X"]'
    assert errors.field_of("invalid spec.name: empty") == "spec.name"
    assert errors.field_of("something went wrong") == ""


def test_invalid_argument_prefers_the_field_in_trailing_metadata():
    """A server that names the field in trailing metadata is believed over the message."""
    error = errors.from_rpc_error(
        FailedCall(
            grpc.StatusCode.INVALID_ARGUMENT,
            "bad value",
            [(errors.FIELD_METADATA_KEY, "spec.iterations")],
        )
    )
    assert isinstance(error, errors.InvalidArgument)
    assert error.field == "spec.iterations"


def test_resource_exhausted_carries_the_retry_hint_from_trailing_metadata():
    """The seconds the master says to wait come from x-hadar-retry-after-s; none: None."""
    hinted = errors.from_rpc_error(
        FailedCall(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "too fast",
            [(errors.RETRY_AFTER_METADATA_KEY, "2.5")],
        )
    )
    assert isinstance(hinted, errors.ResourceExhausted)
    assert hinted.retry_after_s == 2.5
    plain = errors.from_rpc_error(FailedCall(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many"))
    assert isinstance(plain, errors.ResourceExhausted)
    assert plain.retry_after_s is None


def test_empty_details_fall_back_to_the_code_name():
    """An error never has an empty message."""
    error = errors.from_rpc_error(FailedCall(grpc.StatusCode.UNAVAILABLE))
    assert error.details == "unavailable"
