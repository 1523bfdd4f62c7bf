"""The forecast of start times (master.scheduling.forecast): the live policy's rounds run
forward over the queue on a small cluster, checked against start times worked out by
hand, with the horizon, time limits and unknown amounts of work."""

from __future__ import annotations

import random
from typing import Any

import pytest

from master.scheduling.forecast import ForecastLimits, forecast
from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policy import make_policy
from master.scheduling.round import RoundRules, RoundState
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot

NOW = 1_000_000.0
# One server with one v100; job type "a" runs 10 iterations/s on it.
CLUSTER = ClusterView((NodeView("n1", (GpuView("n1", 0, "v100"),)),))
V0 = GpuSlot("n1", 0)
MODEL = ThroughputModel({("a", "v100", 1, True): 10.0})


def job(job_id: int, iterations: float, **fields: Any) -> JobView:
    values: dict[str, Any] = {
        "id": job_id,
        "job_type": "a",
        "num_gpus": 1,
        "total_iterations": iterations,
        "restart_s": 0.0,
        "arrival_time": NOW - 1000 + job_id,
    }
    values.update(fields)
    return JobView(**values)


def state(*jobs: JobView, cluster: ClusterView = CLUSTER) -> RoundState:
    return RoundState(Snapshot(cluster, tuple(jobs), 1, 60.0, MODEL), NOW)


def queue() -> RoundState:
    """Job 1 runs with 1000 iterations left (100 s); jobs 2 (500 iterations, 50 s) and 3
    wait behind it in that order."""
    running = job(1, 2000, iterations_done=1000, current=Allocation.on([V0], 1))
    return state(running, job(2, 500), job(3, 500))


def test_fifo_queue_starts_as_worked_out_by_hand() -> None:
    """Job 2 starts when job 1 exits at 100 s (the early round 1 s later), job 3 when job 2
    exits 50 s after that; the running job gets no estimate."""
    result = forecast(queue(), make_policy("fifo"))
    assert result.starts == pytest.approx({2: NOW + 101.0, 3: NOW + 152.0})
    assert result.complete


def test_without_early_rounds_starts_wait_for_the_round() -> None:
    """With a round only every 60 s, job 2 starts in the round at 120 s and job 3 in the
    one at 180 s (job 2 exits at 170 s)."""
    limits = ForecastLimits(early_rounds=False)
    result = forecast(queue(), make_policy("fifo"), limits=limits)
    assert result.starts == pytest.approx({2: NOW + 120.0, 3: NOW + 180.0})


def test_the_horizon_cuts_the_forecast_off() -> None:
    """A job that would start after the horizon gets no estimate."""
    result = forecast(queue(), make_policy("fifo"), limits=ForecastLimits(horizon_s=130.0))
    assert result.starts == pytest.approx({2: NOW + 101.0})
    assert not result.complete
    assert result.reached == NOW + 130.0


def test_max_rounds_cuts_the_forecast_off() -> None:
    """Three decided rounds (at 0 s, quiet; at 60 s, quiet; at 101 s) reach job 2's start
    but not job 3's."""
    result = forecast(queue(), make_policy("fifo"), limits=ForecastLimits(max_rounds=3))
    assert result.starts == pytest.approx({2: NOW + 101.0})
    assert result.rounds == 3


def test_a_job_placed_in_the_first_round_starts_now() -> None:
    """With the GPU free, the first job of the queue starts in the round that runs now."""
    result = forecast(state(job(2, 500), job(3, 500)), make_policy("fifo"))
    assert result.starts == pytest.approx({2: NOW, 3: NOW + 51.0})


def test_restart_cost_delays_the_exit_not_the_start() -> None:
    """Job 2's start costs it 30 s without progress: job 3 starts 30 s later."""
    running = job(1, 2000, iterations_done=1000, current=Allocation.on([V0], 1))
    result = forecast(state(running, job(2, 500, restart_s=30.0), job(3, 500)), make_policy("fifo"))
    assert result.starts == pytest.approx({2: NOW + 101.0, 3: NOW + 182.0})


def test_unknown_work_runs_until_its_time_limit() -> None:
    """A running command of unknown length ends at its time limit: 300 s in all, 100 s run."""
    running = job(
        1,
        1000,
        current=Allocation.on([V0], 1),
        preemptible=False,
        time_limit_s=300.0,
        run_seconds=100.0,
    )
    result = forecast(state(running, job(2, 500)), make_policy("fifo"), unknown_work={1})
    assert result.starts == pytest.approx({2: NOW + 201.0})


def test_unknown_work_without_a_time_limit_never_frees_its_gpus() -> None:
    """A command of unknown length and no time limit is taken to run past the horizon: the
    job behind it gets no estimate, and the quiet rounds cost a few decisions."""
    running = job(1, 1000, current=Allocation.on([V0], 1), preemptible=False)
    result = forecast(state(running, job(2, 500)), make_policy("fifo"), unknown_work={1})
    assert result.starts == {}
    assert result.rounds <= 14  # 7 days, quiet


def test_a_time_limit_ends_a_job_before_its_work() -> None:
    """Job 1 would need 100 s more but its time limit leaves it 40 s."""
    running = job(
        1,
        2000,
        iterations_done=1000,
        current=Allocation.on([V0], 1),
        time_limit_s=100.0,
        run_seconds=60.0,
    )
    result = forecast(state(running, job(2, 500)), make_policy("fifo"))
    assert result.starts == pytest.approx({2: NOW + 41.0})


def test_quiet_stretches_are_skipped_not_decided_round_by_round() -> None:
    """A running job that lasts a day behind which one job waits: rounds 1, 2, 4... rounds
    apart, not 1,440 of them, and the estimate is the job's exit."""
    running = job(1, 864_000, current=Allocation.on([V0], 1))
    result = forecast(state(running, job(2, 500)), make_policy("fifo"))
    assert result.starts == pytest.approx({2: NOW + 86_401.0})
    assert result.rounds <= 13


def test_two_gpus_run_two_queues_side_by_side() -> None:
    """On two GPUs, jobs 3 and 4 start as jobs 1 and 2 exit (at 100 s and 200 s)."""
    cluster = ClusterView((NodeView("n1", (GpuView("n1", 0, "v100"), GpuView("n1", 1, "v100"))),))
    v1 = GpuSlot("n1", 1)
    jobs = (
        job(1, 1000, current=Allocation.on([V0], 1)),
        job(2, 2000, current=Allocation.on([v1], 1)),
        job(3, 5000),
        job(4, 5000),
    )
    result = forecast(state(*jobs, cluster=cluster), make_policy("fifo"))
    assert result.starts == pytest.approx({3: NOW + 101.0, 4: NOW + 201.0})


def test_the_default_policy_forecasts_every_waiting_job() -> None:
    """The default policy (hadare) run forward places every waiting job in turn."""
    running = job(1, 2000, iterations_done=1000, current=Allocation.on([V0], 1))
    result = forecast(state(running, job(2, 500), job(3, 500)), make_policy("hadare"))
    assert set(result.starts) == {2, 3}
    assert all(NOW <= t <= NOW + 400 for t in result.starts.values())


def test_bad_limits_are_refused() -> None:
    """A horizon or round count that cannot bound the forecast is refused, by name."""
    with pytest.raises(ValueError, match="horizon_s"):
        ForecastLimits(horizon_s=0)
    with pytest.raises(ValueError, match="max_rounds"):
        ForecastLimits(max_rounds=0)


def test_the_caller_can_end_the_forecast_between_rounds() -> None:
    """A caller whose budget is spent after the first round keeps what that round found."""
    calls: list[int] = []

    def between_rounds() -> bool:
        calls.append(1)
        return False

    result = forecast(
        state(job(2, 500), job(3, 500)), make_policy("fifo"), between_rounds=between_rounds
    )
    assert result.starts == pytest.approx({2: NOW})
    assert result.rounds == 1 and calls == [1]
    assert not result.complete


def test_running_jobs_gain_service_as_rounds_pass() -> None:
    """A policy ordering by attained service sees the running job's service grow: under las
    the running job drops to a lower queue once it has had 3,600 GPU-seconds, and the
    waiting job takes its GPU. Quiet rounds come ever further apart, but the change is
    caught within as long again as the quiet stretch lasted."""
    running = job(1, 100_000, current=Allocation.on([V0], 1))
    result = forecast(state(running, job(2, 500)), make_policy("las"))
    assert NOW + 3600.0 <= result.starts[2] <= NOW + 2 * 3600.0


@pytest.mark.parametrize("policy", ["fifo", "las", "srtf", "hadare", "gavel"])
def test_the_forecast_starts_jobs_when_the_simulator_does(policy: str) -> None:
    """Twenty jobs queued at once on v100:4,k80:4: the forecast's start times are the
    simulator's (early rounds, no restart cost), since both run the same round function
    with the same progress model; the forecast only samples quiet rounds more sparsely."""
    from master.sim.data import THROUGHPUTS
    from master.sim.engine import SimConfig, simulate
    from master.sim.trace import TraceJob

    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    cluster = ClusterView.from_counts({"v100": 4, "k80": 4})
    rng = random.Random(3)
    types = ("ResNet-18 (batch size 64)", "LM (batch size 20)")
    trace = [
        TraceJob(
            i,
            0.0,
            rng.choice(types),
            rng.choice((1, 2, 4)),
            float(rng.randrange(2000, 20000)),
            time_limit_s=1e7,
        )
        for i in range(1, 21)
    ]
    config = SimConfig(round_s=60.0, early_rounds=True)
    simulated = simulate(make_policy(policy), trace, cluster, model, config)
    views = tuple(
        JobView(
            id=t.id,
            job_type=t.job_type,
            num_gpus=t.num_gpus,
            total_iterations=float(t.iterations or 0),
            restart_s=0.0,
            time_limit_s=1e7,
        )
        for t in trace
    )
    state = RoundState(Snapshot(cluster, views, 0, 60.0, model), 0.0)
    rules = RoundRules(config.min_migration_gain, pay_restart=config.pay_restart)
    result = forecast(state, make_policy(policy), rules)
    assert result.complete
    assert result.starts == pytest.approx({job.id: job.start_s for job in simulated.jobs})
