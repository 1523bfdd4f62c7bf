"""The training-loop helper in one process: leases, stops, checkpoints, progress, RNG."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.unit.runtime.checks import assert_identical, final_parameters
from worker.runtime import contract
from worker.runtime.checkpoint import CheckpointError, CheckpointStore, job_directory
from worker.runtime.progress import read_progress
from worker.runtime.settings import ContractError, RuntimeSettings
from worker.runtime.training import TrainingRun
from worker.workloads.runner import train_managed

BASE = {contract.TOTAL_ITERATIONS: "12", contract.GLOBAL_BATCH_SIZE: "4", contract.SEED: "5"}


def _env(tmp_path: Path, name: str, **extra: str) -> dict[str, str]:
    return {
        **BASE,
        contract.CHECKPOINT_DIR: str(tmp_path / name),
        contract.PROGRESS_FILE: str(tmp_path / f"{name}.jsonl"),
        **extra,
    }


def test_budget_limited_leases_end_identical_to_one_run(tmp_path: Path) -> None:
    """Three leases of 5, 5 and the rest (the last one elsewhere) equal one straight run."""
    straight = train_managed("transformer", _env(tmp_path, "straight"))
    assert straight.exit_reason == "completed"
    reasons = []
    for lease, budget in enumerate(["5", "5", "0"]):
        env = _env(tmp_path, "leased", **{contract.ITERATION_BUDGET: budget})
        env[contract.PROGRESS_FILE] = str(tmp_path / f"lease{lease}" / "progress.jsonl")
        reasons.append(train_managed("transformer", env).exit_reason)
    assert reasons == ["lease_done", "lease_done", "completed"]
    assert_identical(final_parameters(tmp_path / "straight"), final_parameters(tmp_path / "leased"))


def test_runs_exactly_the_granted_iterations_and_never_past_the_total(tmp_path: Path) -> None:
    """A budget is honoured exactly; a budget beyond the job's end stops at the total."""
    first = train_managed("recommendation", _env(tmp_path, "j", **{contract.ITERATION_BUDGET: "7"}))
    assert (first.iterations_done, first.exit_reason) == (7, "lease_done")
    second = train_managed(
        "recommendation", _env(tmp_path, "j", **{contract.ITERATION_BUDGET: "100"})
    )
    assert (second.iterations_done, second.exit_reason) == (12, "completed")
    again = train_managed("recommendation", _env(tmp_path, "j"))
    assert (again.iterations_done, again.exit_reason) == (12, "completed")
    records = read_progress(tmp_path / "j.jsonl")
    exits = [r for r in records if r.event == "exit"]
    assert [(r.iterations_done, r.checkpoint_iterations, r.exit_reason) for r in exits] == [
        (7, 7, "lease_done"),
        (12, 12, "completed"),
        (12, 12, "completed"),
    ]
    assert CheckpointStore(job_directory(tmp_path / "j", "local")).iterations_on_disk() == [12, 7]


class _Tiny(nn.Module):
    """Uses every random stream a script might: torch (dropout), NumPy and Python."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 1)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = float(np.random.rand()) + random.random()
        out: torch.Tensor = self.linear(self.dropout(x)) * noise
        return out


def _train_tiny(env: dict[str, str], stop_at: int | None = None) -> TrainingRun:
    torch.manual_seed(0)
    model = _Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    run = TrainingRun.from_env(model, optimizer, lr_scheduler=scheduler, env=env)
    for step in run.steps():
        for micro in step.micro_batches():
            x = torch.arange(micro.start, micro.stop, dtype=torch.float32)
            x = x[:, None] * 0.1 + step.iteration * 0.01 + torch.zeros(1, 6)
            micro.backward(run.model(x).pow(2).mean())
        if stop_at is not None and step.iteration == stop_at:
            signal.raise_signal(signal.SIGTERM)
        run.user_state["seen"] = run.user_state.get("seen", 0) + 1
    return run


def test_rng_scheduler_and_user_state_survive_a_sigterm(tmp_path: Path) -> None:
    """SIGTERM mid-run stops after the iteration in flight; the resumed run equals a straight
    one, random streams (torch, NumPy, Python), LR schedule and user state included."""
    previous_handler = signal.getsignal(signal.SIGTERM)
    straight = _train_tiny(_env(tmp_path, "straight"))
    stopped = _train_tiny(_env(tmp_path, "split"), stop_at=4)
    assert (stopped.exit_reason, stopped.iterations_done) == ("stopped", 5)
    assert signal.getsignal(signal.SIGTERM) is previous_handler
    resumed = _train_tiny(_env(tmp_path, "split"))
    assert resumed.exit_reason == "completed"
    assert resumed.user_state == {"seen": 12} == straight.user_state
    assert_identical(final_parameters(tmp_path / "straight"), final_parameters(tmp_path / "split"))


def test_stop_request_checkpoints_at_the_iteration_reached(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    run = TrainingRun.from_env(
        model, torch.optim.SGD(model.parameters(), lr=0.1), env=_env(tmp_path, "j")
    )
    for step in run.steps():
        for micro in step.micro_batches():
            micro.backward(run.model(torch.ones(micro.size, 3)).sum())
        if step.iteration == 2:
            run.request_stop()
    assert (run.exit_reason, run.iterations_done, run.checkpoint_iterations) == ("stopped", 3, 3)
    last = read_progress(tmp_path / "j.jsonl")[-1]
    assert (last.event, last.exit_reason, last.checkpoint_iterations) == ("exit", "stopped", 3)


def test_corrupt_newest_checkpoint_falls_back_and_still_matches(tmp_path: Path) -> None:
    """Resuming from the older checkpoint redoes the lost iterations, same result."""
    train_managed("lstm", _env(tmp_path, "straight"))
    for _ in range(2):
        train_managed("lstm", _env(tmp_path, "split", **{contract.ITERATION_BUDGET: "4"}))
    newest = CheckpointStore(job_directory(tmp_path / "split", "local")).path_for(8)
    newest.write_bytes(newest.read_bytes()[:-100])
    resumed = train_managed("lstm", _env(tmp_path, "split"))
    assert resumed.iterations_done == 12
    assert_identical(final_parameters(tmp_path / "straight"), final_parameters(tmp_path / "split"))


def test_missing_checkpoint_for_a_job_with_progress_is_an_error(tmp_path: Path) -> None:
    """The master says work was done but no checkpoint exists: refuse instead of restarting."""
    env = _env(tmp_path, "j", **{contract.ITERATIONS_DONE: "40"})
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(CheckpointError, match="40 iterations done but no readable checkpoint"):
        train_managed("recommendation", env)
    assert signal.getsignal(signal.SIGTERM) is handler


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_periodic_checkpoints_pacing_and_progress_rate(tmp_path: Path) -> None:
    """Checkpoints every interval, progress at most every interval, slow fake GPU sleeps."""
    clock = _Clock()
    slept: list[float] = []
    env = _env(
        tmp_path,
        "j",
        **{
            contract.CHECKPOINT_INTERVAL_S: "25",
            contract.PROGRESS_INTERVAL_S: "10",
            contract.FAKE_GPU_SPEED: "0.25",
        },
    )

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    run = TrainingRun(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        RuntimeSettings.from_env(env),
        clock=clock,
        sleep=sleep,
    )
    for step in run.steps():
        for micro in step.micro_batches():
            clock.now += 1.0  # one second of "compute" per iteration, 4 s once paced
            micro.backward(run.model(torch.ones(micro.size, 2)).mean())
    assert slept == [pytest.approx(3.0)] * 12
    records = read_progress(tmp_path / "j.jsonl")
    events = [(r.event, r.iterations_done) for r in records]
    # Iteration i ends at 4i s; a checkpoint is due once 25 s passed since the last one.
    assert [e for e in events if e[0] == "checkpoint"] == [
        ("checkpoint", 7),
        ("checkpoint", 12),
    ]
    progress = [e[1] for e in events if e[0] == "progress"]
    assert progress == [0, 3, 6, 10]
    assert records[1].iterations_per_s == pytest.approx(0.25)
    assert records[-1].event == "exit"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({contract.LOCAL_BATCH_SIZE: "3"}, r"local batch sizes \[3\] do not split"),
        ({contract.ACCUMULATION_STEPS: "5"}, "5 accumulation steps need at least"),
    ],
)
def test_a_batch_layout_that_cannot_work_is_refused(
    tmp_path: Path, extra: dict[str, str], message: str
) -> None:
    with pytest.raises(ContractError, match=message):
        train_managed("recommendation", _env(tmp_path, "j", **extra))


def test_each_step_must_run_its_micro_batches_to_the_end(tmp_path: Path) -> None:
    """Skipping the rest of an iteration would silently change the update: refused."""
    model = nn.Linear(2, 1)
    run = TrainingRun.from_env(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        env=_env(tmp_path, "j", **{contract.ACCUMULATION_STEPS: "2"}),
    )
    with pytest.raises(RuntimeError, match="iterated to the end"):
        for step in run.steps():
            for micro in step.micro_batches():
                micro.backward(run.model(torch.ones(micro.size, 2)).mean())
                break


def test_each_micro_batch_needs_exactly_one_backward(tmp_path: Path) -> None:
    """A micro-batch without backward would drop its share of the gradient: refused."""
    model = nn.Linear(2, 1)
    run = TrainingRun.from_env(
        model, torch.optim.SGD(model.parameters(), lr=0.1), env=_env(tmp_path, "j")
    )
    with pytest.raises(RuntimeError, match="exactly once per micro-batch"):
        for step in run.steps():
            for _micro in step.micro_batches():
                pass
    with pytest.raises(RuntimeError, match="runs once per TrainingRun"):
        next(iter(run.steps()))
