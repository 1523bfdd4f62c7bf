"""The job-side lease check: a job stops by itself once the lease its agent last wrote is
over, so a frozen or dead agent cannot leave it running past its lease."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn

from worker.runtime import contract
from worker.runtime.lease import CHECK_INTERVAL_S, LeaseWatch
from worker.runtime.progress import read_progress
from worker.runtime.training import TrainingRun


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_000.0
        self.monotonic = 50.0


def watch(path: Path | None, clocks: Clocks) -> LeaseWatch:
    return LeaseWatch(path, wall=lambda: clocks.wall, monotonic=lambda: clocks.monotonic)


def test_the_lease_is_over_once_its_end_has_passed(tmp_path: Path) -> None:
    """Not over before the written end, over from it on."""
    clocks = Clocks()
    path = tmp_path / "lease-end"
    path.write_text("1010.000\n")
    lease = watch(path, clocks)
    assert not lease.over()
    clocks.wall = 1010.0
    assert lease.over()


def test_a_renewal_is_read_at_most_once_per_interval(tmp_path: Path) -> None:
    """The file is re-read after CHECK_INTERVAL_S, which picks up an extension."""
    clocks = Clocks()
    path = tmp_path / "lease-end"
    path.write_text("1005")
    lease = watch(path, clocks)
    assert not lease.over()
    path.write_text("1100")  # renewed; not read yet
    clocks.wall = 1006.0
    assert lease.over()
    clocks.monotonic += CHECK_INTERVAL_S
    assert not lease.over()


def test_no_file_or_a_bad_one_never_stops_the_job(tmp_path: Path) -> None:
    """Without a readable lease end the agent alone decides."""
    clocks = Clocks()
    clocks.wall = 1e12
    assert not watch(None, clocks).over()
    assert not watch(tmp_path / "missing", clocks).over()
    garbage = tmp_path / "garbage"
    garbage.write_text("soon")
    assert not watch(garbage, clocks).over()


def train(tmp_path: Path, lease_end: float) -> TrainingRun:
    lease_file = tmp_path / "lease-end"
    lease_file.write_text(f"{lease_end:.3f}\n")
    env = {
        contract.TOTAL_ITERATIONS: "6",
        contract.GLOBAL_BATCH_SIZE: "4",
        contract.CHECKPOINT_DIR: str(tmp_path / "ckpt"),
        contract.PROGRESS_FILE: str(tmp_path / "progress.jsonl"),
        contract.LEASE_FILE: str(lease_file),
    }
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    run = TrainingRun.from_env(model, torch.optim.SGD(model.parameters(), lr=0.1), env=env)
    for step in run.steps():
        for micro in step.micro_batches():
            micro.backward(run.model(torch.ones(micro.size, 3)).sum())
    return run


def test_a_run_whose_lease_is_over_checkpoints_and_stops(tmp_path: Path) -> None:
    """A lease that ended without renewal stops the run after the iteration in flight, with
    a checkpoint, as SIGTERM would."""
    run = train(tmp_path, time.time() - 10.0)
    assert (run.exit_reason, run.iterations_done, run.checkpoint_iterations) == ("stopped", 1, 1)
    last = read_progress(tmp_path / "progress.jsonl")[-1]
    assert (last.event, last.exit_reason) == ("exit", "stopped")


def test_a_run_within_its_lease_completes(tmp_path: Path) -> None:
    run = train(tmp_path, time.time() + 3600.0)
    assert (run.exit_reason, run.iterations_done) == ("completed", 6)
