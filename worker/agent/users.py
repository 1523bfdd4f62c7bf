"""Who a job's processes run as: the submitting user when the agent is root, else the agent."""

from __future__ import annotations

import os
import pwd
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
