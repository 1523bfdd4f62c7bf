"""The ``slurm`` baseline: priority order, EASY backfill by time limits, typed GPUs,
packing, and running jobs never moved or stopped."""

from __future__ import annotations

import math

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policies.slurm import SlurmPolicy
from master.scheduling.views import JobView
from tests.unit.policies.builders import job, snapshot

NOW = 100_000.0


def running(job_id: int, node: str, indices: range, **fields: object) -> JobView:
    """A job holding GPUs ``indices`` of ``node`` since ``run_seconds`` ago."""
    slots = [GpuSlot(node, i) for i in indices]
    return job(
        job_id,
        num_gpus=len(slots),
        current=Allocation.on(slots, 64),
        arrival_time=NOW - 10_000,
        **fields,
    )


def waiting(job_id: int, num_gpus: int, limit_s: float, **fields: object) -> JobView:
    values: dict[str, object] = {"arrival_time": NOW - 1000 + job_id}
    values.update(fields)
    return job(job_id, num_gpus=num_gpus, time_limit_s=limit_s, **values)


def test_small_job_that_ends_before_the_head_reservation_starts() -> None:
    """The head (4 GPUs) must wait until t+7200 for a server's GPUs; a 1-GPU job whose
    limit ends it by then starts on the free GPU now."""
    snap = snapshot(
        {"v100": 4},
        [
            running(1, "v100-000", range(2), time_limit_s=3600.0),
            running(2, "v100-000", range(2, 3), time_limit_s=7200.0),
            waiting(3, 4, 3600.0),
            waiting(4, 1, 3000.0),
        ],
    )
    policy = SlurmPolicy()
    plan = policy.plan(snap, NOW)
    assert policy.last_reservation is not None
    assert policy.last_reservation.job_id == 3
    assert policy.last_reservation.start == NOW + 7200.0
    assert 3 not in plan
    assert plan.allocations[4].slots == (GpuSlot("v100-000", 3),)
    assert plan.reason(3) == (
        "waiting: first in line (slurm), 4 v100 GPUs reserved for it, to start within 02:00:00"
    )


def test_job_that_would_delay_the_head_reservation_waits() -> None:
    """A 1-GPU job whose limit runs past the head's shadow time waits even though a GPU
    is free; the next, shorter job in line takes that GPU instead."""
    snap = snapshot(
        {"v100": 4},
        [
            running(1, "v100-000", range(2), time_limit_s=3600.0),
            running(2, "v100-000", range(2, 3), time_limit_s=7200.0),
            waiting(3, 4, 3600.0),
            waiting(4, 1, 7300.0),
            waiting(5, 1, 600.0),
        ],
    )
    plan = SlurmPolicy().plan(snap, NOW)
    assert 4 not in plan
    assert "queued behind job 3" in (plan.reason(4) or "")
    assert plan.allocations[5].slots == (GpuSlot("v100-000", 3),)


def test_long_job_backfills_into_gpus_the_head_leaves_over() -> None:
    """The head needs 2 of the 4 GPUs freed at its shadow time: a long 1-GPU job may take
    one of the other two now, and a second long one then still fits no more."""
    snap = snapshot(
        {"v100": 4},
        [
            running(1, "v100-000", range(3), time_limit_s=3600.0),
            waiting(2, 2, 600.0),
            waiting(3, 1, 90_000.0),
        ],
    )
    # One GPU free now, 3 more at t+3600: the head (2) is reserved then, 2 left over.
    policy = SlurmPolicy()
    plan = policy.plan(snap, NOW)
    assert 2 not in plan
    assert policy.last_reservation is not None
    assert policy.last_reservation.spare == 2
    assert 3 in plan


def test_running_job_without_limit_makes_the_reservation_undated() -> None:
    """Without a time limit a running job's GPUs never count as freed: the head's
    reservation cannot be dated, and nothing with a limit backfills on its type."""
    snap = snapshot(
        {"v100": 4},
        [
            running(1, "v100-000", range(3)),
            waiting(2, 2, 600.0),
            waiting(3, 1, 60.0),
        ],
    )
    policy = SlurmPolicy()
    plan = policy.plan(snap, NOW)
    assert policy.last_reservation is not None
    assert math.isinf(policy.last_reservation.start)
    assert 2 not in plan and 3 not in plan
    assert "no start time yet" in (plan.reason(2) or "")


def test_backfill_on_another_type_never_delays_the_head() -> None:
    """The head may only use v100s; a job allowed on k80 starts there whatever its limit."""
    snap = snapshot(
        {"v100": 4, "k80": 4},
        [
            running(1, "v100-000", range(4), time_limit_s=3600.0),
            waiting(2, 2, 600.0, allowed_gpu_types=frozenset({"v100"})),
            waiting(3, 2, 90_000.0),
        ],
    )
    plan = SlurmPolicy().plan(snap, NOW)
    assert 2 not in plan
    assert {slot.node for slot in plan.allocations[3].slots} == {"k80-000"}


def test_a_job_that_names_a_type_gets_it() -> None:
    """Typed GRES: a job allowed only p100 runs on p100 though v100s are free, and a job
    allowed only on a type with no room waits."""
    snap = snapshot(
        {"v100": 4, "p100": 4},
        [
            waiting(1, 2, 600.0, allowed_gpu_types=frozenset({"p100"})),
            waiting(2, 1, 600.0, allowed_gpu_types=frozenset({"k80"})),
        ],
    )
    plan = SlurmPolicy().plan(snap, NOW)
    assert {slot.node for slot in plan.allocations[1].slots} == {"p100-000"}
    assert 2 not in plan
    assert "no usable GPU of an allowed type" in (plan.reason(2) or "")


def test_running_jobs_are_never_preempted_or_moved() -> None:
    """A running job keeps exactly its GPUs, spread or not, even when the first job in
    line has a far higher priority and could run faster elsewhere."""
    spread = running(1, "v100-000", range(1), time_limit_s=36_000.0)
    other = job(
        2,
        num_gpus=2,
        current=Allocation.on([GpuSlot("v100-001", 0), GpuSlot("v100-000", 1)], 64),
        time_limit_s=36_000.0,
    )
    snap = snapshot(
        {"v100": 8},
        [spread, other, waiting(3, 8, 600.0, priority=100.0)],
    )
    plan = SlurmPolicy().plan(snap, NOW)
    assert plan.allocations[1] == spread.current
    assert plan.allocations[2] == other.current
    assert 3 not in plan


def test_jobs_are_packed_on_as_few_servers_as_possible() -> None:
    """A 4-GPU job allowed on any type takes the whole free k80 server rather than v100s
    spread over two servers; a 2-GPU job takes the two free GPUs of one v100 server."""
    snap = snapshot(
        {"v100": 8, "k80": 4},
        [
            running(1, "v100-000", range(2), time_limit_s=3600.0),
            running(2, "v100-001", range(2), time_limit_s=3600.0),
            waiting(3, 4, 600.0),
            waiting(4, 2, 600.0),
        ],
    )
    plan = SlurmPolicy().plan(snap, NOW)
    assert {slot.node for slot in plan.allocations[3].slots} == {"k80-000"}
    assert len({slot.node for slot in plan.allocations[4].slots}) == 1


def test_priority_with_fair_share_goes_before_submit_time() -> None:
    """Priority as the round shows it (times the fair-share factor) orders the queue: a
    later job of a user below their share starts before an earlier one of a heavy user."""
    snap = snapshot(
        {"v100": 4},
        [
            running(1, "v100-000", range(3), time_limit_s=3600.0),
            waiting(2, 1, 600.0, priority=0.25, arrival_time=NOW - 5000),
            waiting(3, 1, 600.0, priority=1.0, arrival_time=NOW - 100),
        ],
    )
    plan = SlurmPolicy().plan(snap, NOW)
    assert 3 in plan and 2 not in plan


def test_equal_priorities_start_in_submit_order() -> None:
    """With fair share off every priority is equal: the earliest submitted job goes first."""
    snap = snapshot(
        {"v100": 4},
        [
            running(1, "v100-000", range(3), time_limit_s=3600.0),
            waiting(3, 1, 600.0, arrival_time=NOW - 50),
            waiting(2, 1, 600.0, arrival_time=NOW - 60),
        ],
    )
    plan = SlurmPolicy().plan(snap, NOW)
    assert 2 in plan and 3 not in plan


def test_a_backfill_that_would_spread_waits_rather_than_take_the_reserved_server() -> None:
    """Behind a head reserved on k80, a long 2-GPU job could only start spread over two
    v100 servers while the k80 server it may not take holds it whole: it waits, so that
    packing it there cannot delay the head."""
    snap = snapshot(
        {"v100": 8, "k80": 4},
        [
            running(1, "v100-000", range(3), time_limit_s=3600.0),
            running(2, "v100-001", range(3), time_limit_s=3600.0),
            running(3, "k80-000", range(2), time_limit_s=1800.0),
            waiting(4, 4, 600.0, allowed_gpu_types=frozenset({"k80"})),
            waiting(5, 2, 90_000.0),
        ],
    )
    policy = SlurmPolicy()
    plan = policy.plan(snap, NOW)
    assert policy.last_reservation is not None
    assert policy.last_reservation.gpu_type == "k80"
    assert 5 not in plan


def test_a_backfill_that_would_spread_wider_than_the_reserved_type_needs_waits() -> None:
    """Behind a head reserved on k80, a long 3-GPU job could start only on three v100
    servers (one free GPU each) while the k80 GPUs it may not take hold it on two: it
    waits, as the round would pack it onto those two and delay the head."""
    snap = snapshot(
        {"v100": 12, "k80": 8},
        [
            running(1, "v100-000", range(3), time_limit_s=3600.0),
            running(2, "v100-001", range(3), time_limit_s=3600.0),
            running(3, "v100-002", range(3), time_limit_s=3600.0),
            running(4, "k80-000", range(2), time_limit_s=1800.0),
            running(5, "k80-001", range(2), time_limit_s=1800.0),
            waiting(6, 6, 600.0, allowed_gpu_types=frozenset({"k80"})),
            waiting(7, 3, 90_000.0),
        ],
    )
    policy = SlurmPolicy()
    plan = policy.plan(snap, NOW)
    assert policy.last_reservation is not None
    assert policy.last_reservation.gpu_type == "k80"
    assert 7 not in plan
    assert "queued behind job 6" in (plan.reason(7) or "")


def test_between_types_that_pack_a_job_alike_the_one_with_more_free_gpus_gets_it() -> None:
    """Blind to speed, the choice spreads work over the types: a 1-GPU job goes to the
    type with more free GPUs (k80 here, two free against one), not to the fastest."""
    snap = snapshot(
        {"v100": 4, "k80": 4},
        [
            running(1, "v100-000", range(3), time_limit_s=3600.0),
            running(2, "k80-000", range(2), time_limit_s=3600.0),
            waiting(3, 1, 600.0),
        ],
    )
    plan = SlurmPolicy().plan(snap, NOW)
    assert {slot.node for slot in plan.allocations[3].slots} == {"k80-000"}
