"""hare: least normalized attained service first, comparative-advantage types, folding."""

from __future__ import annotations

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policies.hare import HarePolicy, normalized_service
from master.scheduling.rates import allocation_throughput
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
