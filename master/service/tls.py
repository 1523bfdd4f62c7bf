"""TLS credentials from the master's settings: the server side of its gRPC port, and the
client side of its channels to the workers. A missing or unreadable file is a SettingsError
naming the setting, raised when the master is built, before it serves anything."""

from __future__ import annotations

from pathlib import Path

import grpc

from master.settings import Settings, SettingsError


def read_pem(path: str, setting: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SettingsError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise SettingsError(f"{setting}: {path} is not a PEM file")
    return data


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS for the master's port (requiring client certificates with `tls_client_ca`), or
    None for plaintext."""
    if not settings.tls_cert:
        return None
    pair = (read_pem(settings.tls_key, "tls_key"), read_pem(settings.tls_cert, "tls_cert"))
    if not settings.tls_client_ca:
        return grpc.ssl_server_credentials([pair])
    return grpc.ssl_server_credentials(
        [pair],
        root_certificates=read_pem(settings.tls_client_ca, "tls_client_ca"),
        require_client_auth=True,
    )


def worker_channel_credentials(settings: Settings) -> grpc.ChannelCredentials | None:
    """TLS for calls to the workers, or None (plaintext) without `worker_ca_file`."""
    if not settings.worker_ca_file:
        return None
    roots = read_pem(settings.worker_ca_file, "worker_ca_file")
    if not settings.worker_client_cert:
        return grpc.ssl_channel_credentials(roots)
    return grpc.ssl_channel_credentials(
        roots,
        private_key=read_pem(settings.worker_client_key, "worker_client_key"),
        certificate_chain=read_pem(settings.worker_client_cert, "worker_client_cert"),
    )
