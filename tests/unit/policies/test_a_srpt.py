"""a-srpt: a forest learned online from completions, preemptive SRPT on predictions."""

from __future__ import annotations

import math
import random

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policies.a_srpt import ASrptPolicy, Completion, IterationPredictor
from master.scheduling.policy import CompletionObserver, make_policy, notify_completion
from tests.unit.policies.builders import job, snapshot

#: Each user's habit: actual iterations over what they submit.
HABITS = {"ann": 0.25, "bob": 1.0, "cy": 3.0}
TYPES = ("vision", "speech", "text")


def _synthetic(rng: random.Random, n: int) -> list[Completion]:
    out = []
    for _ in range(n):
        user = rng.choice(sorted(HABITS))
        job_type = rng.choice(TYPES)
        submitted = rng.uniform(1e4, 1e6)
        actual = submitted * HABITS[user] * math.exp(rng.gauss(0.0, 0.1))
        out.append(Completion(user, job_type, 64, rng.choice([1, 2, 4]), submitted, actual))
    return out


def test_predictor_improves_on_the_submitted_estimate() -> None:
    """Trained on past jobs, it predicts new ones much better than their submissions."""
    rng = random.Random(11)
    predictor = IterationPredictor(min_history=8, refit_every=8)
    for completion in _synthetic(rng, 200):
        predictor.observe(completion)
    assert predictor.trained
    test = _synthetic(rng, 100)
    views = [
        job(i, user=c.user, job_type=c.job_type, total_iterations=c.submitted, num_gpus=c.num_gpus)
        for i, c in enumerate(test)
    ]
    predicted = predictor.predict_many(views)
    err_pred = sum(abs(math.log(predicted[i] / c.actual)) for i, c in enumerate(test))
    err_sub = sum(abs(math.log(c.submitted / c.actual)) for c in test)
    assert err_pred < 0.3 * err_sub


def test_untrained_or_exact_history_predicts_the_submission() -> None:
    """No history: the submission; exact history: still (almost) the submission."""
    predictor = IterationPredictor(min_history=4, refit_every=4)
    view = job(1, total_iterations=5e4, user="ann")
    assert predictor.predict(view) == 5e4
    for i in range(12):
        predictor.observe(Completion("ann", "vision", 64, 1, 1e4 * (i + 1), 1e4 * (i + 1)))
    assert abs(predictor.predict(view) / 5e4 - 1.0) < 1e-9


def test_srpt_order_uses_predicted_remaining_work() -> None:
    """ann's jobs run 4x shorter than submitted: her bigger submission goes first."""
    policy = ASrptPolicy(min_history=4, refit_every=4)
    for i in range(16):
        submitted = 1e4 * (i + 1)
        policy.observe_completion(
            job(100 + i, user="ann", total_iterations=submitted), submitted / 4, 0.0
        )
        policy.observe_completion(
            job(200 + i, user="bob", total_iterations=submitted), submitted, 0.0
        )
    ann = job(1, user="ann", total_iterations=2e5)  # predicted ~5e4
    bob = job(2, user="bob", total_iterations=1e5)  # predicted ~1e5
    snap = snapshot({"v100": 1}, [ann, bob])
    plan = policy.plan(snap, 0.0)
    assert list(plan) == [1]
    assert "position 2" in (plan.reason(2) or "")


def test_preempts_a_running_job_with_more_remaining_work() -> None:
    running = job(1, total_iterations=1e7, current=Allocation.on([GpuSlot("v100-000", 0)], 64))
    newcomer = job(2, total_iterations=1e3)
    plan = ASrptPolicy().plan(snapshot({"v100": 1}, [running, newcomer]), 0.0)
    assert list(plan) == [2]


def test_places_on_as_few_servers_as_possible() -> None:
    """A 4-GPU job goes to the one server with 4 free GPUs, not across two."""
    holder = job(
        1,
        total_iterations=10.0,
        current=Allocation.on([GpuSlot("v100-000", 0), GpuSlot("v100-000", 1)], 64),
    )
    wide = job(2, num_gpus=4, total_iterations=1e6)
    snap = snapshot({"v100": 8}, [holder, wide])
    alloc = ASrptPolicy().plan(snap, 0.0).get(2)
    assert alloc is not None and alloc.nodes == ("v100-001",)


def test_learns_from_jobs_that_leave_the_snapshot_after_running() -> None:
    """Without the hook, a job planned to run that then disappears counts as completed."""
    policy = ASrptPolicy()
    ran = job(1, total_iterations=1e3)
    waited = job(2, num_gpus=4, total_iterations=1e3)  # never fits on 1 GPU: never ran
    policy.plan(snapshot({"v100": 1}, [ran, waited]), 0.0)
    policy.plan(snapshot({"v100": 1}, []), 360.0)
    history = policy.predictor.history
    assert [(c.submitted, c.actual) for c in history] == [(1e3, 1e3)]


def test_completion_hook_is_optional_and_exact() -> None:
    policy = make_policy("a-srpt")
    assert isinstance(policy, CompletionObserver)
    finished = job(1, total_iterations=1e4)
    notify_completion(policy, finished, 7e3, 10.0)
    assert isinstance(policy, ASrptPolicy)
    assert [(c.submitted, c.actual) for c in policy.predictor.history] == [(1e4, 7e3)]
    notify_completion(make_policy("hadar"), finished, 7e3, 10.0)  # not an observer: no-op
