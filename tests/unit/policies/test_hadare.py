"""hadare: copies on distinct idle servers, progress summed with the averaging loss."""

from __future__ import annotations

import pytest

from master.scheduling.policies.hadare import HadarEPolicy
from master.scheduling.views import Snapshot
from master.sim.engine import SimConfig, simulate
from master.sim.trace import TraceJob
from tests.unit.policies.builders import SPEEDS, job, model, snapshot


def test_idle_servers_get_copies_each_on_its_own_server() -> None:
    """One forkable job on a cluster of three servers forks into three copies, one per
    server."""
    snap = snapshot({"v100": 4, "p100": 4, "k80": 4}, [job(1, num_gpus=2, forkable=True)])
    plan = HadarEPolicy().plan(snap, 0.0)
    assert plan.violations(snap) == []
    alloc = plan.get(1)
    assert alloc is not None
    assert alloc.num_copies == 3
    nodes = [{s.node for s in copy} for copy in alloc.copies]
    assert all(len(n) == 1 for n in nodes)
    assert len({next(iter(n)) for n in nodes}) == 3
    assert all(len(copy) == 2 for copy in alloc.copies)


def test_a_copy_that_would_slow_the_job_is_not_added() -> None:
    """A k80 copy of a job 10x faster on v100 loses more to averaging than it adds."""
    snap = snapshot({"v100": 4, "k80": 4}, [job(1, num_gpus=4, job_type="vision", forkable=True)])
    alloc = HadarEPolicy(copy_efficiency=0.9).plan(snap, 0.0).get(1)
    assert alloc is not None
    assert alloc.num_copies == 1


def test_copies_fill_only_gpus_that_no_waiting_job_gets() -> None:
    """Two jobs on two servers: each gets a server before anyone is forked."""
    jobs = [job(1, num_gpus=4, forkable=True), job(2, num_gpus=4, job_type="speech", forkable=True)]
    snap = snapshot({"v100": 4, "k80": 4}, jobs)
    plan = HadarEPolicy().plan(snap, 0.0)
    assert {a.num_copies for a in plan.allocations.values()} == {1}
    assert set(plan) == {1, 2}


def test_combined_progress_is_the_sum_of_copies_times_efficiency() -> None:
    """In the simulator a forked job advances by e * (sum of its copies' speeds)."""
    throughput = model()
    speech = job(0, num_gpus=4, job_type="speech", forkable=True)
    snap = snapshot({"v100": 4, "k80": 4}, [speech], throughput=throughput)
    plan = HadarEPolicy(copy_efficiency=0.9).plan(snap, 0.0)
    alloc = plan.get(0)
    assert alloc is not None and alloc.num_copies == 2
    combined = 0.9 * (
        throughput.throughput("speech", "v100", 4) + throughput.throughput("speech", "k80", 4)
    )
    config = SimConfig(round_s=360.0, copy_efficiency=0.9)
    for rounds in (1.0, 2.5):
        trace = [
            TraceJob(
                0,
                0.0,
                "speech",
                4,
                iterations=combined * 360.0 * rounds,
                batch_size=64,
                forkable=True,
            )
        ]
        result = simulate(HadarEPolicy(), trace, snap.cluster, throughput, config)
        assert result.jobs[0].used_copies
        assert result.jobs[0].finish_s == pytest.approx(360.0 * rounds, rel=1e-6)


def test_jobs_that_cannot_be_preempted_are_never_forked() -> None:
    """Opaque commands run as placed: no copies for a non-preemptible job."""
    snap = snapshot(
        {"v100": 4, "p100": 4, "k80": 4},
        [job(1, num_gpus=2, preemptible=False, forkable=True)],
    )
    alloc = HadarEPolicy().plan(snap, 0.0).get(1)
    assert alloc is not None and alloc.num_copies == 1


def test_a_job_not_marked_forkable_is_never_forked() -> None:
    """Idle servers do not turn a job that did not ask for copies into several: it runs on
    exactly its GPUs, while a forkable job beside it takes the idle servers as copies."""
    snap = snapshot(
        {"v100": 4, "p100": 4, "k80": 4},
        [job(1, num_gpus=2), job(2, num_gpus=2, job_type="speech", forkable=True)],
    )
    plan = HadarEPolicy().plan(snap, 0.0)
    assert plan.violations(snap) == []
    plain, forked = plan.get(1), plan.get(2)
    assert plain is not None and plain.num_copies == 1 and plain.num_gpus == 2
    assert forked is not None and forked.num_copies >= 2
    lone = snapshot({"v100": 4, "p100": 4, "k80": 4}, [job(1, num_gpus=2)])
    alone = HadarEPolicy().plan(lone, 0.0).get(1)
    assert alone is not None and alone.num_copies == 1


def test_a_plan_that_forks_a_job_not_marked_forkable_is_invalid() -> None:
    """Plan validation (the simulator's and the daemon's) refuses copies of a job that did
    not ask for them, whichever policy made the plan."""
    from master.scheduling.plan import Allocation, GpuSlot, Plan

    snap = snapshot({"v100": 8}, [job(1, num_gpus=1)])
    copies = Allocation.copies_on([[GpuSlot("v100-000", 0)], [GpuSlot("v100-001", 0)]], 64)
    assert Plan({1: copies}).violations(snap) == ["job 1 runs as 2 copies but is not forkable"]


def test_the_simulator_forks_only_jobs_the_trace_marks_unless_all_are_forkable() -> None:
    """On a trace whose jobs are not marked forkable no job ever runs as copies; with
    fork_all (hctl simulate --forkable all) hadare forks them."""
    throughput = model()
    cluster = snapshot({"v100": 4, "p100": 4, "k80": 4}, []).cluster
    trace = [TraceJob(i, 0.0, "speech", 2, iterations=2e5, batch_size=64) for i in range(2)]
    plain = simulate(HadarEPolicy(), trace, cluster, throughput, SimConfig())
    assert not any(j.used_copies for j in plain.jobs)
    forked = simulate(HadarEPolicy(), trace, cluster, throughput, SimConfig(fork_all=True))
    assert any(j.used_copies for j in forked.jobs)


def test_the_paper_variant_forks_jobs_the_trace_does_not_mark_forkable() -> None:
    """hadare.variant=paper is the paper's setting, every job forked: the simulator treats
    every job as forkable for it, as with --forkable all, and the run is the same."""
    throughput = model()
    cluster = snapshot({"v100": 4, "p100": 4, "k80": 4}, []).cluster
    trace = [TraceJob(i, 0.0, "speech", 2, iterations=2e5, batch_size=64) for i in range(2)]
    paper = simulate(HadarEPolicy(variant="paper"), trace, cluster, throughput, SimConfig())
    assert any(j.used_copies for j in paper.jobs)
    forked = simulate(HadarEPolicy(), trace, cluster, throughput, SimConfig(fork_all=True))
    assert [j.finish_s for j in paper.jobs] == [j.finish_s for j in forked.jobs]


def test_a_server_goes_to_the_copies_that_gain_most_in_total_not_per_gpu() -> None:
    """A one-GPU copy that gains more per GPU but less than a four-GPU copy in total
    does not take the server: its other three GPUs would stay idle."""
    jobs = [
        job(1, job_type="speech", num_gpus=1, total_iterations=1e5, forkable=True),
        job(2, job_type="speech", num_gpus=4, total_iterations=2e5, forkable=True),
    ]
    snap = snapshot({"k80": 12}, jobs)
    plan = HadarEPolicy(completion_exponent=1.0).plan(snap, 0.0)
    assert plan.violations(snap) == []
    one, four = plan.get(1), plan.get(2)
    assert one is not None and four is not None
    assert one.num_copies == 1
    assert four.num_copies == 2
    # Only the three GPUs beside the one-GPU job, which nothing else fits, stay idle.
    assert {s.node for s in four.slots}.isdisjoint({s.node for s in one.slots})
    assert one.num_gpus + four.num_gpus == 9


def _pair_on_one_v100(pair_speed: float, *, shareable: bool = True) -> Snapshot:
    v100 = SPEEDS["vision"]["v100"]
    pairs = {("vision", "vision", "v100", 1): (v100 * pair_speed, v100 * pair_speed)}
    jobs = [
        job(1, total_iterations=v100 * 36_000, shareable=shareable),  # 10 h alone
        job(2, total_iterations=v100 * 36_000, shareable=True),
    ]
    return snapshot({"v100": 1}, jobs, throughput=model(pairs))


def test_a_waiting_job_shares_when_co_location_lowers_the_pairs_jct() -> None:
    """One v100 and two 10-hour jobs slowed 1.25x together (both done in 12.5 h, against
    10 h and 20 h one after the other): the job the Hadar pass leaves waiting shares the
    other's GPU (mutual links, same GPU)."""
    snap = _pair_on_one_v100(0.8)
    policy = HadarEPolicy()
    plan = policy.plan(snap, 0.0)
    assert plan.violations(snap) == []
    first, second = plan.get(1), plan.get(2)
    assert first is not None and second is not None
    assert first.shared_with == 2 and second.shared_with == 1
    assert first.slots == second.slots
    (decision,) = policy.last_sharing
    assert decision.paired < decision.sequential
    assert {decision.job, decision.partner} == {1, 2}
    sharer = plan.get(decision.job)
    assert sharer is not None and sharer.accumulation_steps == decision.accumulation_steps


@pytest.mark.parametrize(
    ("pair_speed", "shareable", "share"),
    [(0.5, True, True), (0.8, False, True), (0.8, True, False)],
    ids=["sequential-is-better", "not-shareable", "sharing-off"],
)
def test_a_waiting_job_does_not_share_otherwise(
    pair_speed: float, shareable: bool, share: bool
) -> None:
    """A 2x slowdown for both (20 h each, against 10 h and 20 h in turn), a job that is
    not shareable, or sharing turned off: one job runs alone and the other waits."""
    snap = _pair_on_one_v100(pair_speed, shareable=shareable)
    plan = HadarEPolicy(share=share).plan(snap, 0.0)
    assert len(plan.allocations) == 1
    (alloc,) = plan.allocations.values()
    assert alloc.shared_with is None
