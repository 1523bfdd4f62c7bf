"""GPU memory requests bind every policy: a job never gets GPUs smaller than it asks for."""

from __future__ import annotations

import pytest

from master.scheduling.memory import GIB, fitting_types, memory_by_type
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policy import available_policies, make_policy
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot

# The small GPUs are the fast ones, so a policy that ignored memory would pick them.
SMALL, BIG = "fast12", "slow32"
SPEED = {SMALL: 10.0, BIG: 1.0}


def cluster(*, big_usable: bool = True) -> ClusterView:
    small = tuple(GpuView(f"small-{n}", i, SMALL, 12 * GIB) for n in range(2) for i in range(4))
    big = tuple(GpuView("big-0", i, BIG, 32 * GIB) for i in range(4))
    return ClusterView(
        (
            NodeView("small-0", small[:4]),
            NodeView("small-1", small[4:]),
            NodeView("big-0", big, schedulable=big_usable),
        )
    )


def model() -> ThroughputModel:
    profile = {
        (job_type, gpu_type, n, consolidated): speed * n
        for job_type in ("vision", "text")
        for gpu_type, speed in SPEED.items()
        for n in (1, 2, 4, 8)
        for consolidated in (True, False)
    }
    return ThroughputModel(profile)


def jobs() -> tuple[JobView, ...]:
    # The job that fits anywhere came first, so queue order never holds it behind the other.
    big = JobView(
        1, "vision", 2, 10_000.0, batch_size=64, memory_bytes_per_gpu=16 * GIB, arrival_time=1.0
    )
    small = JobView(2, "text", 1, 10_000.0, batch_size=64, memory_bytes_per_gpu=4 * GIB)
    return big, small


def snapshot(view: ClusterView) -> Snapshot:
    return Snapshot(view, jobs(), round_number=1, round_seconds=360.0, throughput=model())


@pytest.mark.parametrize("name", available_policies())
def test_job_gets_only_gpus_with_the_memory_it_asks_for(name: str) -> None:
    """Under every policy, a job asking for more memory per GPU than the small (and faster)
    GPUs have is placed only on the big GPUs; a job whose request fits the small ones may
    use them."""
    snap = snapshot(cluster())
    plan = make_policy(name).plan(snap, 0.0)
    assert plan.violations(snap) == []
    alloc = plan.get(1)
    assert alloc is not None, plan.reason(1)
    assert {slot.node for slot in alloc.slots} == {"big-0"}
    assert plan.get(2) is not None, plan.reason(2)


@pytest.mark.parametrize("name", available_policies())
def test_job_waits_while_no_usable_gpu_has_its_memory(name: str) -> None:
    """Under every policy, while the only GPUs large enough are unusable (their node is
    drained), the job waits rather than taking small GPUs."""
    snap = snapshot(cluster(big_usable=False))
    plan = make_policy(name).plan(snap, 0.0)
    assert plan.violations(snap) == []
    assert plan.get(1) is None
    assert plan.get(2) is not None, plan.reason(2)


def test_snapshot_limits_each_job_to_the_types_with_enough_memory() -> None:
    """The snapshot narrows each job with a memory request to the GPU types whose smallest
    GPU holds it; a job without a request is not restricted."""
    snap = snapshot(cluster())
    big, small = snap.jobs
    assert big.memory_gpu_types == frozenset({BIG})
    assert not big.allows(SMALL)
    assert big.allows(BIG)
    assert small.memory_gpu_types == frozenset({SMALL, BIG})
    plain = Snapshot(
        cluster(),
        (JobView(3, "vision", 1, 100.0),),
        round_number=1,
        round_seconds=60.0,
        throughput=model(),
    )
    assert plain.jobs[0].memory_gpu_types is None


def test_a_type_counts_with_its_smallest_gpu_and_unknown_memory_is_not_judged() -> None:
    """A type with GPUs of different sizes holds a request only if its smallest GPU does;
    a GPU reporting no memory takes its type's known figure, or stays usable if unknown."""
    by_type = memory_by_type([("v100", 32 * GIB), ("v100", 0), ("mystery", 0), ("a", 8 * GIB)])
    assert by_type == {"v100": 16 * GIB, "mystery": 0, "a": 8 * GIB}
    assert fitting_types(20 * GIB, by_type) == frozenset({"mystery"})
    assert fitting_types(16 * GIB, by_type) == frozenset({"v100", "mystery"})


def test_plan_placing_a_job_on_a_gpu_too_small_is_invalid() -> None:
    """A plan that gives a job a GPU with less memory than it asks for is rejected."""
    snap = snapshot(cluster())
    plan = Plan({1: Allocation.on((GpuSlot("small-0", 0), GpuSlot("small-0", 1)), 64)})
    assert plan.violations(snap) == [
        "job 1 needs 16GiB per GPU, fast12 (small-0/0) has 12GiB",
        "job 1 needs 16GiB per GPU, fast12 (small-0/1) has 12GiB",
    ]


def test_pending_reason_says_when_memory_keeps_a_job_waiting() -> None:
    """A job that waits because no usable GPU is large enough is told so, naming the
    largest; one that waits with large GPUs in the cluster gets the policy's reason with a
    note on which GPUs fit it; a job without a memory request keeps the policy's reason."""
    drained = snapshot(cluster(big_usable=False))
    assert drained.pending_reason(1, "waiting: policy") == (
        "waiting: needs 16GiB of GPU memory; the largest usable GPUs have 12GiB"
    )
    busy = snapshot(cluster())
    assert busy.pending_reason(1, "waiting: queued behind job 7 (fifo)") == (
        "waiting: queued behind job 7 (fifo); only GPUs with at least 16GiB of memory fit it"
        " (slow32)"
    )
    assert busy.pending_reason(2, "waiting: policy") == "waiting: policy"
