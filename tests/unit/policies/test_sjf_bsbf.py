"""sjf-bsbf: shortest first, non-preemptive, shares only when it lowers the pair's JCT."""

from __future__ import annotations

from typing import Any

import pytest

from master.scheduling.memory import GIB
from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policies.sjf_bsbf import (
    Releases,
    SjfBsbfPolicy,
    paired_jct,
    sequential_jct,
)
from master.scheduling.views import JobView, Snapshot
from tests.unit.policies.builders import SPEEDS, job, model, snapshot

V100 = SPEEDS["vision"]["v100"]


def _resident(remaining: float, **fields: Any) -> JobView:
    return job(
        1,
        total_iterations=remaining,
        shareable=True,
        current=Allocation.on([GpuSlot("v100-000", 0)], 64),
        **fields,
    )


def test_paired_jct_formula() -> None:
    """a (1 h alone) and b (3 h alone) slowed 1.25x: a ends at 1.25 h, b at 1.25 + 2 h."""
    assert paired_jct(1.0, 3.0, 1.25, 1.25) == pytest.approx((1.25 + 3.25) / 2)
    assert sequential_jct(1.0, 3.0) == pytest.approx((3.0 + 4.0) / 2)


def test_shares_when_co_location_beats_waiting() -> None:
    """A short job beside a long one, both barely slowed: it shares, with mutual links."""
    pairs = {("vision", "vision", "v100", 1): (V100 * 0.8, V100 * 0.8)}
    resident = _resident(V100 * 36_000)  # 10 h alone
    newcomer = job(2, total_iterations=V100 * 600, shareable=True)  # 10 min alone
    snap = snapshot({"v100": 1}, [resident, newcomer], throughput=model(pairs))
    policy = SjfBsbfPolicy()
    plan = policy.plan(snap, 0.0)
    assert plan.violations(snap) == []
    a, b = plan.get(2), plan.get(1)
    assert a is not None and b is not None
    assert a.shared_with == 1 and b.shared_with == 2
    assert a.slots == b.slots
    (decision,) = policy.last_sharing
    assert decision.paired < decision.sequential


def test_never_shares_when_sequential_is_better() -> None:
    """A resident about to finish: waiting for it beats a 2x slowdown for both."""
    pairs = {("vision", "vision", "v100", 1): (V100 * 0.5, V100 * 0.5)}
    resident = _resident(V100 * 60)  # one minute left
    newcomer = job(2, total_iterations=V100 * 36_000, shareable=True)
    snap = snapshot({"v100": 1}, [resident, newcomer], throughput=model(pairs))
    e_a, e_b = 36_000.0, 60.0
    assert paired_jct(e_a, e_b, 2.0, 2.0) > sequential_jct(e_a, e_b)
    plan = SjfBsbfPolicy().plan(snap, 0.0)
    assert 2 not in plan
    alloc = plan.get(1)
    assert alloc is not None and alloc.shared_with is None


def test_never_shares_without_evidence_the_pair_fits() -> None:
    """No co-location figure for the pair: no sharing."""
    resident = _resident(V100 * 36_000)
    newcomer = job(2, total_iterations=V100 * 600, shareable=True)
    snap = snapshot({"v100": 1}, [resident, newcomer])
    assert 2 not in SjfBsbfPolicy().plan(snap, 0.0)


def test_picks_the_smallest_accumulation_that_fits_in_memory() -> None:
    """10 GiB resident + 12 GiB newcomer on 16 GiB: k = 8 is the first that fits."""
    pairs = {("vision", "vision", "v100", 1): (V100 * 0.8, V100 * 0.8)}
    resident = _resident(V100 * 36_000, memory_bytes_per_gpu=10 * GIB)
    newcomer = job(2, total_iterations=V100 * 600, shareable=True, memory_bytes_per_gpu=12 * GIB)
    snap = snapshot(
        {"v100": 1}, [resident, newcomer], throughput=model(pairs), memory_bytes=16 * GIB
    )
    policy = SjfBsbfPolicy(state_fraction=0.35)
    plan = policy.plan(snap, 0.0)
    alloc = plan.get(2)
    assert alloc is not None and alloc.accumulation_steps == 8
    used = policy.footprint(resident, 1) + policy.footprint(newcomer, 8)
    assert used <= 16 * GIB
    assert policy.footprint(resident, 1) + policy.footprint(newcomer, 4) > 16 * GIB
    assert alloc.global_batch == 64


def test_never_exceeds_gpu_memory() -> None:
    """When no accumulation makes the pair fit, the newcomer waits."""
    pairs = {("vision", "vision", "v100", 1): (V100 * 0.8, V100 * 0.8)}
    resident = _resident(V100 * 36_000, memory_bytes_per_gpu=15 * GIB)
    newcomer = job(2, total_iterations=V100 * 600, shareable=True, memory_bytes_per_gpu=12 * GIB)
    snap = snapshot(
        {"v100": 1}, [resident, newcomer], throughput=model(pairs), memory_bytes=16 * GIB
    )
    assert 2 not in SjfBsbfPolicy(max_accumulation=8).plan(snap, 0.0)


def test_non_preemptive_shortest_first() -> None:
    """A running long job keeps its GPU; waiting jobs go shortest first."""
    running = job(1, total_iterations=1e9, current=Allocation.on([GpuSlot("v100-000", 0)], 64))
    long_wait = job(2, total_iterations=1e7, arrival_time=0.0)
    short_wait = job(3, total_iterations=1e3, arrival_time=50.0)
    snap = snapshot({"v100": 2}, [running, long_wait, short_wait])
    plan = SjfBsbfPolicy().plan(snap, 0.0)
    assert plan.get(1) == running.current
    assert 3 in plan and 2 not in plan


def test_partner_leaving_ends_the_sharing() -> None:
    """When one of a pair completes, the other continues alone at full batch."""
    current = Allocation.on([GpuSlot("v100-000", 0)], 64, accumulation_steps=2, shared_with=5)
    survivor = job(2, shareable=True, current=current)
    snap = snapshot({"v100": 1}, [survivor])
    alloc = SjfBsbfPolicy().plan(snap, 0.0).get(2)
    assert alloc is not None
    assert alloc.shared_with is None and alloc.accumulation_steps == 1
    assert alloc.slots == current.slots


def test_an_assumed_slowdown_lets_pairs_without_figures_share() -> None:
    """With no co-location figure, the pair shares only when an assumed slowdown is set."""
    resident = _resident(V100 * 36_000)
    newcomer = job(2, total_iterations=V100 * 600, shareable=True)
    snap = snapshot({"v100": 1}, [resident, newcomer], throughput=model({}))
    assert SjfBsbfPolicy().plan(snap, 0.0).get(2) is None
    plan = SjfBsbfPolicy(assumed_pair_slowdown=1.2).plan(snap, 0.0)
    shared = plan.get(2)
    assert shared is not None and shared.shared_with == 1
    assert plan.violations(snap) == []


def test_an_assumed_slowdown_below_one_is_refused() -> None:
    """Sharing cannot make both jobs faster: a slowdown in (0, 1) is a configuration error."""
    with pytest.raises(ValueError, match="assumed_pair_slowdown"):
        SjfBsbfPolicy(assumed_pair_slowdown=0.5)


def _with_a_job_about_to_finish() -> Snapshot:
    """v100:2: a 10 h shareable resident on GPU 0, a job on GPU 1 done in a minute, and a
    10-minute newcomer that would share GPU 0 at 1.25x slowdown for both."""
    pairs = {("vision", "vision", "v100", 1): (V100 * 0.8, V100 * 0.8)}
    resident = _resident(V100 * 36_000)
    finishing = job(
        3,
        job_type="speech",
        total_iterations=SPEEDS["speech"]["v100"] * 60,
        current=Allocation.on([GpuSlot("v100-000", 1)], 64),
    )
    newcomer = job(2, total_iterations=V100 * 600, shareable=True)
    return snapshot({"v100": 2}, [resident, finishing, newcomer], throughput=model(pairs))


def test_paper_variant_waits_for_gpus_released_before_the_partner_ends() -> None:
    """Sharing now beats waiting 10 h for the partner (default shares), but not starting
    alone in a minute on the GPU the other job releases (the paper variant waits)."""
    snap = _with_a_job_about_to_finish()
    default = SjfBsbfPolicy()
    shared = default.plan(snap, 0.0).get(2)
    assert shared is not None and shared.shared_with == 1
    paper = SjfBsbfPolicy(variant="paper")
    plan = paper.plan(snap, 0.0)
    assert plan.get(2) is None and not paper.last_sharing
    assert "completes alone within 0.18 h" in (plan.reason(2) or "")


def test_releases_give_the_earliest_alone_completion() -> None:
    """The newcomer's best is the GPU released in a minute, then 10 minutes alone."""
    snap = _with_a_job_about_to_finish()
    releases = Releases(snap)
    jobs = {j.id: j for j in snap.jobs}
    free = FreeGpus(snap.cluster)
    for job_id in (1, 3):
        current = jobs[job_id].current
        assert current is not None
        free.take_slots(current.slots)
        releases.hold(jobs[job_id], current)
    assert releases.alone_jct(jobs[2], free) == pytest.approx(60.0 + 600.0)


def test_paper_variant_shares_when_no_gpus_free_up_sooner() -> None:
    """On one GPU the earliest alone start is the partner's end: the paper variant shares
    exactly as the default does."""
    pairs = {("vision", "vision", "v100", 1): (V100 * 0.8, V100 * 0.8)}
    resident = _resident(V100 * 36_000)
    newcomer = job(2, total_iterations=V100 * 600, shareable=True)
    snap = snapshot({"v100": 1}, [resident, newcomer], throughput=model(pairs))
    paper = SjfBsbfPolicy(variant="paper")
    plan = paper.plan(snap, 0.0)
    assert plan.violations(snap) == []
    shared = plan.get(2)
    assert shared is not None and shared.shared_with == 1
    (decision,) = paper.last_sharing
    assert decision.sequential == pytest.approx(sequential_jct(600.0 * 1.0, 36_000.0))


def test_unknown_sjf_bsbf_variant_is_refused() -> None:
    """A variant name the policy does not know is an error naming the known ones."""
    with pytest.raises(ValueError, match="sjf-bsbf variant must be one of default, paper"):
        SjfBsbfPolicy(variant="later")
