"""A managed job's checkpoints are its owner's alone, whatever the job's umask."""

from __future__ import annotations

import os
from pathlib import Path

from worker.runtime.checkpoint import CheckpointStore
from worker.runtime.progress import ProgressWriter


def test_checkpoints_and_their_folder_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = CheckpointStore(tmp_path / "ckpt" / "job-1")
        saved = store.save(10, {"weights": [1.0, 2.0]})
        progress = ProgressWriter(tmp_path / "task" / "progress-rank0.jsonl", 1.0)
        progress.close()
    finally:
        os.umask(old)
    assert oct(saved.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(saved.stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "task" / "progress-rank0.jsonl").stat().st_mode & 0o777) == "0o600"
