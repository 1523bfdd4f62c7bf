"""a-srpt: a forest learned online from completions, preemptive SRPT on predictions."""

from __future__ import annotations

import math
import random

import pytest

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policies.a_srpt import (
    ASrptPolicy,
    Completion,
    IterationPredictor,
    VirtualSrpt,
)
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


def test_virtual_machine_runs_preemptive_srpt_over_arrivals() -> None:
    """A short arrival preempts a long job on the virtual machine and finishes first."""
    machine = VirtualSrpt()
    work = {1: 1000.0, 2: 100.0}
    machine.advance(0.0, {1: 0.0}, {1: 1000.0}, speed=1.0)
    machine.advance(250.0, {1: 0.0, 2: 100.0}, work, speed=1.0)
    # 0-100: job 1 alone; 100-200: job 2 (100 left < 900 left); 200-250: job 1 again.
    assert machine.finished == {2: 200.0}
    assert machine.done[1] == 150.0
    assert machine.order_keys(work) == {2: (0, 200.0), 1: (1, 850.0)}


def test_virtual_machine_speed_is_the_cluster_capacity() -> None:
    """Four GPUs of capacity finish 400 GPU-seconds of work in 100 s."""
    machine = VirtualSrpt()
    machine.advance(0.0, {1: 0.0}, {1: 400.0}, speed=4.0)
    machine.advance(360.0, {1: 0.0}, {1: 400.0}, speed=4.0)
    assert machine.finished == {1: 100.0}


def test_a_new_prediction_moves_the_virtual_remaining_work() -> None:
    """The machine keeps work done, so a job predicted longer has more left."""
    machine = VirtualSrpt()
    machine.advance(0.0, {1: 0.0}, {1: 1000.0}, speed=1.0)
    machine.advance(100.0, {1: 0.0}, {1: 1000.0}, speed=1.0)
    assert machine.order_keys({1: 3000.0}) == {1: (1, 2900.0)}


def test_virtual_machine_forgets_jobs_that_left() -> None:
    """A job gone from the snapshot leaves the machine's memory, finished or not."""
    machine = VirtualSrpt()
    machine.advance(0.0, {1: 0.0, 2: 0.0}, {1: 10.0, 2: 500.0}, speed=1.0)
    machine.advance(100.0, {1: 0.0, 2: 0.0}, {1: 10.0, 2: 500.0}, speed=1.0)
    machine.advance(200.0, {2: 0.0}, {2: 500.0}, speed=1.0)
    assert set(machine.done) == {2} and not machine.finished


def test_paper_variant_keeps_a_delayed_job_ahead_of_a_later_shorter_one() -> None:
    """Job 1 completed on the virtual machine, though the real cluster has not run it; the
    paper's order starts it before the shorter job 2 that arrived after, the default's
    order (real remaining work) does not."""
    first = job(1, total_iterations=36_000.0, arrival_time=0.0)  # 3,600 GPU-s on a v100
    later = job(2, total_iterations=10_000.0, arrival_time=3_900.0)  # 1,000 GPU-s
    paper = make_policy("a-srpt", variant="paper")
    paper.plan(snapshot({"v100": 1}, [first]), 0.0)
    plan = paper.plan(snapshot({"v100": 1}, [first, later]), 4_000.0)
    assert plan.get(1) is not None and plan.get(2) is None
    assert "virtual single-machine SRPT" in plan.reasons[2]
    default = make_policy("a-srpt")
    default.plan(snapshot({"v100": 1}, [first]), 0.0)
    plan = default.plan(snapshot({"v100": 1}, [first, later]), 4_000.0)
    assert plan.get(2) is not None and plan.get(1) is None


def test_paper_variant_orders_by_the_predictor() -> None:
    """With a trained predictor (ann's jobs run a quarter of what she submits), the
    virtual machine takes her bigger submission as the shorter job."""
    policy = ASrptPolicy(min_history=4, refit_every=4, variant="paper")
    for i in range(16):
        policy.observe_completion(
            job(100 + i, user="ann", total_iterations=40_000.0 * (1 + i % 4)),
            10_000.0 * (1 + i % 4),
            0.0,
        )
        policy.observe_completion(
            job(200 + i, user="bob", total_iterations=20_000.0 * (1 + i % 4)),
            20_000.0 * (1 + i % 4),
            0.0,
        )
    anns = job(1, user="ann", total_iterations=40_000.0)
    bobs = job(2, user="bob", total_iterations=20_000.0)
    plan = policy.plan(snapshot({"v100": 1}, [bobs, anns]), 0.0)
    assert plan.get(1) is not None and plan.get(2) is None


def test_unknown_variant_is_refused() -> None:
    """A variant name the policy does not know is an error naming the known ones."""
    with pytest.raises(ValueError, match="variant must be one of default, paper"):
        make_policy("a-srpt", variant="papers")


def test_exact_history_predicts_the_submission_until_one_completion_is_not() -> None:
    """Fitted on exact completions only, the prediction is exactly the submission; the
    first refit after a completion that ran less than submitted learns from it."""
    predictor = IterationPredictor(min_history=4, refit_every=4)
    for i in range(8):
        predictor.observe(Completion("ann", "vision", 64, 1, 1e4 * (i + 1), 1e4 * (i + 1)))
    view = job(1, total_iterations=5e4, user="ann")
    assert predictor.trained
    assert predictor.predict(view) == 5e4
    for i in range(3):
        predictor.observe(Completion("ann", "vision", 64, 1, 1e4 * (i + 1), 2.5e3 * (i + 1)))
    assert predictor.predict(view) == 5e4  # three new completions: no refit yet
    for i in range(5):
        predictor.observe(Completion("ann", "vision", 64, 1, 1e4 * (i + 4), 2.5e3 * (i + 4)))
    assert predictor.predict(view) < 4e4


def test_exact_history_codes_features_as_a_forest_would() -> None:
    """Users and job types get their codes in the order a forest would have given them,
    predictions included, so the forest fitted once a completion is not exact is the same
    as if every refit had built one."""
    predictor = IterationPredictor(min_history=2, refit_every=2)
    predictor.observe(Completion("bob", "speech", 64, 1, 1e4, 1e4))
    predictor.predict(job(1, user="zed", job_type="text", total_iterations=1e4))
    predictor.observe(Completion("ann", "vision", 64, 1, 1e4, 1e4))
    predictor.predict(job(2, user="cy", job_type="text", total_iterations=1e4))
    assert predictor.export()["codes"] == {
        "user": {"bob": 0, "ann": 1, "cy": 2},
        "job_type": {"speech": 0, "vision": 1, "text": 2},
    }


def test_restored_exact_history_is_trained_and_learns_on() -> None:
    """A memory of exact completions restores a trained predictor that predicts the
    submission and still learns from the next inexact ones."""
    predictor = IterationPredictor(min_history=4, refit_every=4)
    for i in range(4):
        predictor.observe(Completion("ann", "vision", 64, 1, 1e4 * (i + 1), 1e4 * (i + 1)))
    restored = IterationPredictor(min_history=4, refit_every=4)
    restored.restore(predictor.export())
    view = job(1, total_iterations=5e4, user="ann")
    assert restored.trained and restored.predict(view) == 5e4
    for i in range(8):
        restored.observe(Completion("ann", "vision", 64, 1, 1e4 * (i + 1), 2.5e3 * (i + 1)))
    assert restored.predict(view) < 4e4


def test_export_lists_every_completion_in_order_across_a_restore() -> None:
    """The exported history is every completion observed, in order, also after a restore
    and the completions observed since; an export is not changed by later learning."""
    first = Completion("ann", "vision", 64, 1, 1e4, 5e3)
    second = Completion("bob", "speech", 32, 2, 2e4, 2e4)
    predictor = IterationPredictor(min_history=1, refit_every=1)
    predictor.observe(first)
    exported = predictor.export()
    restored = IterationPredictor(min_history=1, refit_every=1)
    restored.restore(exported)
    restored.observe(second)
    assert [list(row) for row in exported["history"]] == [["ann", "vision", 64, 1, 1e4, 5e3]]
    assert [list(row) for row in restored.export()["history"]] == [
        ["ann", "vision", 64, 1, 1e4, 5e3],
        ["bob", "speech", 32, 2, 2e4, 2e4],
    ]
