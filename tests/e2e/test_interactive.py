"""`hctl run --pty -- bash` on a real local cluster, driven through a pseudo-terminal as a
person at a terminal would: the shell runs on the node, what is typed reaches it and what it
prints comes back, hctl exits with the shell's exit status, the session is a job with its
usage recorded, and the window size of hctl's terminal is the shell's, also after a
resize."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator

import pytest

from clients.localcluster import LocalCluster, parse_worker_groups
from clients.types import JobState
from tests.e2e.conftest import ROUND_S, Cluster, wait_for

pytestmark = pytest.mark.e2e

SESSION_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    local = LocalCluster(tmp_path_factory.mktemp("pty") / "cluster")
    local.up(parse_worker_groups("v100:1"), policy="fifo", round_seconds=ROUND_S, timeout=120)
    started = Cluster(local)
    try:
        yield started
    finally:
        started.reconnect()
        local.down(timeout=10)


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Terminal:
    """hctl on a pseudo-terminal of the test's: what it shows, and keys to type into it."""

    def __init__(self, cluster: Cluster, *args: str, rows: int, cols: int) -> None:
        self.fd, slave = os.openpty()
        _set_size(slave, rows, cols)
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("HADAR_MASTER", "HADAR_TOKEN")},
            "HADAR_CONFIG": str(cluster.local.config_path),
            "TERM": "xterm",
            # A prompt the test can wait for, whatever the user's shell startup sets.
            "PROMPT_COMMAND": "PS1='ready> '",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "clients.cli.main", "run", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        self.shown = b""

    def resize(self, rows: int, cols: int) -> None:
        _set_size(self.fd, rows, cols)
        os.kill(self.process.pid, signal.SIGWINCH)

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def read(self) -> None:
        ready, _, _ = select.select([self.fd], [], [], 0.2)
        if ready:
            # Once hctl has exited its end of the terminal is closed (EIO).
            with contextlib.suppress(OSError):
                self.shown += os.read(self.fd, 65536)

    def wait_shown(self, pattern: bytes, timeout: float = SESSION_S) -> None:
        deadline = time.monotonic() + timeout
        while re.search(pattern, self.shown) is None:
            assert time.monotonic() < deadline, f"{pattern!r} never shown: {self.shown!r}"
            assert self.process.poll() is None, f"hctl exited: {self.shown!r}"
            self.read()

    def wait_exit(self, timeout: float = SESSION_S) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, f"hctl did not exit: {self.shown!r}"
            self.read()
        self.read()
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.fd)


def test_a_shell_session_runs_on_the_node_and_exits_with_its_status(cluster: Cluster) -> None:
    """What is typed runs in the remote shell (the echo of `$((6*7))` shows 42, which the
    typed line itself does not hold), hctl exits with the shell's `exit 3`, and the session
    is an ended job with its GPU time recorded."""
    terminal = Terminal(cluster, "--pty", "--gpus", "1", "--", "bash", rows=30, cols=100)
    try:
        terminal.wait_shown(rb"job (\d+) runs on")
        match = re.search(rb"job (\d+) ", terminal.shown)
        assert match is not None
        job_id = int(match.group(1))
        terminal.wait_shown(rb"ready> ")
        terminal.type("echo hello-$((6*7)); exit 3\r")
        assert terminal.wait_exit() == 3
        assert b"hello-42" in terminal.shown
    finally:
        terminal.close()
    ended = cluster.wait_state(job_id, {JobState.FAILED}, timeout=30)
    assert ended.exit_code == 3 and ended.spec.interactive

    def recorded() -> bool:
        return any(
            r.job.id == job_id and r.gpu_seconds > 0 for r in cluster.client.job_history(limit=20)
        )

    wait_for(recorded, 30, f"the usage of job {job_id}")


def test_the_shell_sees_the_window_size_of_hctls_terminal_and_its_changes(
    cluster: Cluster,
) -> None:
    """`stty size` in the session shows the size of the terminal hctl runs on, and the new
    size once that terminal is resized (SIGWINCH); Ctrl-C interrupts the remote command and
    leaves hctl running; `exit 0` makes hctl exit 0."""
    terminal = Terminal(cluster, "--pty", "--", "bash", rows=37, cols=111)
    try:
        terminal.wait_shown(rb"ready> ")
        terminal.type("stty size\r")
        terminal.wait_shown(rb"\b37 111\r\n")
        terminal.resize(41, 123)
        deadline = time.monotonic() + SESSION_S
        while b"41 123" not in terminal.shown:
            assert time.monotonic() < deadline, terminal.shown
            # The resize travels apart from the keys: ask until it has arrived, one question
            # at a time (keys typed ahead would still be queued for the shell below).
            time.sleep(0.2)
            terminal.shown = b""
            terminal.type("stty size\r")
            terminal.wait_shown(rb"\d+ \d+\r\n[\s\S]*ready> ")
        # Ctrl-C interrupts the remote command, not hctl: the shell prompts again. The
        # command says when it runs: a Ctrl-C that reached the shell between reading the
        # line and starting the command would only be echoed.
        terminal.shown = b""
        terminal.type("sh -c 'echo zzz; exec sleep 30'; echo slept\r")
        terminal.wait_shown(rb"zzz\r\n")
        terminal.shown = b""
        terminal.type("\x03")
        terminal.wait_shown(rb"ready> ", timeout=10)
        assert b"slept" not in terminal.shown
        terminal.type("exit 0\r")
        assert terminal.wait_exit() == 0
    finally:
        terminal.close()


def test_a_killed_hctl_hangs_the_session_up_and_the_job_ends(cluster: Cluster) -> None:
    """hctl killed mid-session (no goodbye on the wire): the worker hangs the shell up and
    the job ends, without anyone cancelling it."""
    terminal = Terminal(cluster, "--pty", "--", "bash", rows=24, cols=80)
    try:
        terminal.wait_shown(rb"job (\d+) runs on")
        match = re.search(rb"job (\d+) ", terminal.shown)
        assert match is not None
        job_id = int(match.group(1))
        terminal.wait_shown(rb"ready> ")
        terminal.process.kill()
        terminal.process.wait()
    finally:
        terminal.close()
    ended = cluster.wait_state(job_id, {JobState.FAILED}, timeout=30)
    assert "killed by signal 1 " in ended.reason, ended.reason  # SIGHUP
