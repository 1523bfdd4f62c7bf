"""A root worker refuses to start when the interpreter it runs jobs with is one other users
cannot run (a virtualenv under a 0700 directory, say): every job would fail at run time.
Checked statically (the path's modes) and for real (started as `nobody` through the same
privilege-dropping step as jobs), with a stand-in interpreter laid out under a temporary
directory, and through the real `hadar-worker` console script."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

from worker.agent.interpreter import InterpreterError, check_job_interpreter
from worker.agent.processes import RunAs, SubprocessLauncher
from worker.agent.users import FakeUsers

AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="running as other users needs root")
HINT = "install the worker into a path every user can read, e.g. /opt/hadar"


def fake_interpreter(shared_dir: Path, *, private: bool, fails_as_others: str = "") -> Path:
    """A stand-in for a virtualenv's python under BASE/home (mode 0700 when `private`):
    as root it describes its layout as the real one would; run as anyone else it prints
    `fails_as_others` and exits 1, or exits 0 when that is empty."""
    home = shared_dir / "home"
    home.mkdir(mode=0o755)
    venv = home / "venv"
    library = venv / "lib" / "python3.11"
    (venv / "bin").mkdir(parents=True, mode=0o755)
    library.mkdir(parents=True, mode=0o755)
    for name in ("os.py", "warnings.py"):
        (library / name).write_text("")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    layout = {
        "executable": str(venv / "bin" / "python"),
        "prefixes": [str(venv)],
        "libraries": [str(library), str(library / "site-packages")],
        "files": [str(library / "os.py"), str(library / "warnings.py")],
        "package": [],
    }
    python = venv / "bin" / "python"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$(id -u)" = 0 ]; then\n'
        f"  echo '{json.dumps(layout)}'\n"
        "  exit 0\n"
        "fi\n" + (f'echo "{fails_as_others}" >&2\nexit 1\n' if fails_as_others else "exit 0\n")
    )
    python.chmod(0o755)
    for path in (venv, venv / "lib", library):
        path.chmod(0o755)
    home.chmod(0o700 if private else 0o755)
    return python


def check(python: Path) -> None:
    check_job_interpreter(str(python), SubprocessLauncher(), env={"PATH": "/usr/bin:/bin"})


@needs_root
def test_an_interpreter_under_a_private_directory_is_refused_naming_the_directory(
    shared_dir: Path,
) -> None:
    python = fake_interpreter(shared_dir, private=True)
    with pytest.raises(InterpreterError) as caught:
        check(python)
    assert str(caught.value) == (
        f"{python} is not usable by other users ({shared_dir / 'home'} is mode 0700): {HINT} "
        "(see docs/install.md)"
    )


@needs_root
def test_a_file_of_the_standard_library_only_root_reads_is_refused(shared_dir: Path) -> None:
    python = fake_interpreter(shared_dir, private=False)
    library_file = python.parent.parent / "lib" / "python3.11" / "warnings.py"
    library_file.chmod(0o600)
    with pytest.raises(InterpreterError, match=f"{library_file} is mode 0600"):
        check(python)


@needs_root
def test_a_link_into_a_private_directory_is_refused_naming_where_it_leads(shared_dir: Path) -> None:
    """The path as written may be open to all while its real file is not."""
    python = fake_interpreter(shared_dir, private=True)
    public = shared_dir / "public"
    public.mkdir(mode=0o755)
    (public / "python").symlink_to(python)
    with pytest.raises(InterpreterError, match=f"\\({shared_dir / 'home'} is mode 0700\\)"):
        check(public / "python")


@needs_root
def test_an_interpreter_that_fails_as_nobody_is_refused_with_its_last_line(
    shared_dir: Path,
) -> None:
    """The modes may all look right and a job still fail (an ACL, a mount option, a broken
    install): the interpreter is also started as nobody, the way a job starts."""
    pwd.getpwnam("nobody")
    python = fake_interpreter(
        shared_dir, private=False, fails_as_others="ModuleNotFoundError: No module named 'warnings'"
    )
    with pytest.raises(InterpreterError) as caught:
        check(python)
    assert str(caught.value).startswith(
        f"{python} is not usable by other users (as user nobody: ModuleNotFoundError: No "
        f"module named 'warnings'): {HINT}"
    )


@needs_root
def test_an_interpreter_every_user_can_run_passes_in_well_under_a_second(shared_dir: Path) -> None:
    python = fake_interpreter(shared_dir, private=False)
    started = time.monotonic()
    check(python)
    assert time.monotonic() - started < 5.0


def test_an_agent_that_is_not_root_runs_jobs_as_itself_and_checks_nothing(shared_dir: Path) -> None:
    users = FakeUsers(root=False, users={"nobody": RunAs("nobody", 65534, 65534, (), "/")})
    check_job_interpreter(
        str(shared_dir / "no" / "such" / "python"), SubprocessLauncher(), env={}, users=users
    )


@needs_root
def test_hadar_worker_run_exits_at_once_with_one_line_naming_the_path(shared_dir: Path) -> None:
    """The real console script, told to run workloads with an interpreter inside a 0700
    directory, exits 2 before it serves or registers, with one line naming the path and
    the fix."""
    private = shared_dir / "home"
    private.mkdir(mode=0o700)
    (private / "venv" / "bin").mkdir(parents=True)
    python = private / "venv" / "bin" / "python"
    python.symlink_to(sys.executable)
    hadar_worker = Path(sys.executable).parent / "hadar-worker"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HADAR_WORKER_")}
    started = time.monotonic()
    done = subprocess.run(
        [
            str(hadar_worker),
            "run",
            "--master",
            "127.0.0.1:1",
            "--token",
            "cluster-secret",
            "--fake-gpus",
            "v100:1",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(shared_dir / "state"),
            "--python",
            str(python),
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 30
    assert done.stderr == (
        f"hadar-worker: python: {python} is not usable by other users ({private} is mode "
        f"0700): {HINT} (see docs/install.md)\n"
    )
    assert not (shared_dir / "state").exists()
