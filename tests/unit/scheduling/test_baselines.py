"""Behaviour of the baseline policies: fifo, srtf, las and gavel."""

from __future__ import annotations

import time

import pytest

from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies.gavel import solve_max_min
from master.scheduling.policy import make_policy
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot

MODEL = ThroughputModel(
    {
        ("fast", "v100", 1, True): 10.0,
        ("fast", "k80", 1, True): 1.0,
        ("flat", "v100", 1, True): 1.2,
        ("flat", "k80", 1, True): 1.0,
        ("fast", "v100", 2, True): 19.0,
        ("fast", "k80", 2, True): 1.9,
    }
)


def job(job_id: int, **kw: object) -> JobView:
    fields: dict[str, object] = {
        "job_type": "fast",
        "num_gpus": 1,
        "total_iterations": 1000.0,
        "arrival_time": float(job_id),
    }
    fields.update(kw)
    return JobView(id=job_id, **fields)  # type: ignore[arg-type]


def snap(cluster: ClusterView, *jobs: JobView, round_number: int = 0) -> Snapshot:
    return Snapshot(cluster, tuple(jobs), round_number, 360.0, MODEL)


def check(snapshot: Snapshot, plan: Plan) -> Plan:
    assert plan.violations(snapshot) == []
    return plan


def test_fifo_starts_in_arrival_order_and_never_preempts() -> None:
    """Two GPUs, three jobs: the first two start; a running job keeps its GPU forever."""
    cluster = ClusterView.from_counts({"v100": 2})
    policy = make_policy("fifo")
    s = snap(cluster, job(3), job(1), job(2))
    plan = check(s, policy.plan(s, 0.0))
    assert set(plan) == {1, 2} and "queued behind" not in (plan.reason(3) or "x")
    assert plan.reason(3) is not None and plan.reason(3).startswith("waiting:")  # type: ignore[union-attr]
    running = job(9, current=Allocation.on([GpuSlot("v100-000", 0)], 1), arrival_time=100.0)
    s2 = snap(cluster, job(0), running)
    plan2 = check(s2, policy.plan(s2, 360.0))
    assert plan2.get(9) == running.current and 0 in plan2


def test_fifo_head_of_line_blocks_unless_backfilling() -> None:
    """A 2-GPU head job that does not fit blocks a 1-GPU job behind it."""
    cluster = ClusterView.from_counts({"v100": 1, "k80": 1})
    s = snap(cluster, job(1, num_gpus=2), job(2))
    strict = check(s, make_policy("fifo").plan(s, 0.0))
    assert len(strict) == 0
    assert strict.reason(2) == "waiting: queued behind job 1 (fifo)"
    assert "needs 2 GPUs of one type" in (strict.reason(1) or "")
    backfill = check(s, make_policy("fifo", backfill=True).plan(s, 0.0))
    assert set(backfill) == {2}


def test_srtf_preempts_for_shorter_remaining_time() -> None:
    """A short new job takes the only GPU from a long running one."""
    cluster = ClusterView.from_counts({"v100": 1})
    slot = GpuSlot("v100-000", 0)
    long_job = job(1, total_iterations=1e6, current=Allocation.on([slot], 1))
    short_job = job(2, total_iterations=100.0)
    s = snap(cluster, long_job, short_job)
    plan = check(s, make_policy("srtf").plan(s, 0.0))
    assert set(plan) == {2}
    pinned = job(1, total_iterations=1e6, current=Allocation.on([slot], 1), preemptible=False)
    s2 = snap(cluster, pinned, short_job)
    assert set(check(s2, make_policy("srtf").plan(s2, 0.0))) == {1}


def test_las_orders_by_discretized_attained_service() -> None:
    """Less service first across queues; arrival order within a queue."""
    cluster = ClusterView.from_counts({"v100": 1})
    policy = make_policy("las", queue_thresholds=(100.0,))
    old_heavy = job(1, gpu_seconds_by_type={"v100": 500.0})
    new_light = job(2, gpu_seconds_by_type={"v100": 50.0})
    s = snap(cluster, old_heavy, new_light)
    assert set(check(s, policy.plan(s, 0.0))) == {2}
    # Same queue (both under 100 GPU-s): the earlier arrival wins despite more service.
    a = job(1, gpu_seconds_by_type={"v100": 90.0})
    b = job(2, gpu_seconds_by_type={"v100": 0.0})
    s2 = snap(cluster, a, b)
    assert set(check(s2, policy.plan(s2, 0.0))) == {1}


def test_las_promotes_starving_jobs() -> None:
    """With starvation_s, a job waiting that long jumps to the first queue."""
    cluster = ClusterView.from_counts({"v100": 1})
    policy = make_policy("las", queue_thresholds=(100.0,), starvation_s=1000.0)
    starving = job(1, gpu_seconds_by_type={"v100": 500.0}, arrival_time=0.0)
    fresh = job(2, gpu_seconds_by_type={"v100": 0.0}, arrival_time=1500.0)
    s = snap(cluster, starving, fresh)
    assert set(check(s, policy.plan(s, 2000.0))) == {1}


def test_gavel_lp_equalizes_normalized_throughput() -> None:
    """Max-min: a 10x-speedup job and a 1.2x one end at the same normalized throughput.

    Normalized by the throughput on an equal (capacity-proportional) share, both reach 1,
    and no GPU time is left unallocated.
    """
    a, b = job(1, job_type="fast"), job(2, job_type="flat")
    thr = {(1, "v100"): 10.0, (1, "k80"): 1.0, (2, "v100"): 1.2, (2, "k80"): 1.0}
    x = solve_max_min([a, b], {"v100": 1, "k80": 1}, thr)

    def normalized(job_id: int) -> float:
        equal = 0.5 * thr[(job_id, "v100")] + 0.5 * thr[(job_id, "k80")]
        return sum(thr[(job_id, t)] * f for t, f in x[job_id].items()) / equal

    assert normalized(1) == pytest.approx(normalized(2), rel=1e-6)
    assert normalized(1) >= 1.0 - 1e-6
    for t in ("v100", "k80"):
        assert x[1].get(t, 0.0) + x[2].get(t, 0.0) == pytest.approx(1.0, abs=1e-6)
    cluster = ClusterView.from_counts({"v100": 1, "k80": 1})
    s = snap(cluster, a, b)
    plan = check(s, make_policy("gavel").plan(s, 0.0))
    assert set(plan) == {1, 2}


def test_gavel_lp_favours_the_worst_off_job() -> None:
    """Max-min, not max-throughput: the job that gains little from a v100 still gets most
    of it, because its normalized throughput is the minimum being raised."""
    a, b = job(1, job_type="fast"), job(2, job_type="flat")
    thr = {(1, "v100"): 10.0, (1, "k80"): 1.0, (2, "v100"): 1.2, (2, "k80"): 1.0}
    x = solve_max_min([a, b], {"v100": 1, "k80": 3}, thr)
    assert x[2]["v100"] > x[1]["v100"]
    # Alone, a job takes its best type whole.
    alone = solve_max_min([a], {"v100": 1, "k80": 3}, thr)
    assert alone[1] == {"v100": pytest.approx(1.0, abs=1e-6)}


def test_gavel_time_shares_a_contended_type() -> None:
    """Two identical jobs, one GPU: each gets half the time, alternating by priority."""
    cluster = ClusterView.from_counts({"v100": 1})
    policy = make_policy("gavel")
    slot = GpuSlot("v100-000", 0)
    ran: list[int] = []
    current: dict[int, Allocation] = {}
    for r in range(6):
        jobs = [job(i, current=current.get(i)) for i in (1, 2)]
        s = snap(cluster, *jobs, round_number=r)
        plan = check(s, policy.plan(s, 360.0 * r))
        assert len(plan) == 1
        (winner,) = plan.allocations
        ran.append(winner)
        current = {winner: Allocation.on([slot], 1)}
    assert ran.count(1) == 3 and ran.count(2) == 3


def test_gavel_keeps_running_jobs_on_their_gpus_once_each() -> None:
    """Jobs that stay on their type keep their GPUs; of two that claim the same GPU the
    first in placement order keeps it and the other is placed anew."""
    cluster = ClusterView.from_counts({"v100": 4})
    slot = GpuSlot("v100-000", 0)
    apart = [
        job(1, current=Allocation.on([slot], 1)),
        job(2, current=Allocation.on([GpuSlot("v100-000", 3)], 1)),
    ]
    s = snap(cluster, *apart)
    plan = check(s, make_policy("gavel").plan(s, 0.0))
    assert plan.allocations == {j.id: j.current for j in apart}
    clashing = [job(1, current=Allocation.on([slot], 1)), job(2, current=Allocation.on([slot], 1))]
    s = snap(cluster, *clashing)
    plan = check(s, make_policy("gavel").plan(s, 0.0))
    assert plan.get(1) == clashing[0].current
    moved = plan.get(2)
    assert moved is not None and slot not in moved.slots


def test_gavel_lp_weights_are_relative_and_extreme_ones_still_solve() -> None:
    """Scaling every priority alike changes no time fraction; a weight a thousand times
    another's gets its job more of the contended fast type; weights from the fair-share
    floor (1e-9) to the submission ceiling (1000), and a denormal 5e-324 (which made the
    LP's coefficients infinite), still solve, every job with some time."""
    thr = {(1, "v100"): 10.0, (1, "k80"): 1.0, (2, "v100"): 1.2, (2, "k80"): 1.0}
    capacity = {"v100": 1, "k80": 1}
    base = solve_max_min([job(1), job(2, job_type="flat")], capacity, thr)
    scaled = solve_max_min(
        [job(1, priority=0.001), job(2, job_type="flat", priority=0.001)], capacity, thr
    )
    for job_id in (1, 2):
        for t in capacity:
            assert scaled[job_id].get(t, 0.0) == pytest.approx(base[job_id].get(t, 0.0), abs=1e-6)
    heavy = solve_max_min([job(1, priority=1000.0), job(2, job_type="flat")], capacity, thr)
    assert heavy[1]["v100"] > base[1].get("v100", 0.0)
    for low in (1e-9, 5e-324):
        x = solve_max_min(
            [job(1, priority=low), job(2, job_type="flat", priority=1000.0)], capacity, thr
        )
        assert x[1] and x[2]


def test_gavel_lp_scales_to_hundreds_of_jobs() -> None:
    """400 jobs on 4 types: the LP solves quickly and respects every capacity."""
    types = {"v100": 64, "p100": 64, "k80": 64, "t4": 64}
    jobs = [job(i, num_gpus=1 + (i % 3 == 0)) for i in range(400)]
    thr = {(j.id, t): 1.0 + ((j.id * 7 + k * 3) % 11) for j in jobs for k, t in enumerate(types)}
    started = time.perf_counter()
    x = solve_max_min(jobs, types, thr)
    assert time.perf_counter() - started < 5.0
    for t, cap in types.items():
        assert sum(j.num_gpus * x[j.id].get(t, 0.0) for j in jobs) <= cap + 1e-6
    assert all(sum(x[j.id].values()) <= 1 + 1e-6 for j in jobs)


def test_unknown_policy_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="bad parameters for policy 'las'"):
        make_policy("las", bogus=1)
    with pytest.raises(ValueError, match="ascending"):
        make_policy("las", queue_thresholds=(10.0, 5.0))
