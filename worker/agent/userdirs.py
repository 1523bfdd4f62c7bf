"""Creating a directory a job's submitter named, with the submitter's own rights.

A root agent must not create (or hand over) a directory the job's user could not have made
themselves: the creation runs as that user, so the kernel's permission checks decide. The
path is walked one component at a time without following symbolic links, so a link
planted anywhere on it cannot redirect the creation, and a path with a link in it is
refused with the real path to use instead.

This module uses only the standard library: the agent runs it as a script
(``python -I -S userdirs.py UID GID GROUPS PATH``) to drop to the user before creating
anything, and calls :func:`ensure_directory` directly when it already is that user.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from pathlib import Path, PurePosixPath


class UserDirectoryError(Exception):
    """The directory cannot be made or used; the message says why, naming the path."""


def ensure_directory(path: str) -> list[str]:
    """Makes `path` and its missing parents (mode 0700 less the umask), as the calling user.

    Refuses a relative path, ``..``, and any symbolic link or non-directory on the path.
    On failure, the directories it made are removed again. Returns the directories made.
    """
    pure = PurePosixPath(path)
    if not pure.is_absolute() or ".." in pure.parts:
        raise UserDirectoryError(f"{path}: must be an absolute path without '..'")
    made: list[str] = []
    fds: list[int] = []
    try:
        fds.append(os.open("/", os.O_PATH | os.O_DIRECTORY))
        current = PurePosixPath("/")
        for name in pure.parts[1:]:
            current = current / name
            try:
                fds.append(_open_dir(name, fds[-1], current))
            except FileNotFoundError:
                try:
                    # Owner-only (less the umask): the job's files are its owner's.
                    os.mkdir(name, 0o700, dir_fd=fds[-1])
                except OSError as exc:
                    raise UserDirectoryError(
                        f"cannot create {current}: {os.strerror(exc.errno or 0)}"
                    ) from exc
                made.append(str(current))
                fds.append(_open_dir(name, fds[-1], current))
    except BaseException:
        # Undo in reverse, so each parent is empty when its turn comes.
        for made_path in reversed(made):
            with contextlib.suppress(OSError):
                Path(made_path).rmdir()
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return made


def _open_dir(name: str, parent_fd: int, path: PurePosixPath) -> int:
    try:
        return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise UserDirectoryError(f"cannot use {path}: {os.strerror(exc.errno or 0)}") from exc
    try:
        mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
    except OSError as exc:
        raise UserDirectoryError(f"cannot use {path}: {os.strerror(exc.errno or 0)}") from exc
    if stat.S_ISLNK(mode):
        target = os.path.realpath(path)
        raise UserDirectoryError(
            f"{path} is a symbolic link (to {target}); name a path without links"
        )
    raise UserDirectoryError(f"{path} exists and is not a directory")


def drop_privileges(uid: int, gid: int, groups: list[int]) -> None:
    """Becomes `uid` for good (a no-op when already it)."""
    if os.geteuid() == uid and os.getegid() == gid:
        return
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)


def main(argv: list[str]) -> int:
    """``UID GID GROUPS PATH``: drops to the user, then makes PATH. The reason for a refusal
    goes to stderr as one line, with exit status 1."""
    if len(argv) != 4:
        print("usage: userdirs.py UID GID GROUPS PATH", file=sys.stderr)
        return 2
    uid, gid, groups, path = argv
    drop_privileges(int(uid), int(gid), [int(g) for g in groups.split(",") if g])
    try:
        ensure_directory(path)
    except UserDirectoryError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
