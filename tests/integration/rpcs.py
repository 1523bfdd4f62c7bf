"""Calling any RPC by its descriptor, so that tests can sweep every method of a service
(a method added to a .proto is swept as soon as its stubs are generated)."""

from __future__ import annotations

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


def code_of(
    channel: grpc.Channel,
    method: MethodDescriptor,
    request: Message | None = None,
    metadata: Metadata = (),
    timeout: float = 10.0,
) -> grpc.StatusCode:
    """Call `method` with `request` (an empty one by default): OK, or the status it fails
    with. A streamed response is read up to its first message (or its end)."""
    if request is None:
        request = empty_request(method)
    serialize = type(request).SerializeToString
    deserialize = GetMessageClass(method.output_type).FromString
    path = path_of(method)
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
            channel.stream_unary(path, serialize, deserialize)(
                iter([request]), metadata=metadata, timeout=timeout
            )
        else:
            channel.unary_unary(path, serialize, deserialize)(
                request, metadata=metadata, timeout=timeout
            )
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)
