"""Running a built-in workload: managed (under the runtime helper) or as a plain loop."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from worker.runtime.rng import derive_seed
from worker.runtime.settings import RuntimeSettings
from worker.runtime.training import Step, TrainingRun
from worker.workloads.registry import Workload, get_workload
from worker.workloads.synthetic import synthetic_batch


def build(workload: Workload, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The workload's model and optimizer, initialized from ``seed`` (identical on all ranks)."""
    torch.manual_seed(derive_seed(workload.name, seed, "init"))
    model = workload.build_model()
    return model, workload.make_optimizer(model)


def train_step(workload: Workload, run: TrainingRun, step: Step) -> None:
    """One iteration of ``workload`` on its synthetic data under the helper: forward and
    backward over every micro-batch this process computes (the helper does the update)."""
    for micro in step.micro_batches():
        batch = synthetic_batch(
            workload,
            seed=run.seed,
            stream=step.stream,
            iteration=step.iteration,
            start=micro.start,
            stop=micro.stop,
            device=run.device,
        )
        micro.backward(workload.loss(run.model, batch))


def train_managed(
    name: str,
    env: Mapping[str, str] | None = None,
    *,
    default_iterations: int | None = None,
    handle_signals: bool = True,
) -> TrainingRun:
    """Trains workload ``name`` under the runtime helper, configured by ``env``."""
    workload = get_workload(name)
    settings = RuntimeSettings.from_env(
        os.environ if env is None else env,
        default_batch_size=workload.default_batch_size,
        default_iterations=default_iterations,
    )
    model, optimizer = build(workload, settings.seed)
    run = TrainingRun(model, optimizer, settings, handle_signals=handle_signals)
    for step in run.steps():
        train_step(workload, run, step)
    return run


@dataclass(frozen=True, slots=True)
class PlainResult:
    model: torch.nn.Module
    seconds: float
    iterations: int


def train_plain(
    workload: Workload,
    *,
    iterations: int,
    batch_size: int | None = None,
    device: torch.device | str = "cpu",
    seed: int = 0,
    warmup: int = 0,
) -> PlainResult:
    """The same training as :func:`train_managed` with none of the helper: the reference loop
    for the runtime's overhead and the profiler. ``warmup`` iterations run before timing."""
    device = torch.device(device)
    batch = batch_size or workload.default_batch_size
    model, optimizer = build(workload, seed)
    model.to(device)
    began = 0.0
    for iteration in range(warmup + iterations):
        if iteration == warmup:
            _synchronize(device)
            began = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        data = synthetic_batch(
            workload, seed=seed, stream=0, iteration=iteration, start=0, stop=batch, device=device
        )
        torch.autograd.backward(workload.loss(model, data))
        optimizer.step()
    _synchronize(device)
    return PlainResult(model, time.perf_counter() - began, iterations)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
