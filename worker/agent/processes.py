"""Starting and signalling a task's processes, behind a seam (real subprocesses or fakes)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from worker.agent import userdirs
from worker.agent.terminals import start_session
from worker.agent.userdirs import UserDirectoryError, ensure_directory


@dataclass(frozen=True, slots=True)
class RunAs:
    """The Unix identity a job's processes take when the agent runs as root."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    # Where the agent keeps the process's standard output and standard error (appended).
    stdout_path: Path
    stderr_path: Path
    run_as: RunAs | None = None
    # Files the job asked to have its output also appended to (sbatch's --output and
    # --error), absolute; written by a copying process that runs as the job's user.
    stdout_copy: Path | None = None
    stderr_copy: Path | None = None
    # An interactive session's command: started on a pseudo-terminal of its own (see
    # worker.agent.terminals) instead of writing to the log files, which it leaves empty.
    terminal: bool = False


class ProcessHandle(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """The exit status once exited (negative: killed by that signal), else None."""
        ...

    def signal_group(self, sig: int) -> None:
        """Sends `sig` to the process's whole group; a no-op when the group is gone."""
        ...


class ProcessLauncher(Protocol):
    def launch(self, spec: ProcessSpec) -> ProcessHandle:
        """Starts the process in its own session and process group. Raises OSError."""
        ...

    def make_directory(self, path: Path, run_as: RunAs | None) -> None:
        """Makes `path` and its missing parents as `run_as` (None: as the agent), so that
        nobody gets a directory they could not have made themselves; refuses symbolic
        links on the path. Raises UserDirectoryError with the reason."""
        ...


class _Subprocess:
    def __init__(
        self, popen: subprocess.Popen[bytes], copiers: Sequence[subprocess.Popen[bytes]] = ()
    ) -> None:
        self._popen = popen
        # Processes that copy its output to the job's own files; reaped once they end.
        self._copiers = list(copiers)
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self._popen.pid

    def poll(self) -> int | None:
        with self._lock:
            code = self._popen.poll()
            self._copiers = [c for c in self._copiers if c.poll() is None]
        if code is not None:
            # Children the rank left behind (data-loader workers) must not outlive it.
            self.signal_group(signal.SIGKILL)
        return code

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, sig)


# Drops to the job's user, then becomes the job. Done in a fresh interpreter rather than by
# Popen(user=..., group=...): those make CPython fork() instead of vfork(), and a fork of a
# process with gRPC's threads can crash in gRPC's fork handlers before the exec.
# The step runs as root, so it starts with a bare environment (a job's LD_PRELOAD must not
# load into it) and isolated Python (-I -S); the job's environment arrives on a pipe, not in
# argv (which every user can read), and the working directory is entered as the user.
# Everything the step imports is imported before the drop: the agent's interpreter may live
# where the job's user cannot read (os.execvpe imports warnings to search PATH).
_RUN_AS = (
    "import json, os, sys, warnings\n"
    "with os.fdopen(int(sys.argv[1]), 'rb') as pipe:\n"
    "    env = json.loads(pipe.read())\n"
    "os.setgroups([int(g) for g in sys.argv[4].split(',') if g])\n"
    "os.setgid(int(sys.argv[3]))\n"
    "os.setuid(int(sys.argv[2]))\n"
    "os.chdir(sys.argv[5])\n"
    "os.execvpe(sys.argv[6], sys.argv[6:], env)\n"
)
_ROOT_STEP_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
# A directory on a hung network filesystem must not hold the agent up for ever.
_MAKE_DIRECTORY_TIMEOUT_S = 60.0


# Copies its standard input to its standard output (the agent's log of the stream) and
# appends it to the file named in argv[1] as well. It runs as the job's user, so the job's
# --output file is opened with that user's rights; a file it cannot open is reported in the
# log and the log is still written. It is in a session of its own: signals to the job's
# group do not reach it, and it ends when every holder of the pipe (the job) has exited.
_COPY = (
    "import os, sys\n"
    "if len(sys.argv) > 2:\n"
    # Started by a root agent: the interpreter is the agent's (which the job's user may not
    # be able to run), so it drops to the user itself before it opens anything.
    "    os.setgroups([int(g) for g in sys.argv[4].split(',') if g])\n"
    "    os.setgid(int(sys.argv[3]))\n"
    "    os.setuid(int(sys.argv[2]))\n"
    "def put(fd, data):\n"
    "    view = memoryview(data)\n"
    "    while view:\n"
    "        view = view[os.write(fd, view):]\n"
    "try:\n"
    "    copy = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\n"
    "except OSError as exc:\n"
    "    copy = None\n"
    "    put(1, f'hadar: cannot write {sys.argv[1]}: {exc.strerror}\\n'.encode())\n"
    "pending = b''\n"
    "while True:\n"
    "    data = os.read(0, 65536)\n"
    "    if data:\n"
    "        put(1, data)\n"
    "    pending += data\n"
    # Whole lines only: standard output and standard error may share one file through two
    # copiers, and a line written in pieces (print's text, then its newline) must not be
    # cut in two by the other stream's line.
    "    cut = max(pending.rfind(b'\\n'), pending.rfind(b'\\r')) + 1\n"
    "    if not data or len(pending) > 65536:\n"
    "        cut = len(pending)\n"
    "    if copy is not None and cut:\n"
    "        try:\n"
    "            put(copy, pending[:cut])\n"
    "        except OSError as exc:\n"
    "            os.close(copy)\n"
    "            copy = None\n"
    "            put(1, f'hadar: stopped writing {sys.argv[1]}: {exc.strerror}\\n'.encode())\n"
    "    pending = pending[cut:]\n"
    "    if not data:\n"
    "        break\n"
)


def _open_private(path: Path) -> int:
    """`path` opened for appending, created owner-only (0600) whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return fd


class SubprocessLauncher:
    """Real processes: each in a new session, so one signal reaches everything it started."""

    def __init__(self, python: str = sys.executable) -> None:
        # The interpreter that runs the privilege-dropping step and the output copiers.
        self._python = python

    def launch(self, spec: ProcessSpec) -> ProcessHandle:
        for path in (spec.stdout_path, spec.stderr_path):
            path.parent.mkdir(parents=True, exist_ok=True)
        run_as = spec.run_as
        if run_as is not None and run_as.uid == os.geteuid():
            run_as = None
        if spec.terminal:
            for path in (spec.stdout_path, spec.stderr_path):
                os.close(_open_private(path))
            ids = None if run_as is None else (run_as.uid, run_as.gid, run_as.groups)
            return start_session(self._python, list(spec.argv), spec.env, spec.cwd, ids)
        copiers: list[subprocess.Popen[bytes]] = []
        with contextlib.ExitStack() as opened:
            stdout = self._sink(spec.stdout_path, spec.stdout_copy, run_as, opened, copiers)
            stderr = self._sink(spec.stderr_path, spec.stderr_copy, run_as, opened, copiers)
            popen = self._popen(
                list(spec.argv), spec.env, spec.cwd, run_as, stdout=stdout, stderr=stderr
            )
        return _Subprocess(popen, copiers)

    def _sink(
        self,
        log_path: Path,
        copy: Path | None,
        run_as: RunAs | None,
        opened: contextlib.ExitStack,
        copiers: list[subprocess.Popen[bytes]],
    ) -> int:
        """The descriptor a stream of the job writes to: its log file, or a pipe to a copier
        that writes both the log and the job's own file. Closed when `opened` closes."""
        # The job's output is its owner's: readable by no other user of the server.
        log = opened.enter_context(os.fdopen(_open_private(log_path), "ab"))
        if copy is None:
            return log.fileno()
        read_end, write_end = os.pipe()
        opened.callback(os.close, write_end)
        argv = [self._python, "-I", "-S", "-c", _COPY, str(copy)]
        if run_as is not None:
            argv += [str(run_as.uid), str(run_as.gid), ",".join(str(g) for g in run_as.groups)]
        try:
            copier = subprocess.Popen(
                argv,
                env=_ROOT_STEP_ENV,
                cwd="/",
                stdin=read_end,
                stdout=log.fileno(),
                stderr=log.fileno(),
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(read_end)
        copiers.append(copier)
        return write_end

    def make_directory(self, path: Path, run_as: RunAs | None) -> None:
        if run_as is None:
            ensure_directory(str(path))
            return
        # Run in a separate process that drops to the user first (the same isolated root
        # step as a job's start), even when the agent already is the user: one code path.
        groups = ",".join(str(g) for g in run_as.groups)
        argv = [self._python, "-I", "-S", userdirs.__file__, str(run_as.uid), str(run_as.gid)]
        try:
            done = subprocess.run(
                [*argv, groups, str(path)],
                env=_ROOT_STEP_ENV,
                cwd="/",
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=_MAKE_DIRECTORY_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UserDirectoryError(f"cannot create {path} as {run_as.name}: {exc}") from exc
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip().splitlines()
            raise UserDirectoryError(
                f"{reason[-1] if reason else f'exit status {done.returncode}'} "
                f"(as user {run_as.name})"
            )

    def _popen(
        self,
        argv: list[str],
        env: Mapping[str, str],
        cwd: Path,
        run_as: RunAs | None,
        *,
        stdout: int,
        stderr: int,
    ) -> subprocess.Popen[bytes]:
        if run_as is None:
            return subprocess.Popen(
                argv,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                close_fds=True,
            )
        read_end, write_end = os.pipe()
        try:
            groups = ",".join(str(g) for g in run_as.groups)
            popen = subprocess.Popen(
                [
                    self._python,
                    "-I",
                    "-S",
                    "-c",
                    _RUN_AS,
                    str(read_end),
                    str(run_as.uid),
                    str(run_as.gid),
                    groups,
                    str(cwd),
                    *argv,
                ],
                env=_ROOT_STEP_ENV,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                close_fds=True,
                pass_fds=(read_end,),
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        # Written after the start, so an environment larger than the pipe cannot block it.
        with os.fdopen(write_end, "wb") as pipe, contextlib.suppress(BrokenPipeError):
            pipe.write(json.dumps(dict(env)).encode())
        return popen


class AdoptedProcess:
    """A task process that a previous agent started: not our child, so it is watched by pid,
    and only while /proc shows the same process (its environment names the job and the
    lease it was started for; a reused pid does not). It leaves no exit status:
    :meth:`poll` answers 0 once it is gone, and the exit is read from its progress file."""

    def __init__(self, pid: int, job_id: int, lease: int) -> None:
        self._pid = pid
        self._markers = (f"HADAR_JOB_ID={job_id}".encode(), f"HADAR_LEASE={lease}".encode())
        self._gone = False

    @property
    def pid(self) -> int:
        return self._pid

    def alive(self) -> bool:
        if not self._gone:
            self._gone = not is_process_of(self._pid, *self._markers)
        return not self._gone

    def poll(self) -> int | None:
        return None if self.alive() else 0

    def signal_group(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pid, sig)


def is_process_of(pid: int, *markers: bytes) -> bool:
    """Whether `pid` is a live (not zombie) process whose environment holds every marker."""
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        environ = (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return all(marker in environ for marker in markers)


@dataclass
class FakeProcess:
    """A process that exits when the test says so, or on a signal it is set to obey."""

    spec: ProcessSpec
    pid: int
    # Exit status on SIGTERM; None: ignores SIGTERM.
    on_sigterm: int | None = 0
    returncode: int | None = None
    signals: list[int] = field(default_factory=list)

    def poll(self) -> int | None:
        return self.returncode

    def signal_group(self, sig: int) -> None:
        self.signals.append(sig)
        if self.returncode is not None:
            return
        if sig == signal.SIGKILL:
            self.returncode = -signal.SIGKILL
        elif sig == signal.SIGTERM and self.on_sigterm is not None:
            self.returncode = self.on_sigterm

    def exit(self, code: int) -> None:
        self.returncode = code


class FakeLauncher:
    """Records what would have run; `fail_with` makes the next launches raise."""

    def __init__(self) -> None:
        self.processes: list[FakeProcess] = []
        self.fail_with: OSError | None = None
        self.directories: list[tuple[Path, RunAs | None]] = []
        self.on_sigterm: int | None = 0
        self._next_pid = 40_000

    def launch(self, spec: ProcessSpec) -> ProcessHandle:
        if self.fail_with is not None:
            raise self.fail_with
        self._next_pid += 1
        process = FakeProcess(spec, self._next_pid, on_sigterm=self.on_sigterm)
        self.processes.append(process)
        return process

    def make_directory(self, path: Path, run_as: RunAs | None) -> None:
        """Records the request; makes the directory as the test's own user."""
        self.directories.append((path, run_as))
        ensure_directory(str(path))
