"""hadar: primal-dual pricing never places a job whose payoff is not positive."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policies.hadar import HadarPolicy, Prices
from master.scheduling.policy import make_policy
from master.scheduling.rates import allocation_throughput
from tests.unit.policies.builders import job, snapshot


def test_price_grows_exponentially_from_floor_to_ceiling() -> None:
    """p(u) = L * (U/L)**u: L when idle, geometric in between, U at full use."""
    prices = Prices({"v100": 4}, 1.0, 16.0)
    assert prices.price("v100") == 1.0
    assert abs(prices.price("v100", 2) - 4.0) < 1e-9
    assert abs(prices.price("v100", 4) - 16.0) < 1e-9
    assert abs(prices.cost("v100", 2) - (1.0 + 2.0)) < 1e-9


def test_a_price_ladder_is_each_next_price_and_sums_to_the_cost() -> None:
    """The ladder of the next k GPUs holds exactly each one's price, after claims and a
    lowered ceiling too, and its sum is exactly their cost; free prices are all zero and
    a type the cluster lacks is priced out."""
    prices = Prices({"v100": 8, "k80": 4}, {"v100": 1.0, "k80": 0.5}, {"v100": 16.0, "k80": 3.0})
    prices.claim("v100", 3)
    prices.lower_ceiling("v100", 9.0)
    for t in ("v100", "k80"):
        ladder = prices.ladder(t, 6)
        assert ladder == [prices.price(t, i) for i in range(6)]
        assert sum(ladder) == prices.cost(t, 6)
    assert Prices({"v100": 8}, 1.0, 16.0, free=True).ladder("v100", 3) == [0.0, 0.0, 0.0]
    assert prices.ladder("a100", 2) == [math.inf, math.inf]


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"ceiling": "round", "completion_exponent": 1.0},
        {"per_type_bounds": False, "exchange": False},
        {"completion_exponent": 1.5, "horizon_s": 3600.0},
    ],
)
def test_no_placed_job_has_a_negative_payoff_on_an_oversubscribed_cluster(
    params: dict[str, Any],
) -> None:
    """Every placed job's utility exceeds the prices it paid; refused ones do not."""
    rng = random.Random(3)
    jobs = [
        job(
            i,
            job_type=rng.choice(["vision", "speech", "text"]),
            num_gpus=rng.choice([1, 1, 2, 4]),
            total_iterations=rng.uniform(1e3, 1e7),
            priority=rng.choice([1.0, 2.0]),
        )
        for i in range(60)
    ]
    snap = snapshot({"v100": 8, "p100": 8, "k80": 16}, jobs)
    policy = HadarPolicy(**params)
    plan = policy.plan(snap, 3600.0)
    assert plan.violations(snap) == []
    assert len(plan) > 0
    for job_id in plan:
        decision = policy.last_decisions[job_id]
        assert decision.placed
        assert decision.payoff > 0
    refused = [d for d in policy.last_decisions.values() if not d.placed]
    assert all(d.payoff <= 0 for d in refused)
    for job_id, decision in policy.last_decisions.items():
        assert (job_id in plan) == decision.placed


def test_low_utility_job_waits_even_with_free_gpus_when_priced_out() -> None:
    """A long job does not get the last GPUs of a type if their price exceeds its utility.

    With the round's highest utility as the ceiling (the paper's bound) prices stay high
    after the valuable job took half the GPUs.
    """
    short = job(1, num_gpus=2, total_iterations=100.0)
    long = job(2, num_gpus=2, total_iterations=1e9)
    snap = snapshot({"v100": 4}, [short, long])
    policy = HadarPolicy(ceiling="round", completion_exponent=1.0)
    plan = policy.plan(snap, 0.0)
    assert 1 in plan
    assert 2 not in plan
    assert policy.last_decisions[2].payoff <= 0
    assert "price" in (plan.reason(2) or "")


def test_with_a_falling_ceiling_the_same_long_job_gets_the_idle_gpus() -> None:
    """Ceiling = best job still to come: once the valuable job is placed, prices fall."""
    short = job(1, num_gpus=2, total_iterations=100.0)
    long = job(2, num_gpus=2, total_iterations=1e9)
    snap = snapshot({"v100": 4}, [short, long])
    policy = HadarPolicy(ceiling="remaining")
    plan = policy.plan(snap, 0.0)
    assert set(plan) == {1, 2}
    assert policy.last_decisions[2].payoff > 0


def test_prices_steer_a_job_to_the_type_where_it_loses_least() -> None:
    """With v100s claimed by a job that gains 10x there, a job that gains 2x takes k80s."""
    vision = job(1, job_type="vision", num_gpus=2, total_iterations=1e5)
    speech = job(2, job_type="speech", num_gpus=2, total_iterations=1e5)
    snap = snapshot({"v100": 2, "k80": 2}, [vision, speech])
    plan = HadarPolicy().plan(snap, 0.0)
    types = {j: snap.cluster.gpu_type(a.slots[0]) for j, a in plan.allocations.items()}
    assert types == {1: "v100", 2: "k80"}


def test_a_lone_job_is_always_placed() -> None:
    """The job with the highest per-GPU utility always has a positive payoff."""
    lone = job(1, num_gpus=4, total_iterations=1e12, job_type="speech")
    snap = snapshot({"k80": 4}, [lone], gpus_per_server=1)
    plan = HadarPolicy().plan(snap, 0.0)
    assert 1 in plan


def test_tasks_of_one_job_may_span_gpu_types_with_speed_proportional_batches() -> None:
    """Task-level heterogeneity: busy v100s push a job onto a v100+p100 mix, split by speed."""
    blocker = job(
        9,
        num_gpus=2,
        preemptible=False,
        current=Allocation.on([GpuSlot("v100-000", 0), GpuSlot("v100-000", 1)], 64),
    )
    mixed = job(1, num_gpus=4, total_iterations=50_000.0, batch_size=1024)
    snap = snapshot({"v100": 4, "p100": 4, "k80": 4}, [blocker, mixed])
    plan = HadarPolicy().plan(snap, 0.0)
    alloc = plan.get(1)
    assert alloc is not None
    types = [snap.cluster.gpu_type(s) for s in alloc.slots]
    assert sorted(types) == ["p100", "p100", "v100", "v100"]
    shares = dict(zip(alloc.slots, alloc.batch_shares, strict=True))
    v100_share = next(shares[s] for s in alloc.slots if snap.cluster.gpu_type(s) == "v100")
    p100_share = next(shares[s] for s in alloc.slots if snap.cluster.gpu_type(s) == "p100")
    assert abs(v100_share / p100_share - 2.0) < 0.02
    # The mix beats four p100s, the best single-type option left.
    mix_rate = allocation_throughput(snap.throughput, snap.cluster, "vision", alloc)
    assert mix_rate > snap.throughput.throughput("vision", "p100", 4)


def test_running_job_keeps_its_gpus_when_its_choice_is_unchanged() -> None:
    """No churn: a running job that would get the same type keeps the very same GPUs."""
    current = Allocation.on([GpuSlot("v100-001", 2)], 64)
    running = job(1, current=current)
    snap = snapshot({"v100": 8}, [running])
    plan = HadarPolicy().plan(snap, 0.0)
    assert plan.get(1) == current


def test_utility_is_linear_until_the_job_can_finish_then_concave() -> None:
    """Speed beyond finishing within the round only saves the rest of the round, worth
    ``finish_weight`` of a round's progress."""
    from master.scheduling.policies.hadar import PrimalDual

    pd = PrimalDual(completion_exponent=1.0, finish_weight=1.0)
    j = job(1, total_iterations=3600.0, priority=2.0)
    snap = snapshot({"v100": 1}, [j], round_seconds=360.0)
    # 3600 iterations left: 5 it/s completes half of them in a round, 20 it/s all in
    # half a round.
    assert pd.utility(snap, j, 5.0) == pytest.approx(2.0 * 0.5)
    assert pd.utility(snap, j, 10.0) == pytest.approx(2.0 * 1.0)
    assert pd.utility(snap, j, 20.0) == pytest.approx(2.0 * 1.5)
    low = PrimalDual(completion_exponent=1.0, finish_weight=0.1)
    assert low.utility(snap, j, 5.0) == pytest.approx(2.0 * 0.5)
    assert low.utility(snap, j, 20.0) == pytest.approx(2.0 * (1.0 + 0.1 * 0.5))
    with pytest.raises(ValueError, match="finish_weight"):
        PrimalDual(finish_weight=1.5)
    assert pd.utility(snap, j, 40.0) - pd.utility(snap, j, 20.0) < (
        pd.utility(snap, j, 20.0) - pd.utility(snap, j, 10.0)
    )


def test_paper_variant_prices_the_long_job_out_where_the_default_places_it() -> None:
    """variant=paper takes the paper's fixed ceiling: the long job waits beside idle GPUs
    that the default variant's falling ceiling gives it."""
    short = job(1, num_gpus=2, total_iterations=100.0)
    long = job(2, num_gpus=2, total_iterations=1e9)
    snap = snapshot({"v100": 4}, [short, long])
    paper = make_policy("hadar", variant="paper", completion_exponent=1.0)
    assert set(paper.plan(snap, 0.0)) == {1}
    default = make_policy("hadar", completion_exponent=1.0)
    assert set(default.plan(snap, 0.0)) == {1, 2}


def test_paper_variant_uses_one_price_range_and_explicit_parameters_win() -> None:
    """The paper's bounds are one range for every type; a parameter given wins."""
    paper = make_policy("hadar", variant="paper")
    assert isinstance(paper, HadarPolicy)
    assert paper._pass.ceiling == "round" and not paper._pass.per_type_bounds
    mixed = make_policy("hadar", variant="paper", ceiling="remaining", per_type_bounds=True)
    assert isinstance(mixed, HadarPolicy)
    assert mixed._pass.ceiling == "remaining" and mixed._pass.per_type_bounds
    default = make_policy("hadar")
    assert isinstance(default, HadarPolicy)
    assert default._pass.ceiling == "remaining" and default._pass.per_type_bounds


def test_unknown_hadar_variant_is_refused() -> None:
    """A variant name the policy does not know is an error naming the known ones."""
    with pytest.raises(ValueError, match="hadar variant must be one of default, paper"):
        make_policy("hadar", variant="tuned")


@pytest.mark.parametrize("seed", range(6))
def test_the_unheld_gpus_kept_through_a_pass_are_those_free_and_not_held(seed: int) -> None:
    """However the pass moves and places jobs (mixed, moved, consolidated), the free GPUs
    no running job holds that it keeps per type, instead of working them out at each
    move, are at the end exactly the free GPUs no running job holds."""
    from master.scheduling.placement import FreeGpus
    from master.scheduling.policies.hadar import PrimalDual

    rng = random.Random(seed)
    cluster = snapshot({"v100": 8, "p100": 8, "k80": 8}, []).cluster
    idle = [gpu.slot for node in cluster.nodes for gpu in node.usable_gpus]
    rng.shuffle(idle)
    jobs = []
    for i in range(14):
        n = rng.choice([1, 1, 2, 4])
        current = None
        if i < 7 and len(idle) >= n:
            current = Allocation.on([idle.pop() for _ in range(n)], 64)
        jobs.append(job(i, num_gpus=n, total_iterations=rng.uniform(1e4, 1e5), current=current))
    snap = snapshot({"v100": 8, "p100": 8, "k80": 8}, jobs)
    pd = PrimalDual(completion_exponent=2.0, ceiling="remaining", exchange=False)
    kept: dict[str, dict[str, int]] = {}
    taken = pd._taken

    def watch(gpu_type: str, slots: Sequence[GpuSlot]) -> None:
        # The last move's ledgers, as the pass leaves them (it forgets them at its end).
        taken(gpu_type, slots)
        kept.update({t: ledger.free_on_node(t) for t, ledger in pd._unheld.items()})

    pd._taken = watch  # type: ignore[method-assign]
    free = FreeGpus(snap.cluster)
    pd.run(snap, free, list(snap.jobs))
    held = snap.running_slots()
    assert kept, "no job moved: the scenario tests nothing"
    for gpu_type, on_node in kept.items():
        expected = free.copy([gpu_type])
        expected.discard(slot for slot in held if free.type_of(slot) == gpu_type)
        assert on_node == expected.free_on_node(gpu_type)
