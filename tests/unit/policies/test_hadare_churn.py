"""hadare does not re-place running jobs for gains smaller than their restart cost, and
leaves no job waiting while GPUs it can use are idle."""

from __future__ import annotations

from dataclasses import replace

from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._speeds import allocation_rate
from master.scheduling.policies.hadare import HadarEPolicy
from master.scheduling.views import JobView, Snapshot
from tests.unit.policies.builders import job, snapshot


def _advance(snap: Snapshot, plan: Plan) -> list[JobView]:
    """The jobs one round later: each holds its planned allocation and has progressed at
    its speed there for the round (copies at 0.9 of their summed speed)."""
    jobs = []
    for view in snap.jobs:
        alloc = plan.get(view.id)
        rate = allocation_rate(snap, view, alloc) if alloc is not None else 0.0
        done = min(view.total_iterations - 1, view.iterations_done + rate * snap.round_seconds)
        jobs.append(replace(view, current=alloc, iterations_done=done))
    return jobs


def test_a_steady_state_without_arrivals_moves_no_running_job_over_many_rounds() -> None:
    """Seven long jobs of three types (two forkable) on three servers of different GPU types,
    60 s rounds, no arrivals, no job finishing: after the first plan, 40 rounds go by in
    which no running job is migrated, resized or re-forked."""
    jobs = [
        job(1, job_type="vision", num_gpus=2, total_iterations=5e6, arrival_time=0.0),
        job(2, job_type="speech", num_gpus=1, total_iterations=5e6, arrival_time=10.0),
        job(3, job_type="text", num_gpus=2, total_iterations=5e6, arrival_time=20.0),
        job(4, job_type="vision", num_gpus=1, total_iterations=2e6, arrival_time=30.0),
        job(5, job_type="speech", num_gpus=4, total_iterations=5e6, arrival_time=40.0),
        job(6, job_type="text", num_gpus=1, total_iterations=5e6, forkable=True, arrival_time=50),
        job(7, job_type="vision", num_gpus=1, total_iterations=5e6, forkable=True, arrival_time=60),
    ]
    policy = HadarEPolicy()
    counts = {"v100": 4, "p100": 4, "k80": 4}
    snap = snapshot(counts, jobs, round_seconds=60.0)
    plan = policy.plan(snap, 100.0)
    moves: list[tuple[int, int, str, str]] = []
    for number in range(1, 41):
        snap = snapshot(counts, _advance(snap, plan), round_seconds=60.0, round_number=number)
        plan = policy.plan(snap, 100.0 + 60.0 * number)
        assert plan.violations(snap) == []
        for view in snap.jobs:
            new = plan.get(view.id)
            if view.current is not None and new is not None and new != view.current:
                moves.append((number, view.id, str(view.current), str(new)))
    assert moves == []


def test_a_waiting_job_is_placed_on_idle_gpus_it_can_use() -> None:
    """A job that is not preemptible, whose utility does not exceed the price of the GPUs
    the pass would give it, still gets the k80 that would otherwise stay idle."""
    jobs = [
        job(1, job_type="vision", num_gpus=2, total_iterations=1000.0, arrival_time=867.0),
        job(2, job_type="text", num_gpus=2, total_iterations=1000.0, arrival_time=580.0),
        job(3, job_type="speech", num_gpus=1, arrival_time=73.0, preemptible=False),
        job(4, job_type="vision", num_gpus=1, arrival_time=115.0),
    ]
    snap = snapshot({"v100": 2, "k80": 4}, jobs, gpus_per_server=2, round_seconds=60.0)
    plan = HadarEPolicy(share=False).plan(snap, 2000.0)
    assert plan.violations(snap) == []
    assert set(plan) == {1, 2, 3, 4}
    alloc = plan.get(3)
    assert alloc is not None and {snap.cluster.gpu_type(s) for s in alloc.slots} == {"k80"}


def test_a_waiting_job_too_big_for_the_idle_gpus_says_so() -> None:
    """With 2 GPUs idle and a waiting 4-GPU job that the running ones keep out, the reason
    names what it needs and how many are idle."""
    running = Allocation.on((GpuSlot("v100-000", 0), GpuSlot("v100-000", 1)), 64)
    jobs = [
        job(1, num_gpus=2, current=running, preemptible=False),
        job(2, num_gpus=4, arrival_time=5.0),
    ]
    snap = snapshot({"v100": 4}, jobs, round_seconds=60.0)
    plan = HadarEPolicy().plan(snap, 10.0)
    assert plan.get(2) is None
    assert plan.reason(2) == "waiting: needs 4 GPUs of its allowed types, 2 are idle (hadare)"


def _moved(restart_s: float, remaining: float) -> bool:
    """Whether hadare moves a vision job running alone on a p100 to an idle v100 (twice as
    fast) in 60 s rounds."""
    on_p100 = Allocation.on((GpuSlot("p100-000", 0),), 64)
    running = job(
        1,
        current=on_p100,
        total_iterations=100_000.0,
        iterations_done=100_000.0 - remaining,
        restart_s=restart_s,
    )
    snap = snapshot({"v100": 4, "p100": 4}, [running], round_seconds=60.0)
    plan = HadarEPolicy().plan(snap, 0.0)
    alloc = plan.get(1)
    assert alloc is not None
    return alloc != on_p100


def test_a_move_is_made_only_when_its_gain_exceeds_the_restart_cost() -> None:
    """Twice as fast for a 60 s round saves 30 s of the round's work: a 20 s restart is
    worth it, a 40 s one is not; with only 100 iterations left (10 s saved) neither is."""
    assert _moved(restart_s=20.0, remaining=90_000.0)
    assert not _moved(restart_s=40.0, remaining=90_000.0)
    assert not _moved(restart_s=20.0, remaining=100.0)
    assert _moved(restart_s=5.0, remaining=100.0)
