"""Atomic, self-verifying checkpoint files for one job.

Layout: ``<root>/job-<id>/ckpt-<iterations>.pt`` (``<root>`` may already be ``.../job-<id>``);
the two newest are kept. Each file is a
``torch.save`` payload followed by a trailer (magic + SHA-256 of the payload), written to a
temporary name, fsynced, renamed into place and the directory fsynced, so a reader sees either
a complete file or none. A file whose trailer is missing or whose digest does not match (torn
write, truncation, bit rot) is never loaded; the next older valid one is used instead.
Payloads load with ``weights_only=True``: a checkpoint on a shared filesystem cannot run code.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

MAGIC = b"HADARCK1"
_TRAILER = len(MAGIC) + 32
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")
KEEP = 2


class CheckpointError(RuntimeError):
    """A checkpoint is missing where one must exist, or none of them can be read."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    iterations: int
    path: Path
    state: dict[str, Any]


class _HashingWriter(io.RawIOBase):
    """Passes writes through to a file while hashing them (torch.save streams into it)."""

    def __init__(self, sink: IO[bytes]) -> None:
        self._sink = sink
        self.digest = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self._sink.write(view)
        return view.nbytes


def job_directory(root: Path, job_id: str) -> Path:
    """``root/job-<id>``, or ``root`` itself when it is already that job's directory (an agent
    may hand out a per-job directory or the cluster's root; both give the same layout)."""
    name = f"job-{job_id}"
    return root if root.name == name else root / name


class CheckpointStore:
    """The checkpoints of one job in one directory."""

    def __init__(self, directory: Path, keep: int = KEEP) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.directory = directory
        self._keep = keep

    def iterations_on_disk(self) -> list[int]:
        """Iterations of the checkpoint files present, newest first (not yet verified)."""
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match:
                found.append(int(match.group(1)))
        return sorted(found, reverse=True)

    def path_for(self, iterations: int) -> Path:
        return self.directory / f"ckpt-{iterations}.pt"

    def save(self, iterations: int, state: dict[str, Any]) -> Path:
        # Owner-only, whatever the job's umask: a model's weights are its owner's.
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = self.path_for(iterations)
        temporary = self.directory / f".{final.name}.tmp-{os.getpid()}"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                writer = _HashingWriter(handle)
                torch.save(state, writer)  # type: ignore[arg-type]
                handle.write(MAGIC + writer.digest.digest())
                handle.flush()
                os.fsync(handle.fileno())
            temporary.replace(final)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        _fsync_directory(self.directory)
        self._prune(keep_also=iterations)
        return final

    def load_latest(self, on_skip: Callable[[Path, str], None] | None = None) -> Checkpoint | None:
        """The newest checkpoint that verifies; older ones are tried when newer ones do not."""
        for iterations in self.iterations_on_disk():
            path = self.path_for(iterations)
            try:
                state = read_checkpoint(path)
            except (CheckpointError, OSError) as error:
                if on_skip is not None:
                    on_skip(path, str(error))
                continue
            return Checkpoint(iterations=iterations, path=path, state=state)
        return None

    def _prune(self, keep_also: int) -> None:
        present = self.iterations_on_disk()
        keep = set(present[: self._keep]) | {keep_also}
        for iterations in present:
            if iterations not in keep:
                self.path_for(iterations).unlink(missing_ok=True)
        for leftover in self.directory.glob(".ckpt-*.pt.tmp-*"):
            # A writer that died mid-save leaves its temporary behind; ours is renamed already.
            pid = leftover.name.rsplit("-", 1)[-1]
            if pid != str(os.getpid()):
                leftover.unlink(missing_ok=True)


def read_checkpoint(path: Path) -> dict[str, Any]:
    blob = path.read_bytes()
    if len(blob) < _TRAILER or blob[-_TRAILER : -_TRAILER + len(MAGIC)] != MAGIC:
        raise CheckpointError(f"{path}: no checkpoint trailer (truncated or not a checkpoint)")
    payload, digest = blob[:-_TRAILER], blob[-32:]
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError(f"{path}: digest mismatch (corrupt)")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointError(f"{path}: unreadable payload: {error}") from error
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: payload is not a checkpoint dictionary")
    return state


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
