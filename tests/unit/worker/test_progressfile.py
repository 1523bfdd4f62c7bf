"""Reading progress files and log tails the way the agent does."""

from __future__ import annotations

from pathlib import Path

from worker.agent.progressfile import ProgressTail, tail_lines, tail_offset
from worker.runtime.contract import ProgressRecord


def _record(done: int, event: str = "progress") -> str:
    return ProgressRecord(event, done, 2.0, 64.0, 0.5, 0, 100.0 + done).to_json()  # type: ignore[arg-type]


def test_tail_returns_whole_records_and_skips_malformed_lines(tmp_path: Path) -> None:
    """A half-written line waits for its end; garbage lines are counted and skipped."""
    path = tmp_path / "p.jsonl"
    tail = ProgressTail(path)
    assert tail.read_new() == []
    path.write_text(_record(1) + "\nnot json\n" + _record(2)[:10])
    assert [r.iterations_done for r in tail.read_new()] == [1]
    assert tail.malformed == 1
    with path.open("a") as handle:
        handle.write(_record(2)[10:] + "\n")
    assert [r.iterations_done for r in tail.read_new()] == [2]
    with path.open("a") as handle:
        handle.write(_record(3, "exit"))
    last = tail.read_last()
    assert last is not None
    assert (last.iterations_done, last.event) == (3, "exit")


def test_tail_lines_and_offsets(tmp_path: Path) -> None:
    """The last N lines and the offset where they start, with or without a final newline."""
    path = tmp_path / "log"
    path.write_bytes(b"a\nbb\nccc\n")
    assert tail_lines(path, 2) == "bb\nccc"
    assert tail_offset(path, 2) == 2
    assert tail_offset(path, 10) == 0
    path.write_bytes(b"a\nbb\nccc")
    assert tail_offset(path, 1) == 5
    assert tail_lines(tmp_path / "missing", 3) == ""
    assert tail_offset(tmp_path / "missing", 3) == 0
