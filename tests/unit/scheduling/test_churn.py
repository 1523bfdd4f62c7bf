"""The rule a move of a running job must pass: the time it saves on the horizon's work
exceeds its restart cost."""

from __future__ import annotations

from master.scheduling.churn import move_pays


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
