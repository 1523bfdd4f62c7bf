"""``hctl run --pty``: an interactive session, as ``srun --pty bash`` opens one. The job is
submitted interactive, waited for (Ctrl-C cancels it while it waits), and then this
terminal becomes the job's: raw mode, every byte typed (Ctrl-C included) and every window
size sent to the command's pseudo-terminal on its worker, everything it shows written
here, and hctl exits with the command's exit status. The terminal is restored however hctl
ends."""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import select
import signal
import struct
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from dataclasses import replace
from types import FrameType

from clients.cli.command import CliError, Context, ExitCode
from clients.types import Job, JobSpec, JobState, TerminalInput

# The exit status of a program killed by SIGINT, as shells report it.
INTERRUPTED = 130
# How often the keyboard reader looks whether the session is over.
POLL_S = 0.1
READ_BYTES = 4096


def window_size(fd: int) -> tuple[int, int] | None:
    """(rows, columns) of the terminal on `fd`; None when it has none."""
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        return None
    return (rows, cols) if rows and cols else None


class Keyboard:
    """What the session sends: keystrokes read from `fd` on a thread of its own, and the
    window size whenever SIGWINCH says it changed. Iterated by gRPC's sending thread."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: queue.Queue[TerminalInput | None] = queue.Queue()
        self._over = threading.Event()
        self._reader = threading.Thread(target=self._read, name="hctl-keyboard", daemon=True)

    def start(self) -> None:
        self._reader.start()

    def resized(self) -> None:
        size = window_size(self._fd)
        if size is not None:
            self._queue.put(TerminalInput(size=size))

    def _read(self) -> None:
        while not self._over.is_set():
            try:
                ready, _, _ = select.select([self._fd], [], [], POLL_S)
                if not ready:
                    continue
                data = os.read(self._fd, READ_BYTES)
            except OSError:
                return
            if not data:
                # The terminal went away: so does the session (the input stream ends).
                self._queue.put(None)
                return
            self._queue.put(TerminalInput(data=data))

    def close(self) -> None:
        self._over.set()
        self._queue.put(None)

    def __iter__(self) -> Iterator[TerminalInput]:
        while (item := self._queue.get()) is not None:
            yield item


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """The terminal on `fd` in raw mode (no echo, no line editing, no signals from keys)
    for the block, restored as it was however the block ends."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [], POLL_S)


def _wait_until_running(ctx: Context, job: Job) -> Job:
    """The job once it runs, or once it ended without running."""
    client = ctx.client()
    current = client.get_job(job.id)
    while current.state is not JobState.RUNNING and not current.state.terminal:
        for update in client.watch_jobs([job.id], include_initial=True):
            if update.job.id == job.id:
                current = update.job
                if current.state is JobState.RUNNING or current.state.terminal:
                    break
        else:
            current = client.get_job(job.id)
    return current


def _session_problem(spec: JobSpec) -> str | None:
    """Why `spec` cannot be an interactive session, naming the flag; None when it can."""
    from clients.types import ProgramKind

    if spec.program.kind is not ProgramKind.COMMAND:
        return "--pty runs a command (`-- CMD`), not --workload or --script"
    if spec.preemptible:
        return "a session is never preempted: drop --preemptible"
    if spec.forkable:
        return "a session runs as one: drop --elastic"
    if spec.shareable:
        return "a session does not share its GPUs: drop --shareable"
    if spec.max_retries:
        return "a session is never retried: drop --retries"
    if spec.output or spec.error:
        return "a session's output is its terminal: drop --output/--error"
    return None


def run_session(ctx: Context, spec: JobSpec) -> int:
    from clients.cli.jobs import WAIT_EXIT_CODES
    from clients.cli.run import exit_status

    problem = _session_problem(spec)
    if problem is not None:
        raise CliError(problem, ExitCode.USAGE, "see `hctl run --help`")
    stdin = sys.stdin.fileno()
    if not os.isatty(stdin):
        raise CliError(
            "--pty needs a terminal on standard input",
            ExitCode.USAGE,
            "run it from an interactive shell, or drop --pty to run the command in the "
            "foreground as a batch job (`hctl run -- CMD`)",
        )
    client = ctx.client()
    job = client.submit_job(replace(spec, interactive=True))
    ctx.note(f"job {job.id} ({job.spec.name}) submitted; waiting for GPUs (Ctrl-C cancels it)")
    try:
        ready = _wait_until_running(ctx, job)
    except KeyboardInterrupt:
        client.cancel_job(job.id, reason="its hctl run --pty was interrupted (Ctrl-C)")
        ctx.note(f"job {job.id} cancelled")
        return INTERRUPTED
    if ready.state is not JobState.RUNNING:
        reason = f": {ready.reason}" if ready.reason else ""
        ctx.note(f"job {job.id} {ready.state.value} before it ran{reason}")
        return int(WAIT_EXIT_CODES.get(ready.state, ExitCode.ERROR))
    nodes = ", ".join(sorted({t.node for t in ready.tasks})) or "its node"
    ctx.note(f"job {job.id} runs on {nodes}; the session ends when the command exits")
    sys.stdout.flush()
    code = _attach(ctx, job.id, stdin)
    if code is None:
        ctx.note(f"job {job.id}: the session ended without an exit status")
        return int(ExitCode.ERROR)
    return exit_status(code, int(ExitCode.ERROR))


def _attach(ctx: Context, job_id: int, stdin: int) -> int | None:
    """Relays the terminal until the command exits; its exit status (None: not told)."""
    client = ctx.client()
    stdout = sys.stdout.fileno()
    keyboard = Keyboard(stdin)

    def on_resize(signum: int, frame: FrameType | None) -> None:
        keyboard.resized()

    previous = signal.signal(signal.SIGWINCH, on_resize)
    code: int | None = None
    try:
        with raw_terminal(stdin):
            keyboard.start()
            for output in client.attach_job(job_id, keyboard, size=window_size(stdin)):
                if output.data:
                    _write_all(stdout, output.data)
                if output.exited:
                    code = output.exit_code
    finally:
        keyboard.close()
        signal.signal(signal.SIGWINCH, previous)
    return code
