"""hare: least normalized attained service first, comparative-advantage types, folding."""

from __future__ import annotations

import pytest

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policies.hare import HarePolicy, alone_bound, normalized_service
from master.scheduling.rates import allocation_throughput, copy_throughput
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import Snapshot
from tests.unit.policies.builders import job, snapshot


def test_attained_service_is_weighted_by_the_jobs_speedup_on_each_type() -> None:
    """An hour on a v100 counts ten k80-hours for a job ten times faster there."""
    a = job(1, gpu_seconds_by_type={"v100": 3600.0, "k80": 600.0})
    snap = snapshot({"v100": 1, "k80": 1}, [a])
    assert normalized_service(snap, a) == 3600.0 * 10.0 + 600.0


def test_orders_by_normalized_not_raw_attained_service() -> None:
    """Less raw GPU time but more normalized work goes second."""
    # Raw: fast_user 1800 s < slow_user 3600 s; normalized: 18000 > 3600.
    fast_user = job(1, arrival_time=0.0, gpu_seconds_by_type={"v100": 1800.0})
    slow_user = job(2, arrival_time=5.0, gpu_seconds_by_type={"k80": 3600.0})
    snap = snapshot({"v100": 1, "k80": 1}, [fast_user, slow_user])
    policy = HarePolicy(queue_thresholds=(5000.0,))
    assert [j.id for j in policy.order(snap, snap.jobs)] == [2, 1]
    blocker = job(
        9, preemptible=False, current=Allocation.on([GpuSlot("k80-000", 0)], 64), arrival_time=9.0
    )
    one_free = snapshot({"v100": 1, "k80": 1}, [fast_user, slow_user, blocker])
    plan = policy.plan(one_free, 0.0)
    assert 9 in plan
    assert 2 in plan and 1 not in plan
    assert "normalized attained service" in (plan.reason(1) or "")


def test_same_queue_keeps_arrival_order() -> None:
    """Jobs in one queue do not overtake each other by small service differences."""
    older = job(1, arrival_time=0.0, gpu_seconds_by_type={"k80": 900.0})
    newer = job(2, arrival_time=10.0)
    snap = snapshot({"k80": 1}, [older, newer])
    assert list(HarePolicy().plan(snap, 0.0)) == [1]


def test_each_job_takes_the_type_of_its_largest_relative_speedup() -> None:
    """Under contention, the job with the larger v100 speedup gets the v100."""
    # vision: 10x on v100 over k80; speech: 2x. Speech is first in queue order.
    speech = job(1, job_type="speech", arrival_time=0.0)
    vision = job(2, job_type="vision", arrival_time=1.0)
    extra = job(3, job_type="text", arrival_time=2.0)
    snap = snapshot({"v100": 1, "k80": 1}, [speech, vision, extra])
    plan = HarePolicy().plan(snap, 0.0)
    placed = {j: snap.cluster.gpu_type(a.slots[0]) for j, a in plan.allocations.items()}
    assert placed == {1: "k80", 2: "v100"}


def test_without_contention_a_job_takes_its_fastest_type() -> None:
    speech = job(1, job_type="speech")
    snap = snapshot({"v100": 1, "k80": 1}, [speech])
    alloc = HarePolicy().plan(snap, 0.0).get(1)
    assert alloc is not None and snap.cluster.gpu_type(alloc.slots[0]) == "v100"


def test_relaxed_synchronization_folds_workers_onto_fewer_gpus() -> None:
    """A 4-worker job with only 2 free GPUs runs folded: 2 GPUs, 2 accumulation steps."""
    wide = job(1, num_gpus=4, batch_size=128)
    snap = snapshot({"v100": 2}, [wide])
    assert HarePolicy(max_fold=1).plan(snap, 0.0).get(1) is None
    plan = HarePolicy(max_fold=4).plan(snap, 0.0)
    assert plan.violations(snap) == []
    alloc = plan.get(1)
    assert alloc is not None
    assert alloc.num_gpus == 2 and alloc.accumulation_steps == 2 and alloc.folds(4)
    assert alloc.global_batch == 128
    rate = allocation_throughput(snap.throughput, snap.cluster, "vision", alloc)
    assert abs(rate - snap.throughput.throughput("vision", "v100", 2) / 2) < 1e-9


def _types(snap: Snapshot, alloc: Allocation | None) -> dict[str, int]:
    assert alloc is not None
    counts: dict[str, int] = {}
    for slot in alloc.slots:
        t = snap.cluster.gpu_type(slot)
        counts[t] = counts.get(t, 0) + 1
    return counts


def test_paper_variant_splits_a_job_across_types_when_none_has_its_count_free() -> None:
    """4 tasks, 2 v100 and 2 k80 free: the default waits, the paper variant runs on all
    four at the sum of its tasks' rates (speed-proportional batch split; whole samples
    make it a little less)."""
    wide = job(1, num_gpus=4, batch_size=4096)
    snap = snapshot({"v100": 2, "k80": 2}, [wide])
    assert HarePolicy().plan(snap, 0.0).get(1) is None
    plan = HarePolicy(variant="paper").plan(snap, 0.0)
    assert plan.violations(snap) == []
    alloc = plan.get(1)
    assert _types(snap, alloc) == {"v100": 2, "k80": 2}
    assert alloc is not None and not alloc.folded and alloc.global_batch == 4096
    model = snap.throughput
    per_task = [model.throughput("vision", t, 4, consolidated=False) / 4 for t in ("v100", "k80")]
    rate = allocation_throughput(model, snap.cluster, "vision", alloc)
    assert rate == pytest.approx(2 * sum(per_task), rel=0.01)
    assert plan.reason(1) == "4 tasks on 2 v100 + 2 k80"


def test_paper_variant_fills_the_best_type_first_then_the_next() -> None:
    """Under contention speech, first in order, takes the k80s where its relative speedup
    is largest; vision then takes the v100 and fills its second task on the last k80."""
    speech = job(1, job_type="speech", num_gpus=2, arrival_time=0.0)
    vision = job(2, job_type="vision", num_gpus=2, arrival_time=1.0)
    extra = job(3, job_type="text", num_gpus=2, arrival_time=2.0)
    snap = snapshot({"v100": 1, "k80": 3}, [speech, vision, extra])
    plan = HarePolicy(variant="paper").plan(snap, 0.0)
    assert plan.violations(snap) == []
    assert _types(snap, plan.get(1)) == {"k80": 2}
    assert _types(snap, plan.get(2)) == {"v100": 1, "k80": 1}
    assert 3 not in plan


def test_paper_variant_folds_tasks_when_fewer_gpus_than_tasks_are_free() -> None:
    """4 tasks and 3 free GPUs: 2 GPUs (the fastest) each run 2 tasks in turn; a job
    that cannot accumulate gradients (not preemptible) waits instead."""
    wide = job(1, num_gpus=4, batch_size=128)
    snap = snapshot({"v100": 1, "k80": 2}, [wide])
    plan = HarePolicy(variant="paper").plan(snap, 0.0)
    assert plan.violations(snap) == []
    alloc = plan.get(1)
    assert _types(snap, alloc) == {"v100": 1, "k80": 1}
    assert alloc is not None and alloc.accumulation_steps == 2 and alloc.folds(4)
    assert min(alloc.batch_shares) >= 2 and alloc.global_batch == 128
    copy = copy_throughput(snap.throughput, snap.cluster, "vision", alloc.slots, alloc.batch_shares)
    rate = allocation_throughput(snap.throughput, snap.cluster, "vision", alloc)
    assert abs(rate - copy / 2) < 1e-9
    assert plan.reason(1) == "4 tasks on 1 v100 + 1 k80, 2 per GPU in turn"
    pinned = job(1, num_gpus=4, batch_size=128, preemptible=False)
    assert 1 not in HarePolicy(variant="paper").plan(snapshot({"v100": 1, "k80": 2}, [pinned]), 0.0)


def test_paper_variant_max_fold_caps_the_folding() -> None:
    """With max_fold=2, 8 tasks on 3 free GPUs would need 4 per GPU: the job waits."""
    wide = job(1, num_gpus=8, batch_size=256)
    snap = snapshot({"v100": 1, "k80": 2}, [wide])
    assert HarePolicy(variant="paper", max_fold=2).plan(snap, 0.0).get(1) is None
    alloc = HarePolicy(variant="paper").plan(snap, 0.0).get(1)
    assert alloc is not None and alloc.num_gpus == 2 and alloc.accumulation_steps == 4


def test_paper_variant_places_least_attained_service_first() -> None:
    """Two 2-task jobs and two free GPUs: the one with less normalized service runs."""
    served = job(1, num_gpus=2, arrival_time=0.0, gpu_seconds_by_type={"k80": 7200.0})
    fresh = job(2, num_gpus=2, arrival_time=5.0)
    snap = snapshot({"v100": 1, "k80": 1}, [served, fresh])
    plan = HarePolicy(variant="paper").plan(snap, 0.0)
    assert _types(snap, plan.get(2)) == {"v100": 1, "k80": 1}
    assert 1 not in plan
    assert "normalized attained service" in (plan.reason(1) or "")


def test_paper_variant_keeps_a_running_job_on_its_gpus_when_its_mix_is_unchanged() -> None:
    """Replanning with the job on its mixed placement returns that very placement."""
    wide = job(1, num_gpus=4, batch_size=128)
    first = HarePolicy(variant="paper").plan(snapshot({"v100": 2, "k80": 2}, [wide]), 0.0).get(1)
    assert first is not None
    running = job(1, num_gpus=4, batch_size=128, current=first)
    again = HarePolicy(variant="paper").plan(snapshot({"v100": 2, "k80": 2}, [running]), 0.0)
    assert again.get(1) is first


def test_unknown_hare_variant_is_refused() -> None:
    """A variant name the policy does not know is an error naming the known ones."""
    with pytest.raises(ValueError, match="hare variant must be one of default, paper, got 'x'"):
        HarePolicy(variant="x")


def test_paper_variant_falls_back_to_one_type_when_a_slow_gpu_gets_too_few_samples() -> None:
    """Batch 4 over 4 tasks folded onto a v100 and a k80 (10x slower) would leave the k80
    one sample for 2 micro-batches: the job folds all 4 tasks onto the v100 instead."""
    small = job(1, num_gpus=4, batch_size=4)
    snap = snapshot({"v100": 1, "k80": 1}, [small])
    plan = HarePolicy(variant="paper").plan(snap, 0.0)
    assert plan.violations(snap) == []
    alloc = plan.get(1)
    assert _types(snap, alloc) == {"v100": 1}
    assert alloc is not None and alloc.accumulation_steps == 4 and alloc.batch_shares == (4,)


def test_paper_variant_never_runs_a_job_faster_than_alone_on_one_type() -> None:
    """A folded copy across types that would beat every single-type way to run the job
    (here: 2 GPUs far faster than 1 or 4 of the v100s) falls back to one type, so the
    simulator's per-job lower bound holds."""
    profile: dict[tuple[str, str, int, bool], float] = {}
    for consolidated in (True, False):
        for n, v100 in ((1, 10.0), (2, 100.0), (4, 10.0)):
            profile[("vision", "v100", n, consolidated)] = v100
            profile[("vision", "k80", n, consolidated)] = 1.0
    model = ThroughputModel(profile)
    wide = job(1, num_gpus=4, batch_size=4096)
    snap = snapshot({"v100": 1, "k80": 1}, [wide], throughput=model)
    alloc = HarePolicy(variant="paper").plan(snap, 0.0).get(1)
    assert alloc is not None
    assert allocation_throughput(model, snap.cluster, "vision", alloc) <= alone_bound(snap, wide)
    assert _types(snap, alloc) == {"v100": 1} and alloc.accumulation_steps == 4
