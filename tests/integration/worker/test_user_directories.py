"""Directories a job's submitter names are made with the submitter's rights, through the real
launcher: as root the job's user is `nobody` (its own process drops to it), otherwise the
test's own user; either way nobody gets a directory they could not have made themselves."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from worker.agent.processes import RunAs, SubprocessLauncher
from worker.agent.userdirs import UserDirectoryError
from worker.agent.users import SystemUsers

AS_ROOT = os.geteuid() == 0


@pytest.fixture
def user() -> RunAs:
    """`nobody` when the tests run as root, else the test's own user."""
    return SystemUsers().lookup("nobody" if AS_ROOT else pwd.getpwuid(os.geteuid()).pw_name)


def locked_dir(shared_dir: Path) -> Path:
    """A directory the job's user can enter but not create in: root's with mode 0755 when
    running as root (the user is nobody), else the test user's own with mode 0555."""
    path = shared_dir / "locked"
    path.mkdir(mode=0o755)
    path.chmod(0o755 if AS_ROOT else 0o555)
    return path


def users_dir(shared_dir: Path, user: RunAs) -> Path:
    """A directory the job's user owns."""
    path = shared_dir / "home"
    path.mkdir(mode=0o755)
    os.chown(path, user.uid, user.gid)
    return path


def test_directory_the_user_could_not_create_is_refused_and_nothing_is_left(
    shared_dir: Path, user: RunAs
) -> None:
    """A path under a directory the user cannot write is refused with the reason, and no
    directory is made or changes owner."""
    locked = locked_dir(shared_dir)
    before = locked.stat()
    with pytest.raises(UserDirectoryError, match=r"cannot create .*/locked/a: Permission denied"):
        SubprocessLauncher().make_directory(locked / "a" / "b", user)
    assert list(locked.iterdir()) == []
    after = locked.stat()
    assert (after.st_uid, after.st_gid, after.st_mode) == (
        before.st_uid,
        before.st_gid,
        before.st_mode,
    )


def test_symbolic_link_on_the_path_is_refused(shared_dir: Path, user: RunAs) -> None:
    """A link anywhere on the path (a parent or the directory itself) is refused with its
    target, and nothing is made through it."""
    home = users_dir(shared_dir, user)
    target = home / "target"
    target.mkdir()
    os.chown(target, user.uid, user.gid)
    (home / "link").symlink_to(target)
    launcher = SubprocessLauncher()
    with pytest.raises(UserDirectoryError, match=r"/home/link is a symbolic link \(to .*/target\)"):
        launcher.make_directory(home / "link" / "ckpt", user)
    with pytest.raises(UserDirectoryError, match="is a symbolic link"):
        launcher.make_directory(home / "link", user)
    assert list(target.iterdir()) == []


def test_directory_the_user_can_create_is_made_and_is_theirs(shared_dir: Path, user: RunAs) -> None:
    """A missing directory (and parents) where the user may create them is made, owned by
    the user; an existing one is used as it is."""
    home = users_dir(shared_dir, user)
    launcher = SubprocessLauncher()
    launcher.make_directory(home / "runs" / "ckpt", user)
    for path in (home / "runs", home / "runs" / "ckpt"):
        assert path.is_dir()
        assert (path.stat().st_uid, path.stat().st_gid) == (user.uid, user.gid), path
    launcher.make_directory(home / "runs" / "ckpt", user)
    assert (home / "runs" / "ckpt").is_dir()


def test_directories_made_before_a_failure_are_removed(shared_dir: Path, user: RunAs) -> None:
    """When a deeper component cannot be made, the parents made on the way are removed."""
    home = users_dir(shared_dir, user)
    with pytest.raises(UserDirectoryError, match="File name too long"):
        SubprocessLauncher().make_directory(home / "new" / ("x" * 300), user)
    assert list(home.iterdir()) == []


def test_the_agent_s_own_user_gets_the_same_checks(shared_dir: Path) -> None:
    """Without a user to drop to (the agent is not root), the same walk refuses links and
    makes what is missing."""
    launcher = SubprocessLauncher()
    (shared_dir / "real").mkdir()
    (shared_dir / "link").symlink_to(shared_dir / "real")
    with pytest.raises(UserDirectoryError, match="is a symbolic link"):
        launcher.make_directory(shared_dir / "link" / "ckpt", None)
    launcher.make_directory(shared_dir / "real" / "ckpt", None)
    assert (shared_dir / "real" / "ckpt").is_dir()
