"""The worker's sd_notify pieces: the watchdog interval systemd asks for, and job processes
not inheriting systemd's notification variables."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from worker.agent.agent import job_base_env
from worker.agent.systemd import notify, watchdog_interval_s


def test_watchdog_interval_is_read_for_this_process_only() -> None:
    """WATCHDOG_USEC in seconds; none when unset, zero, or addressed to another pid."""
    assert watchdog_interval_s({}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "60000000"}) == 60.0
    own = {"WATCHDOG_USEC": "2500000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval_s(own) == 2.5
    assert watchdog_interval_s({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}) is None


def test_notify_sends_one_datagram_and_is_silent_without_systemd(tmp_path: Path) -> None:
    """With NOTIFY_SOCKET the message arrives as is; without it (or with the socket gone)
    notify answers False instead of raising."""
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        assert notify("READY=1\nSTATUS=up", {"NOTIFY_SOCKET": str(path)})
        assert sock.recv(64) == b"READY=1\nSTATUS=up"
    assert not notify("READY=1", {})
    assert not notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})


def test_jobs_do_not_inherit_the_agents_settings_or_systemd_variables() -> None:
    """A job must neither see the cluster token nor be able to notify for the agent."""
    env = job_base_env(
        {
            "PATH": "/usr/bin",
            "HADAR_WORKER_TOKEN": "secret",
            "NOTIFY_SOCKET": "/run/systemd/notify",
            "WATCHDOG_USEC": "60000000",
            "WATCHDOG_PID": "1",
        }
    )
    assert env == {"PATH": "/usr/bin"}
