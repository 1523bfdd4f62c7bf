"""The rule a move of a running job must pass: the time it saves on the horizon's work
exceeds its restart cost; the plan diff applies it to moves no other job forces."""

from __future__ import annotations

import pytest

from master.scheduling.churn import move_pays
from master.scheduling.diff import ActionKind, Hysteresis, diff
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot


def test_a_move_pays_when_the_time_saved_exceeds_the_restart() -> None:
    """2x faster over 60 s of work saves 30 s: worth a 20 s restart, not a 40 s one."""
    assert move_pays(5.0, 10.0, remaining=1e6, restart_s=20.0, horizon_s=60.0)
    assert not move_pays(5.0, 10.0, remaining=1e6, restart_s=40.0, horizon_s=60.0)


def test_a_job_about_to_finish_gains_only_on_its_remaining_work() -> None:
    """100 iterations left at 5/s vs 10/s saves 10 s, however long the horizon."""
    assert not move_pays(5.0, 10.0, remaining=100.0, restart_s=12.0, horizon_s=3600.0)
    assert move_pays(5.0, 10.0, remaining=100.0, restart_s=8.0, horizon_s=3600.0)


def test_slower_or_stalled_placements() -> None:
    """A slower placement never pays; a job that makes no progress where it is always
    gains from one where it does; a placement with no speed never pays."""
    assert not move_pays(10.0, 5.0, remaining=1e6, restart_s=0.0, horizon_s=60.0)
    assert not move_pays(10.0, 10.0, remaining=1e6, restart_s=0.0, horizon_s=60.0)
    assert move_pays(0.0, 1.0, remaining=1e6, restart_s=100.0, horizon_s=60.0)
    assert not move_pays(1.0, 0.0, remaining=1e6, restart_s=0.0, horizon_s=60.0)


def _snapshot(restart_s: float) -> Snapshot:
    model = ThroughputModel(
        {
            ("a", "v100", 1, True): 10.0,
            ("a", "v100", 2, True): 18.0,
            ("a", "k80", 1, True): 2.0,
        }
    )
    jobs = (JobView(1, "a", 1, 1e6, restart_s=restart_s),)
    return Snapshot(ClusterView.from_counts({"v100": 4, "k80": 4}), jobs, 1, 60.0, model)


V = [GpuSlot("v100-000", i) for i in range(4)]
K = [GpuSlot("k80-000", i) for i in range(4)]


@pytest.mark.parametrize(
    ("restart_s", "expected"), [(20.0, ActionKind.RESIZE), (30.0, ActionKind.EXTEND)]
)
def test_the_plan_diff_resizes_a_job_only_when_the_resize_pays_its_restart(
    restart_s: float, expected: ActionKind
) -> None:
    """1 to 2 V100s (10 to 18 it/s) in a 60 s round saves 26.7 s of the round's work:
    made for a 20 s restart, not for a 30 s one (the job keeps its GPU and is extended)."""
    current = {1: Allocation.on([V[0]], 8)}
    plan = Plan({1: Allocation.on(V[:2], 8)})
    actions = diff(current, plan, snapshot=_snapshot(restart_s), hysteresis=Hysteresis())
    assert [(a.job_id, a.kind) for a in actions] == [(1, expected)]
    assert (
        diff(current, plan, snapshot=_snapshot(30.0), hysteresis=Hysteresis(pay_restart=False))[
            0
        ].kind
        is ActionKind.RESIZE
    )


def test_the_plan_diff_migrates_only_when_the_move_pays_and_always_when_forced() -> None:
    """K80 to V100 (5x) saves 48 s of a 60 s round: made for a 40 s restart, not for a 50 s
    one; but when another job is given the K80, the job moves whatever its restart."""
    current = {1: Allocation.on([K[0]], 8)}
    plan = Plan({1: Allocation.on([V[0]], 8)})
    kinds = [
        diff(current, plan, snapshot=_snapshot(r), hysteresis=Hysteresis())[0].kind
        for r in (40.0, 50.0)
    ]
    assert kinds == [ActionKind.MIGRATE, ActionKind.EXTEND]
    taken = Plan({1: Allocation.on([V[0]], 8), 2: Allocation.on([K[0]], 8)})
    forced = diff(current, taken, snapshot=_snapshot(50.0), hysteresis=Hysteresis())
    assert {a.job_id: a.kind for a in forced} == {1: ActionKind.MIGRATE, 2: ActionKind.START}
