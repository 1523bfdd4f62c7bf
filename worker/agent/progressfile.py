"""Reading the JSON-lines files that job processes write (progress) and their logs."""

from __future__ import annotations

from pathlib import Path

from worker.runtime.contract import ProgressRecord


class ProgressTail:
    """Follows one progress file, returning whole new records; skips malformed lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.malformed = 0
        self.last: ProgressRecord | None = None

    def read_new(self) -> list[ProgressRecord]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        records: list[ProgressRecord] = []
        for line in lines:
            if not line.strip():
                continue
            try:
                records.append(ProgressRecord.from_json(line.decode()))
            except (ValueError, TypeError, UnicodeDecodeError):
                self.malformed += 1
        if records:
            self.last = records[-1]
        return records

    def read_last(self) -> ProgressRecord | None:
        """Drains the file (including a final line without newline) and returns the newest."""
        self.read_new()
        if self._partial.strip():
            try:
                self.last = ProgressRecord.from_json(self._partial.decode())
                self._partial = b""
            except (ValueError, TypeError, UnicodeDecodeError):
                pass
        return self.last


def tail_lines(path: Path, lines: int, max_bytes: int = 64 * 1024) -> str:
    """The last `lines` lines of a text file (at most `max_bytes` of it)."""
    if lines <= 0:
        return ""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except FileNotFoundError:
        return ""
    text = data.decode(errors="replace")
    return "\n".join(text.rstrip("\n").split("\n")[-lines:])


def tail_offset(path: Path, lines: int, max_bytes: int = 1024 * 1024) -> int:
    """Byte offset where the last `lines` lines of a file start."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            start = max(0, size - max_bytes)
            handle.seek(start)
            data = handle.read()
    except FileNotFoundError:
        return 0
    # A final line without a newline counts as a line.
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    position = end
    for _ in range(lines):
        position = data.rfind(b"\n", 0, position)
        if position < 0:
            return start
    return start + position + 1
