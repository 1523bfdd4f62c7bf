"""sd_notify without a dependency: readiness, stopping, status and watchdog pings to
$NOTIFY_SOCKET (the master has its own copy: master and worker share no package but the
protos)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

# What systemd gives the service for notifications; a job process must not inherit them.
NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def notify(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send `message` (``READY=1``, ``WATCHDOG=1``, ...) to systemd; False when not run
    under systemd (no NOTIFY_SOCKET) or the socket is gone."""
    env = os.environ if environ is None else environ
    path = env.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    # A leading '@' names a socket in the abstract namespace.
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def watchdog_interval_s(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds within which systemd expects a WATCHDOG=1 ping (WatchdogSec=), or None when
    the watchdog is off or meant for another process."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 1_000_000
