"""Calling any RPC by its descriptor, so that tests can sweep every method of a service
(a method added to a .proto is swept as soon as its stubs are generated)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

Metadata = tuple[tuple[str, str], ...]


def methods(service: ServiceDescriptor) -> list[MethodDescriptor]:
    return list(service.methods)


def path_of(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def empty_request(method: MethodDescriptor) -> Message:
    return GetMessageClass(method.input_type)()


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a call ended: its status, the error's details and trailing metadata, and the
    response of a unary call that succeeded (None for a stream or an error)."""

    code: grpc.StatusCode
    details: str = ""
    trailing: Metadata = ()
    response: Message | None = None


def call(
    channel: grpc.Channel,
    method: MethodDescriptor,
    request: Message | None = None,
    metadata: Metadata = (),
    timeout: float = 10.0,
) -> Outcome:
    """Call `method` with `request` (an empty one by default). A streamed response is read
    up to its first message (or its end)."""
    if request is None:
        request = empty_request(method)
    serialize = type(request).SerializeToString
    deserialize = GetMessageClass(method.output_type).FromString
    path = path_of(method)
    response: Message | None = None
    try:
        if method.server_streaming:
            if method.client_streaming:
                stream = channel.stream_stream(path, serialize, deserialize)(
                    iter([request]), metadata=metadata, timeout=timeout
                )
            else:
                stream = channel.unary_stream(path, serialize, deserialize)(
                    request, metadata=metadata, timeout=timeout
                )
            for _ in stream:
                break
            stream.cancel()  # type: ignore[no-untyped-call]
        elif method.client_streaming:
            response = channel.stream_unary(path, serialize, deserialize)(
                iter([request]), metadata=metadata, timeout=timeout
            )
        else:
            response = channel.unary_unary(path, serialize, deserialize)(
                request, metadata=metadata, timeout=timeout
            )
    except grpc.RpcError as exc:
        error: Any = exc
        return Outcome(error.code(), error.details() or "", tuple(error.trailing_metadata() or ()))
    return Outcome(grpc.StatusCode.OK, response=response)


def code_of(
    channel: grpc.Channel,
    method: MethodDescriptor,
    request: Message | None = None,
    metadata: Metadata = (),
    timeout: float = 10.0,
) -> grpc.StatusCode:
    """The status `method` answers `request` with (see :func:`call`)."""
    return call(channel, method, request, metadata, timeout).code


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)
