"""sd_notify without a dependency: one datagram to $NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send `message` (e.g. ``READY=1``) to systemd; False when not run under systemd."""
    path = os.environ.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    # A leading '@' names a socket in the abstract namespace.
    address = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())
    return True
