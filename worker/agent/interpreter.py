"""Whether the interpreter a root agent runs jobs with is one its jobs' users can run.

A root agent runs each job as its submitting Unix user, and built-in workloads with `python`
(by default its own interpreter). Installed where only root may read (a virtualenv under
/root, or one made from a pyenv or conda interpreter there), every such job would fail as it
starts ("No module named 'warnings'", or permission denied), on every node and for every
user. The agent checks at start instead and refuses to run, naming the path to fix:

- statically: every directory from / down to the interpreter, its real file (symbolic links
  resolved), its prefixes, standard library and site-packages must be searchable by other
  users, the directories Python lists readable too, and the files it reads readable;
- for real, when the node has the user `nobody`: the interpreter is started as `nobody` by
  the same privilege-dropping step jobs start through, and must import what a job needs.

Both take well under a second (two interpreter starts and a few dozen stat calls).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from worker.agent.processes import ProcessLauncher, ProcessSpec, RunAs
from worker.agent.users import SystemUsers, UnknownUserError, UserDirectory

# Who the real check runs as: an account with no rights of its own, on nearly every system.
PROBE_USER = "nobody"
PROBE_TIMEOUT_S = 20.0
FIX = "install the worker into a path every user can read, e.g. /opt/hadar (see docs/install.md)"

# Run by the interpreter under test, as the agent: where it reads from. Printed as JSON.
_LAYOUT = """
import json, os, sys, sysconfig, importlib.util
paths = sysconfig.get_paths()
spec = importlib.util.find_spec("worker")
print(json.dumps({
    "executable": sys.executable,
    "prefixes": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}),
    "libraries": sorted({paths["stdlib"], paths["platstdlib"], paths["purelib"],
                         paths["platlib"], os.path.dirname(os.__file__)}
                        | {p for p in sys.path if p.endswith("lib-dynload")}),
    "files": [os.__file__, os.path.join(os.path.dirname(os.__file__), "warnings.py")],
    "package": list(spec.submodule_search_locations or ()) if spec else [],
}))
"""
# Run as the probe user: what a job of a built-in workload needs before its own code runs.
_PROBE = "import warnings, encodings, importlib.util; importlib.util.find_spec('worker.workloads')"


class InterpreterError(Exception):
    """The interpreter cannot run jobs as other users; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Layout:
    """What an interpreter reads as it starts and imports the worker package."""

    executable: str
    prefixes: tuple[str, ...]
    libraries: tuple[str, ...]
    files: tuple[str, ...]
    package: tuple[str, ...]


def check_job_interpreter(
    python: str,
    launcher: ProcessLauncher,
    *,
    env: Mapping[str, str],
    users: UserDirectory | None = None,
    probe_user: str = PROBE_USER,
) -> None:
    """Raises InterpreterError when a root agent's jobs could not run `python`; nothing to
    check for an agent that is not root (its jobs run as itself)."""
    users = users or SystemUsers()
    if not users.agent_is_root():
        return
    layout = interpreter_layout(python)
    problem = first_inaccessible(python, layout)
    if problem:
        raise InterpreterError(f"{python} is not usable by other users ({problem}): {FIX}")
    try:
        run_as = users.lookup(probe_user)
    except UnknownUserError:
        return
    failure = probe_as(python, launcher, run_as, env)
    if failure:
        raise InterpreterError(
            f"{python} is not usable by other users (as user {run_as.name}: {failure}): {FIX}"
        )


def resolve(python: str) -> str:
    """The interpreter's path as a job's argv names it: a bare name is looked up on PATH."""
    if os.sep in python:
        return str(Path(python).absolute())
    found = shutil.which(python)
    if found is None:
        raise InterpreterError(f"{python}: no such interpreter on PATH")
    return found


def interpreter_layout(python: str) -> Layout:
    """Asks the interpreter itself (as the agent) where it reads from."""
    try:
        done = subprocess.run(
            [resolve(python), "-c", _LAYOUT],
            capture_output=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            cwd="/",
            stdin=subprocess.DEVNULL,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InterpreterError(f"cannot run {python}: {exc}") from exc
    if done.returncode != 0:
        raise InterpreterError(f"cannot run {python}: {_last_line(done.stderr)}")
    try:
        found = json.loads(done.stdout)
    except ValueError as exc:
        raise InterpreterError(f"{python} answered no layout: {_last_line(done.stdout)}") from exc
    return Layout(
        executable=str(found["executable"]),
        prefixes=tuple(found["prefixes"]),
        libraries=tuple(found["libraries"]),
        files=tuple(found["files"]),
        package=tuple(found["package"]),
    )


def first_inaccessible(python: str, layout: Layout) -> str:
    """The first path other users cannot use, as "PATH is mode 0700"; empty when none.

    Directories on the way must be searchable (o+x), the directories Python lists
    readable too (o+rx), files it reads readable (o+r), the interpreter executable (o+x).
    Each path is checked as written and with its symbolic links resolved: a link is
    followed through the directories of both.
    """
    executable = resolve(python)
    checks: list[tuple[str, int]] = [(executable, stat.S_IXOTH)]
    checks += [(path, stat.S_IXOTH) for path in layout.prefixes]
    checks += [(path, stat.S_IROTH | stat.S_IXOTH) for path in (*layout.libraries, *layout.package)]
    checks += [(path, stat.S_IROTH) for path in layout.files]
    for prefix in layout.prefixes:
        venv_config = Path(prefix) / "pyvenv.cfg"
        if venv_config.exists():
            checks.append((str(venv_config), stat.S_IROTH))
    for path, needed in checks:
        for form in dict.fromkeys((str(Path(path).absolute()), str(Path(path).resolve()))):
            problem = _inaccessible(form, needed)
            if problem:
                return problem
    return ""


def _inaccessible(path: str, needed: int) -> str:
    parts = Path(path).parts
    for depth in range(1, len(parts) + 1):
        current = Path(*parts[:depth])
        try:
            mode = current.stat().st_mode
        except FileNotFoundError:
            # Optional parts of a layout (a platlib that was never made) are not read.
            return ""
        except OSError as exc:
            return f"{current}: {exc.strerror}"
        last = depth == len(parts)
        want = needed if last else stat.S_IXOTH
        if mode & want != want:
            return f"{current} is mode {stat.S_IMODE(mode):04o}"
    return ""


def probe_as(python: str, launcher: ProcessLauncher, run_as: RunAs, env: Mapping[str, str]) -> str:
    """Starts `python` as `run_as` the way a job starts; the reason it failed, or ''."""
    with tempfile.TemporaryDirectory(prefix="hadar-interpreter-") as scratch:
        output = Path(scratch) / "output"
        spec = ProcessSpec(
            argv=[resolve(python), "-c", _PROBE],
            env=dict(env),
            cwd=Path("/"),
            stdout_path=output,
            stderr_path=output,
            run_as=run_as,
        )
        try:
            handle = launcher.launch(spec)
        except OSError as exc:
            return f"cannot start it: {exc}"
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        code = handle.poll()
        while code is None and time.monotonic() < deadline:
            time.sleep(0.01)
            code = handle.poll()
        if code is None:
            handle.signal_group(signal.SIGKILL)
            return f"it did not finish within {PROBE_TIMEOUT_S:g} s"
        if code == 0:
            return ""
        text = output.read_bytes() if output.exists() else b""
        return _last_line(text) or f"exit status {code}"


def _last_line(data: bytes | str) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
