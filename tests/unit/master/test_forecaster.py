"""The daemon's forecaster (master.rounds.forecaster): when a forecast is due, that it runs
on its own thread from a round's input and keeps the newest result, and that its computing
budget and the interval between forecasts hold."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta

from structlog.testing import capture_logs

from master.process.metrics import MasterMetrics
from master.rounds.forecaster import Forecaster, prepare
from master.rounds.snapshot import RoundInput
from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policy import Policy, make_policy
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot
from master.settings import Settings

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
CLUSTER = ClusterView((NodeView("n1", (GpuView("n1", 0, "v100"),)),))
MODEL = ThroughputModel({("a", "v100", 1, True): 10.0})


def view(job_id: int, iterations: float, **fields: object) -> JobView:
    return JobView(
        id=job_id,
        job_type="a",
        num_gpus=1,
        total_iterations=iterations,
        restart_s=0.0,
        arrival_time=NOW.timestamp() - 100 + job_id,
        **fields,  # type: ignore[arg-type]
    )


def round_input() -> RoundInput:
    """Job 1 runs 100 s more; jobs 2 (50 s of work) and 3 wait behind it."""
    running = view(1, 2000, iterations_done=1000, current=Allocation.on([GpuSlot("n1", 0)], 1))
    jobs = (running, view(2, 500), view(3, 500))
    return RoundInput(Snapshot(CLUSTER, jobs, 1, 60.0, MODEL), {}, {}, {}, {})


def test_a_forecast_runs_off_the_callers_thread_and_is_kept() -> None:
    """The starts are those of the policy run forward, kept with the round's time; a
    running job has none."""
    forecaster = Forecaster(Settings(forecast_interval_s=60.0))
    assert forecaster.due()
    future = forecaster.submit(round_input(), lambda: make_policy("fifo"), NOW)
    assert future is not None
    future.result(timeout=30)
    latest = forecaster.latest
    assert latest is not None and latest.computed_at == NOW
    assert forecaster.expected_start(2) == NOW + timedelta(seconds=101)
    assert forecaster.expected_start(3) == NOW + timedelta(seconds=152)
    assert forecaster.expected_start(1) is None
    forecaster.stop()


def test_a_long_queues_forecast_runs_in_a_process_of_its_own_and_agrees() -> None:
    """Past the size that goes to the forecasting process, the starts are those the thread
    computes; the process is kept for the next forecast and ends with the forecaster."""
    here = Forecaster(Settings())
    elsewhere = Forecaster(Settings(), process_from_jobs=1)
    with capture_logs() as logs:
        for forecaster in (here, elsewhere):
            future = forecaster.submit(round_input(), lambda: make_policy("fifo"), NOW)
            assert future is not None
            future.result(timeout=120)
    assert [e["event"] for e in logs if e["log_level"] != "info"] == []
    assert here.latest is not None and elsewhere.latest is not None
    assert dict(elsewhere.latest.starts) == dict(here.latest.starts)
    assert elsewhere.latest.rounds == here.latest.rounds
    processes = multiprocessing.active_children()
    assert processes
    elsewhere.stop()
    here.stop()
    for process in processes:
        process.join(timeout=30)
    assert not any(p.is_alive() for p in processes)


def test_a_forecast_made_ready_elsewhere_agrees_and_keeps_the_gauges() -> None:
    """Work prepared where the round was planned (pickled there with a copy of the
    policy) gives the starts the thread computes from the round's input, and the gauges
    count its waiting jobs as the thread's forecast does."""
    here = Forecaster(Settings())
    metrics = MasterMetrics()
    elsewhere = Forecaster(Settings(), metrics, process_from_jobs=1)
    policy = make_policy("fifo")
    prepared = prepare(round_input(), policy, NOW, Settings())
    assert (prepared.policy, prepared.jobs, prepared.waiting) == ("fifo", 3, 2)
    with capture_logs() as logs:
        done = here.submit(round_input(), lambda: make_policy("fifo"), NOW)
        assert done is not None
        done.result(timeout=120)
        done = elsewhere.submit_prepared(prepared, NOW)
        assert done is not None
        done.result(timeout=120)
    assert [e["event"] for e in logs if e["log_level"] != "info"] == []
    assert here.latest is not None and elsewhere.latest is not None
    assert dict(elsewhere.latest.starts) == dict(here.latest.starts)
    assert metrics.registry.get_sample_value("hadar_forecast_jobs", {"estimate": "no"}) == 0.0
    elsewhere.stop()
    here.stop()


def test_metrics_say_what_a_forecast_cost_and_reached() -> None:
    """One forecast observed; its two waiting jobs both with an estimate."""
    metrics = MasterMetrics()
    forecaster = Forecaster(Settings(), metrics)
    future = forecaster.submit(round_input(), lambda: make_policy("fifo"), NOW)
    assert future is not None
    future.result(timeout=30)
    registry = metrics.registry
    assert registry.get_sample_value("hadar_forecast_duration_seconds_count") == 1.0
    assert registry.get_sample_value("hadar_forecast_jobs", {"estimate": "yes"}) == 2.0
    assert registry.get_sample_value("hadar_forecast_jobs", {"estimate": "no"}) == 0.0
    forecaster.stop()


def test_the_interval_counts_from_the_end_of_the_last_forecast() -> None:
    """Right after a forecast, the next is not due for forecast_interval_s."""
    forecaster = Forecaster(Settings(forecast_interval_s=3600.0))
    future = forecaster.submit(round_input(), lambda: make_policy("fifo"), NOW)
    assert future is not None
    future.result(timeout=30)
    assert not forecaster.due()
    forecaster.stop()


def test_a_long_forecast_waits_nine_times_its_duration_before_the_next() -> None:
    """Forecasts take at most a tenth of the time: after one that took 10 s the next is
    due 90 s after it ended, not after the 60 s interval."""
    now = [0.0]

    def slow_copy() -> Policy:
        now[0] += 10.0  # the forecast's own time
        return make_policy("fifo")

    forecaster = Forecaster(Settings(forecast_interval_s=60.0), clock=lambda: now[0])
    future = forecaster.submit(round_input(), slow_copy, NOW)
    assert future is not None
    future.result(timeout=30)
    now[0] = 10.0 + 89.0
    assert not forecaster.due()
    now[0] = 10.0 + 90.0
    assert forecaster.due()
    forecaster.stop()


def test_a_spent_budget_keeps_the_starts_found_so_far() -> None:
    """With no time to compute, the forecast ends after its first round: job 2, placed
    only later, gets no estimate."""
    forecaster = Forecaster(Settings(forecast_budget_s=1e-9))
    future = forecaster.submit(round_input(), lambda: make_policy("fifo"), NOW)
    assert future is not None
    future.result(timeout=30)
    assert forecaster.latest is not None and forecaster.latest.rounds == 1
    assert forecaster.expected_start(2) is None
    forecaster.stop()


def test_a_policy_that_cannot_be_copied_leaves_the_last_forecast_served() -> None:
    """A failure is logged and the previous forecast stays; the next round tries again."""
    now = [0.0]
    forecaster = Forecaster(Settings(forecast_interval_s=1e-9), clock=lambda: now[0])
    first = forecaster.submit(round_input(), lambda: make_policy("fifo"), NOW)
    assert first is not None
    first.result(timeout=30)
    kept = forecaster.latest

    def broken() -> object:
        raise RuntimeError("cannot copy")

    second = forecaster.submit(round_input(), broken, NOW)  # type: ignore[arg-type]
    assert second is not None
    second.result(timeout=30)
    assert forecaster.latest is kept
    now[0] = 1.0
    assert forecaster.due()
    forecaster.stop()


def test_turned_off_nothing_is_due() -> None:
    """forecast_interval_s = 0 turns forecasts off."""
    assert not Forecaster(Settings(forecast_interval_s=0)).due()
