"""Gradient accumulation gives the update of the full batch, for every built-in workload.

The workloads use GroupNorm/LayerNorm and no dropout, so a sample's loss does not depend on
which micro-batch it is computed in; only the order of floating-point sums differs. The
comparison uses plain SGD so that the update *is* the gradient: Adam divides by the gradient's
magnitude, which turns last-bit differences of near-zero gradients into visible ones without
saying anything about the runtime.
"""

from __future__ import annotations

import pytest
import torch

from worker.runtime import contract
from worker.runtime.training import TrainingRun
from worker.workloads.registry import WORKLOADS, get_workload
from worker.workloads.runner import build
from worker.workloads.synthetic import synthetic_batch


def _train(name: str, accumulation_steps: int) -> dict[str, torch.Tensor]:
    workload = get_workload(name)
    model, _ = build(workload, seed=11)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    env = {
        contract.TOTAL_ITERATIONS: "2",
        contract.GLOBAL_BATCH_SIZE: "6",
        contract.ACCUMULATION_STEPS: str(accumulation_steps),
        contract.SEED: "11",
    }
    run = TrainingRun.from_env(model, optimizer, env=env, handle_signals=False)
    assert run.accumulation_steps == accumulation_steps
    for step in run.steps():
        for micro in step.micro_batches():
            batch = synthetic_batch(
                workload,
                seed=run.seed,
                stream=0,
                iteration=step.iteration,
                start=micro.start,
                stop=micro.stop,
            )
            micro.backward(workload.loss(run.model, batch))
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_accumulated_micro_batches_match_the_full_batch(name: str) -> None:
    """k = 3 and k = 4 (uneven micro-batches 2,2,1,1) end where k = 1 ends, after 2 updates."""
    initial = build(get_workload(name), seed=11)[0].state_dict()
    full = _train(name, 1)
    assert any(not torch.equal(initial[key], full[key]) for key in full)
    for steps in (3, 4):
        accumulated = _train(name, steps)
        for key, expected in full.items():
            torch.testing.assert_close(accumulated[key], expected, rtol=1e-5, atol=1e-7)
