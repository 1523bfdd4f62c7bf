"""Interactive tasks' pseudo-terminals: the command started on one, and what its owner's
terminal (hctl run --pty, relayed by the master) reads from and writes to it.

The command runs as a session leader with the terminal's slave side as its controlling
terminal, so the terminal driver does what it does under sshd: Ctrl-C typed as a byte
becomes SIGINT for the foreground job, a window size set with TIOCSWINSZ sends SIGWINCH, a
hang-up ends the session. Nothing of what the session shows is kept: a terminal transcript
holds whatever was typed (passwords included) and, as under srun --pty, is not a log.

A terminal has one reader at a time. When that reader goes away before the command has
ended, or when nobody attaches within :data:`ATTACH_WAIT_S` of the start, the terminal is
hung up (SIGHUP to the command's session): an unattended shell would hold its GPUs for
nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from protos.hadar.v1 import common_pb2

# How long a started session waits for its owner's terminal to attach before it is hung up.
ATTACH_WAIT_S = 120.0
# Largest piece of output read at once (and relayed as one message).
READ_BYTES = 16 * 1024
# How often a reader with nothing to read checks whether the command has exited.
POLL_S = 0.1
# Output a command's leftover background jobs may still write after it exited.
DRAIN_S = 0.2

# Becomes the session's command: takes the terminal (stdin) as its controlling terminal,
# drops to the job's user when told to, enters the working directory and executes the
# command. Popen has already made it a session leader (start_new_session). Run in a fresh
# isolated interpreter, as the agent's other steps that run as root: the environment comes on
# a pipe, never in argv (and only once the owner's terminal is attached: until then the step
# waits), and nothing of the job's loads before the drop.
_SESSION_STEP = (
    "import fcntl, json, os, sys, termios, warnings\n"
    "with os.fdopen(int(sys.argv[1]), 'rb') as pipe:\n"
    "    env = json.loads(pipe.read())\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "if sys.argv[2]:\n"
    "    os.setgroups([int(g) for g in sys.argv[4].split(',') if g])\n"
    "    os.setgid(int(sys.argv[3]))\n"
    "    os.setuid(int(sys.argv[2]))\n"
    "os.chdir(sys.argv[5])\n"
    "os.execvpe(sys.argv[6], sys.argv[6:], env)\n"
)
_STEP_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


class TerminalBusyError(Exception):
    """The terminal already has a reader, or was hung up."""


class Terminal:
    """The master side of a session's pseudo-terminal. Thread-safe."""

    def __init__(
        self,
        fd: int,
        session: int,
        exit_status: Callable[[], int | None],
        start: Callable[[], None],
        attach_wait_s: float = ATTACH_WAIT_S,
    ) -> None:
        self._fd = fd
        # Lets the command begin (called once).
        self._start: Callable[[], None] | None = start
        # The command's pid, which is also its session's and process group's id.
        self._session = session
        self._exit_status = exit_status
        self._lock = threading.Lock()
        self._attached = False
        self._hung_up = False
        self._closed = False
        # Lines of the worker's own for the person at the terminal (why it was stopped).
        self._notices: list[bytes] = []
        self._unattended = threading.Timer(attach_wait_s, self._hang_up_unattended)
        self._unattended.daemon = True
        self._unattended.start()

    @property
    def hung_up(self) -> bool:
        return self._hung_up

    def attach(self) -> None:
        """Takes the terminal for one reader; TerminalBusyError when it has one already or
        was hung up."""
        with self._lock:
            if self._hung_up or self._closed:
                raise TerminalBusyError("the session's terminal was hung up")
            if self._attached:
                raise TerminalBusyError("the session's terminal is attached already")
            self._attached = True
            self._unattended.cancel()

    def start(self) -> None:
        """Lets the command begin, once a reader is attached (and the window size set)."""
        with self._lock:
            begin, self._start = self._start, None
        if begin is not None:
            begin()

    def _hang_up_unattended(self) -> None:
        with self._lock:
            if self._attached:
                return
        self.hang_up()

    def hang_up(self) -> None:
        """Ends the session as a dropped line would: SIGHUP (and SIGCONT, for a stopped
        job) to the command's process group. Idempotent; nothing once it has exited."""
        with self._lock:
            if self._hung_up or self._exit_status() is not None:
                return
            self._hung_up = True
            self._unattended.cancel()
        for sig in (signal.SIGHUP, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._session, sig)

    def notice(self, text: str) -> None:
        """Shows `text` on the owner's terminal as a `hadar:` line of the worker's own."""
        with self._lock:
            self._notices.append(f"\r\nhadar: {text}\r\n".encode())

    def write(self, data: bytes) -> None:
        """Types `data` into the session; dropped once the session has ended."""
        view = memoryview(data)
        while view:
            with self._lock:
                if self._closed:
                    return
                try:
                    _, ready, _ = select.select([], [self._fd], [], POLL_S)
                    written = os.write(self._fd, view) if ready else 0
                except OSError:
                    return
            if self._exit_status() is not None:
                return
            view = view[written:]

    def resize(self, rows: int, cols: int) -> None:
        """Sets the window size; the terminal driver tells the foreground job (SIGWINCH)."""
        with self._lock:
            if self._closed:
                return
            with contextlib.suppress(OSError):
                fcntl.ioctl(self._fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _read(self) -> bytes | None:
        """Output ready now (b"" when none); None once the terminal has no writer left."""
        with self._lock:
            if self._closed:
                return None
            try:
                ready, _, _ = select.select([self._fd], [], [], 0)
                if not ready:
                    return b""
                data = os.read(self._fd, READ_BYTES)
            except OSError as exc:
                # Linux answers EIO once every holder of the slave side has closed it.
                if exc.errno in (errno.EIO, errno.EBADF):
                    return None
                raise
            return data if data else None

    def _take_notices(self) -> list[bytes]:
        with self._lock:
            notices, self._notices = self._notices, []
            return notices

    def output(self, active: Callable[[], bool]) -> Iterator[bytes | int]:
        """What the session shows, as it comes (bytes), then its exit status (an int,
        negative: killed by that signal) once the command has exited and its output is
        read. Ends early, with no status, once `active` turns false."""
        exited_at: float | None = None
        while active():
            yield from self._take_notices()
            data = self._read()
            if data:
                yield data
                continue
            status = self._exit_status()
            if status is not None:
                now = time.monotonic()
                exited_at = now if exited_at is None else exited_at
                # Background jobs the command left may hold the terminal open: what they
                # write a moment after is shown, but they do not hold the end.
                if data is None or now - exited_at >= DRAIN_S:
                    yield from self._take_notices()
                    yield status
                    return
            if data is None:
                # Nothing more will come (a read answers at once): wait for the exit.
                time.sleep(POLL_S)
            else:
                self._wait_readable(POLL_S)

    def _wait_readable(self, timeout_s: float) -> None:
        with self._lock:
            if self._closed:
                return
            fd = self._fd
        # Outside the lock, so that writes and resizes go on; a close meanwhile makes the
        # wait end early at worst (the next read finds the terminal closed).
        with contextlib.suppress(OSError, ValueError):
            select.select([fd], [], [], timeout_s)

    def release(self) -> None:
        """The session has ended: closed now unless a reader is attached, which closes it
        once it has read the end."""
        with self._lock:
            attached = self._attached
        if not attached:
            self.close()

    def close(self) -> None:
        """Closes the master side (once the session has ended)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._unattended.cancel()
            with contextlib.suppress(OSError):
                os.close(self._fd)


class PtyProcess:
    """A session's command: a process handle (see worker.agent.processes) with its terminal.

    The process starts at once (it holds its place and is signalled and reaped as any
    task's) but waits for its environment on a pipe, which is written only when the owner's
    terminal attaches: the command starts with the window size of that terminal, and a
    command that is over in a moment (`hctl run --pty -- nvidia-smi`) has a reader for its
    output."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        fd: int,
        env_pipe: int,
        env: Mapping[str, str],
        attach_wait_s: float,
    ) -> None:
        self._popen = popen
        self._poll_lock = threading.Lock()
        self._env_pipe: int | None = env_pipe
        self._env = dict(env)
        self.terminal = Terminal(fd, popen.pid, self.poll_status, self._go, attach_wait_s)

    def _take_pipe(self) -> int | None:
        with self._poll_lock:
            pipe, self._env_pipe = self._env_pipe, None
            return pipe

    def _go(self) -> None:
        # From Terminal.start. The step reads the pipe to its end while this writes, so an
        # environment larger than the pipe's buffer does not block.
        fd = self._take_pipe()
        if fd is None:
            return
        with os.fdopen(fd, "wb") as pipe, contextlib.suppress(BrokenPipeError):
            pipe.write(json.dumps(self._env).encode())

    @property
    def pid(self) -> int:
        return self._popen.pid

    def poll_status(self) -> int | None:
        with self._poll_lock:
            return self._popen.poll()

    def poll(self) -> int | None:
        code = self.poll_status()
        if code is not None:
            # What the session left in its process group must not outlive it.
            self.signal_group(signal.SIGKILL)
            # Never started (hung up while waiting): its pipe is the agent's to close.
            unused = self._take_pipe()
            if unused is not None:
                os.close(unused)
        return code

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, sig)


def start_session(
    python: str,
    argv: list[str],
    env: Mapping[str, str],
    cwd: Path,
    ids: tuple[int, int, tuple[int, ...]] | None,
    attach_wait_s: float = ATTACH_WAIT_S,
) -> PtyProcess:
    """Starts the step that will run `argv` on a new pseudo-terminal, as the leader of a new
    session, as the user `ids` (uid, gid, groups) when given; the command itself starts
    when the terminal is started (see PtyProcess). Raises OSError."""
    master, slave = pty.openpty()
    try:
        os.set_inheritable(slave, False)
        if ids is not None:
            # The user's own terminal, as a login gives it: programs that open it again by
            # name (`tty`, `script`, ssh's password prompt) may, and other users may not.
            os.fchown(slave, ids[0], -1)
            os.fchmod(slave, 0o620)
        uid, gid, groups = ("", "", "")
        if ids is not None:
            uid, gid, groups = str(ids[0]), str(ids[1]), ",".join(str(g) for g in ids[2])
        read_end, write_end = os.pipe()
        try:
            step = [python, "-I", "-S", "-c", _SESSION_STEP, str(read_end), uid, gid, groups]
            popen = subprocess.Popen(
                [*step, str(cwd), *argv],
                env=_STEP_ENV,
                cwd="/",
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                close_fds=True,
                pass_fds=(read_end,),
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    return PtyProcess(popen, master, write_end, env, attach_wait_s)


def relay(
    terminal: Terminal,
    first: common_pb2.TerminalInput,
    inputs: Iterator[common_pb2.TerminalInput],
    active: Callable[[], bool],
) -> Iterator[common_pb2.TerminalOutput]:
    """One attachment of `terminal`: `first` and then `inputs` typed into it on a thread of
    its own, its output back, and a last message with the command's exit. The terminal is
    hung up when the input ends or the caller goes away before the command has exited.
    TerminalBusyError when it is attached already or was hung up."""
    terminal.attach()

    def apply(message: common_pb2.TerminalInput) -> None:
        if message.HasField("size") and message.size.rows and message.size.cols:
            terminal.resize(message.size.rows, message.size.cols)
        if message.data:
            terminal.write(message.data)

    def pump() -> None:
        try:
            for message in inputs:
                apply(message)
        except Exception:
            pass
        finally:
            terminal.hang_up()

    try:
        # The window size first, so that the command starts with it.
        apply(first)
        terminal.start()
        threading.Thread(target=pump, name="terminal-input", daemon=True).start()
        for item in terminal.output(active):
            if isinstance(item, int):
                yield common_pb2.TerminalOutput(exited=True, exit_code=item)
                return
            yield common_pb2.TerminalOutput(data=item)
    finally:
        terminal.hang_up()
        terminal.close()
