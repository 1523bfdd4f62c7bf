"""`hctl run --pty` on this side: the terminal is put back as it was however the session
ends, and without a terminal hctl refuses before submitting anything."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import termios

import pytest

from clients.cli.session import raw_terminal, window_size


def test_raw_mode_is_left_as_the_terminal_was_even_on_an_exception() -> None:
    """Inside, echo and line editing and key signals are off; after an exception in the
    block the saved settings are back."""
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        with pytest.raises(RuntimeError), raw_terminal(slave):
            inside = termios.tcgetattr(slave)
            assert not inside[3] & (termios.ECHO | termios.ICANON | termios.ISIG)
            raise RuntimeError("the connection broke")
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_the_window_size_is_read_from_the_terminal() -> None:
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 27, 91, 0, 0))
        assert window_size(slave) == (27, 91)
    finally:
        os.close(master)
        os.close(slave)


def _hctl_run(*args: str) -> subprocess.CompletedProcess[str]:
    """hctl run without a terminal, against an address that reaches nothing."""
    return subprocess.run(
        [sys.executable, "-m", "clients.cli.main", "run", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "HADAR_MASTER": "127.0.0.1:1", "HADAR_TOKEN": "x"},
        timeout=60,
        check=False,
    )


def test_without_a_terminal_hctl_run_pty_is_a_usage_error() -> None:
    """Standard input not a terminal: exit 2 with what to run instead, and no master asked
    (the address given reaches nothing)."""
    done = _hctl_run("--pty", "--", "bash")
    assert done.returncode == 2, done.stderr
    assert "--pty needs a terminal on standard input" in done.stderr
    assert "hctl run -- CMD" in done.stderr


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--preemptible"], "drop --preemptible"),
        (["--retries", "2"], "drop --retries"),
        (["--output", "out.txt"], "drop --output"),
        (["--script", "--iterations", "10"], "not --workload or --script"),
    ],
)
def test_flags_a_session_cannot_take_are_named(flags: list[str], words: str) -> None:
    """What an interactive session cannot be is refused before anything is submitted,
    naming the flag to drop."""
    done = _hctl_run("--pty", *flags, "--", "bash")
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
