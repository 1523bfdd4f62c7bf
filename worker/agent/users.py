"""Who a job's processes run as: the submitting user when the agent is root, else the agent."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Protocol

from worker.agent.processes import RunAs


class UnknownUserError(LookupError):
    pass


class UserDirectory(Protocol):
    def agent_is_root(self) -> bool: ...

    def lookup(self, name: str) -> RunAs:
        """The identity of Unix user `name`; raises UnknownUserError."""
        ...


class SystemUsers:
    def agent_is_root(self) -> bool:
        return os.geteuid() == 0

    def lookup(self, name: str) -> RunAs:
        try:
            entry = pwd.getpwnam(name)
        except KeyError as exc:
            raise UnknownUserError(f"no Unix user {name!r} on this node") from exc
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
        return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


class FakeUsers:
    def __init__(self, root: bool, users: dict[str, RunAs] | None = None) -> None:
        self._root = root
        self._users = dict(users or {})

    def agent_is_root(self) -> bool:
        return self._root

    def lookup(self, name: str) -> RunAs:
        try:
            return self._users[name]
        except KeyError as exc:
            raise UnknownUserError(f"no Unix user {name!r} on this node") from exc


def shut_out(directory: Path, user: RunAs) -> str:
    """Why `user` cannot enter `directory`: the first directory on its way (itself
    included) whose mode denies them search, as "/tmp/ci is mode 0700 (uid 0, gid 0)";
    empty when they can. A root agent checks this before it starts a job in a directory
    the submitter named, so that the job fails with the reason instead of its exit code."""
    if user.uid == 0:
        return ""
    current = Path(directory.anchor or "/")
    for part in (None, *directory.parts[1:]):
        if part is not None:
            current = current / part
        try:
            info = current.stat()
        except OSError as exc:
            return f"{current}: {exc.strerror}"
        if info.st_uid == user.uid:
            needed = stat.S_IXUSR
        elif info.st_gid == user.gid or info.st_gid in user.groups:
            needed = stat.S_IXGRP
        else:
            needed = stat.S_IXOTH
        if not info.st_mode & needed:
            mode = stat.S_IMODE(info.st_mode)
            return f"{current} is mode {mode:04o} (uid {info.st_uid}, gid {info.st_gid})"
    return ""
