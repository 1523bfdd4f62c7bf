"""Comparing trained parameters across runs."""

from __future__ import annotations

from pathlib import Path

import torch

from worker.runtime.checkpoint import CheckpointStore, job_directory


def final_parameters(checkpoint_root: Path, job_id: str = "local") -> dict[str, torch.Tensor]:
    latest = CheckpointStore(job_directory(checkpoint_root, job_id)).load_latest()
    assert latest is not None, f"no checkpoint under {checkpoint_root}"
    model: dict[str, torch.Tensor] = latest.state["model"]
    return model


def assert_identical(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    assert left.keys() == right.keys()
    different = [name for name in left if not torch.equal(left[name], right[name])]
    assert not different, f"parameters differ: {different}"
