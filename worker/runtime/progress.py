"""Appends progress records (see :mod:`worker.runtime.contract`) to the progress file."""

from __future__ import annotations

import os
import time
from pathlib import Path

from worker.runtime.contract import ExitReason, ProgressRecord


class ProgressWriter:
    """One JSON line per record; "progress" records at most every ``interval_s``."""

    def __init__(self, path: Path | None, interval_s: float) -> None:
        self._path = path
        self._interval_s = interval_s
        self._handle = None
        if path is not None:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            # Line-buffered: the agent tails the file and must see whole lines promptly.
            self._handle = open(fd, "a", buffering=1, encoding="utf-8")  # noqa: PTH123, SIM115
        self._last_at = -float("inf")
        self.last_record: ProgressRecord | None = None

    def due(self, now: float) -> bool:
        return now - self._last_at >= self._interval_s

    def write(
        self,
        event: str,
        *,
        iterations_done: int,
        iterations_per_s: float,
        samples_per_s: float,
        loss: float,
        checkpoint_iterations: int,
        exit_reason: ExitReason | None = None,
        now: float | None = None,
    ) -> ProgressRecord:
        record = ProgressRecord(
            event=event,  # type: ignore[arg-type]
            iterations_done=iterations_done,
            iterations_per_s=iterations_per_s,
            samples_per_s=samples_per_s,
            loss=loss,
            checkpoint_iterations=checkpoint_iterations,
            at=time.time(),
            exit_reason=exit_reason,
        )
        self._last_at = time.monotonic() if now is None else now
        self.last_record = record
        if self._handle is not None:
            self._handle.write(record.to_json() + "\n")
        return record

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def read_progress(path: Path) -> list[ProgressRecord]:
    """All complete records of a progress file (a half-written last line is skipped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                records.append(ProgressRecord.from_json(line))
            except ValueError:
                continue
    return records
