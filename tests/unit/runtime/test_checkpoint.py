"""Checkpoint files: atomic, self-verifying, the newest valid one wins, two are kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from worker.runtime.checkpoint import (
    CheckpointError,
    CheckpointStore,
    job_directory,
    read_checkpoint,
)


class ForeignObject:
    """Unpickling this would mean importing and building an arbitrary class."""


def _state(value: float) -> dict[str, object]:
    return {"format": 1, "weights": torch.full((4,), value), "iterations": int(value)}


def test_save_then_load_latest_returns_newest(tmp_path: Path) -> None:
    """The newest checkpoint comes back with its exact tensors."""
    store = CheckpointStore(job_directory(tmp_path, "7"))
    store.save(3, _state(3.0))
    store.save(5, _state(5.0))
    latest = store.load_latest()
    assert latest is not None
    assert latest.iterations == 5
    assert latest.path == tmp_path / "job-7" / "ckpt-5.pt"
    assert torch.equal(latest.state["weights"], torch.full((4,), 5.0))


def test_keeps_only_the_last_two(tmp_path: Path) -> None:
    """Older checkpoints are pruned after each save; no temporary files stay behind."""
    store = CheckpointStore(tmp_path)
    for iterations in (1, 2, 3, 4):
        store.save(iterations, _state(float(iterations)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-3.pt", "ckpt-4.pt"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_newest_is_skipped_for_the_older_one(tmp_path: Path, damage: str) -> None:
    """A torn, corrupt or foreign newest file is never loaded; the previous one is."""
    store = CheckpointStore(tmp_path)
    store.save(10, _state(10.0))
    newest = store.save(20, _state(20.0))
    blob = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        middle = len(blob) // 2
        newest.write_bytes(blob[:middle] + bytes([blob[middle] ^ 0xFF]) + blob[middle + 1 :])
    elif damage == "garbage":
        newest.write_bytes(b"not a checkpoint at all" * 10)
    else:
        newest.write_bytes(b"")
    skipped: list[Path] = []
    latest = store.load_latest(on_skip=lambda path, why: skipped.append(path))
    assert latest is not None
    assert latest.iterations == 10
    assert skipped == [newest]
    with pytest.raises(CheckpointError):
        read_checkpoint(newest)


def test_a_leftover_temporary_is_ignored_and_cleaned(tmp_path: Path) -> None:
    """A half-written temporary from a writer that died is neither loaded nor kept."""
    store = CheckpointStore(tmp_path)
    leftover = tmp_path / ".ckpt-9.pt.tmp-999999"
    leftover.write_bytes(b"partial")
    assert store.load_latest() is None
    store.save(4, _state(4.0))
    assert not leftover.exists()
    latest = store.load_latest()
    assert latest is not None and latest.iterations == 4


def test_payloads_load_without_running_code(tmp_path: Path) -> None:
    """A checkpoint holding arbitrary objects is refused (weights-only loading)."""
    store = CheckpointStore(tmp_path)
    store.save(1, {"format": 1, "object": ForeignObject()})
    assert store.load_latest() is None


def test_missing_directory_means_no_checkpoint(tmp_path: Path) -> None:
    assert CheckpointStore(tmp_path / "absent").load_latest() is None


def test_a_per_job_directory_is_not_nested_again(tmp_path: Path) -> None:
    """The checkpoint root may be the cluster's or already the job's own directory."""
    assert job_directory(tmp_path, "7") == tmp_path / "job-7"
    assert job_directory(tmp_path / "job-7", "7") == tmp_path / "job-7"
    assert job_directory(tmp_path / "job-17", "7") == tmp_path / "job-17" / "job-7"
