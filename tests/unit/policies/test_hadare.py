"""hadare: copies on distinct idle servers, progress summed with the averaging loss."""

from __future__ import annotations

import pytest

from master.scheduling.policies.hadare import HadarEPolicy
from master.sim.engine import SimConfig, simulate
from master.sim.trace import TraceJob
from tests.unit.policies.builders import job, model, snapshot


def test_idle_servers_get_copies_each_on_its_own_server() -> None:
    """One job on a cluster of three servers forks into three copies, one per server."""
    snap = snapshot({"v100": 4, "p100": 4, "k80": 4}, [job(1, num_gpus=2)])
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
    snap = snapshot({"v100": 4, "k80": 4}, [job(1, num_gpus=4, job_type="vision")])
    alloc = HadarEPolicy(copy_efficiency=0.9).plan(snap, 0.0).get(1)
    assert alloc is not None
    assert alloc.num_copies == 1


def test_copies_fill_only_gpus_that_no_waiting_job_gets() -> None:
    """Two jobs on two servers: each gets a server before anyone is forked."""
    jobs = [job(1, num_gpus=4), job(2, num_gpus=4, job_type="speech")]
    snap = snapshot({"v100": 4, "k80": 4}, jobs)
    plan = HadarEPolicy().plan(snap, 0.0)
    assert {a.num_copies for a in plan.allocations.values()} == {1}
    assert set(plan) == {1, 2}


def test_combined_progress_is_the_sum_of_copies_times_efficiency() -> None:
    """In the simulator a forked job advances by e * (sum of its copies' speeds)."""
    throughput = model()
    speech = job(0, num_gpus=4, job_type="speech")
    snap = snapshot({"v100": 4, "k80": 4}, [speech], throughput=throughput)
    plan = HadarEPolicy(copy_efficiency=0.9).plan(snap, 0.0)
    alloc = plan.get(0)
    assert alloc is not None and alloc.num_copies == 2
    combined = 0.9 * (
        throughput.throughput("speech", "v100", 4) + throughput.throughput("speech", "k80", 4)
    )
    config = SimConfig(round_s=360.0, copy_efficiency=0.9)
    for rounds in (1.0, 2.5):
        trace = [TraceJob(0, 0.0, "speech", 4, iterations=combined * 360.0 * rounds, batch_size=64)]
        result = simulate(HadarEPolicy(), trace, snap.cluster, throughput, config)
        assert result.jobs[0].used_copies
        assert result.jobs[0].finish_s == pytest.approx(360.0 * rounds, rel=1e-6)


def test_jobs_that_cannot_be_preempted_are_never_forked() -> None:
    """Opaque commands run as placed: no copies for a non-preemptible job."""
    snap = snapshot({"v100": 4, "p100": 4, "k80": 4}, [job(1, num_gpus=2, preemptible=False)])
    alloc = HadarEPolicy().plan(snap, 0.0).get(1)
    assert alloc is not None and alloc.num_copies == 1


def test_a_server_goes_to_the_copies_that_gain_most_in_total_not_per_gpu() -> None:
    """A one-GPU copy that gains more per GPU but less than a four-GPU copy in total
    does not take the server: its other three GPUs would stay idle."""
    jobs = [
        job(1, job_type="speech", num_gpus=1, total_iterations=1e5),
        job(2, job_type="speech", num_gpus=4, total_iterations=2e5),
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
