"""Expected start times, computed after a round off the round thread and served from memory.

After a round, once ``forecast_interval_s`` has passed since the last forecast ended (0:
never), the round hands its own input (the store as it read it: jobs, placements, cluster,
throughput model, lost leases) to :class:`Forecaster`, which on a thread of its own copies
the policy as the round left it (between rounds: a policy's copy can take a tenth of a
second, which the round thread does not pay) and runs
:func:`master.scheduling.forecast.forecast`. Its first simulated round decides again from
the round's input, as the round did (the copy has already learned of the completions the
round told it of), and its later rounds are what the policy would decide next. The
newest result is kept with the time it was computed; ListJobs and GetJob read it without
waiting for anything. A forecast in progress is never doubled: a round that finds
one running hands over nothing.

The forecast's Python work shares the interpreter with the RPC threads, so it gives the
interpreter up between simulated rounds, and its length is bounded three ways: the horizon
(``forecast_horizon_s``), the rounds it decides (``forecast_max_rounds``) and the time it
may compute (``forecast_budget_s``, after which it keeps the starts found so far). Counting
the interval from the end of the last forecast keeps the interpreter free of it for at
least ``forecast_interval_s`` between two, and for at least nine times as long as the last
one took: however long the queue, forecasts take at most a tenth of the master's time (at
200 workers and 100 submissions a second the queue grew to thousands of jobs, forecasts
ran out their 30 s budget once a minute, and every RPC waited behind them).

A forecast of a long queue (``PROCESS_FROM_JOBS`` jobs or more) runs in a process of its
own, started once and kept: seconds of planning in the master's interpreter would make
every RPC wait its turn for it at each step (each SQL statement gives the interpreter up),
where another process takes the machine's other core. Shorter forecasts, which take
milliseconds, stay on the thread. A round planned in the planning process makes a long
queue's forecast ready there (:func:`prepare`), and the master hands it on without
unpickling it (:meth:`Forecaster.submit_prepared`).
"""

from __future__ import annotations

import copy
import multiprocessing
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.reduction import ForkingPickler
from types import MappingProxyType
from typing import cast

import structlog

import master.rounds.crossing  # noqa: F401  (views with read-only mappings cross to the child)
from master.process.cpus import helper_cpus, use_cpus
from master.process.metrics import MasterMetrics
from master.rounds.snapshot import RoundInput
from master.scheduling.fairshare import FairShareConfig
from master.scheduling.forecast import Forecast, ForecastLimits, forecast
from master.scheduling.policy import Policy
from master.scheduling.round import LostLease, RoundRules, RoundState
from master.scheduling.views import Snapshot
from master.settings import Settings

log = structlog.get_logger(__name__)

# The most of the master's time forecasts may take, counted from their durations.
MAX_SHARE = 0.1
# Forecasts of this many jobs (running and waiting) or more run in a process of their own.
PROCESS_FROM_JOBS = 1000
# How often a forecast waited for in another process checks whether the master stops.
_POLL_S = 0.2


@dataclass(frozen=True)
class _Work:
    """What a forecast needs, sent to the forecasting process."""

    snapshot: Snapshot
    now: float
    lost: Mapping[int, LostLease]
    usage: Mapping[str, float]
    fair_share: FairShareConfig | None
    policy: Policy
    rules: RoundRules
    limits: ForecastLimits
    unknown: AbstractSet[int]
    budget_s: float


def _limits(settings: Settings) -> ForecastLimits:
    return ForecastLimits(
        horizon_s=settings.forecast_horizon_s,
        max_rounds=settings.forecast_max_rounds,
        early_rounds=settings.early_rounds,
        early_round_delay_s=settings.early_round_delay_s,
    )


def _work(inp: RoundInput, policy: Policy, now: datetime, settings: Settings) -> _Work:
    """The forecast from a round's input with `policy` (a copy the forecast owns)."""
    # Commands submitted without iterations report no progress: only their time limit
    # says when they end.
    unknown = frozenset(job_id for job_id, job in inp.jobs.items() if not job.spec.iterations)
    return _Work(
        inp.snapshot,
        now.timestamp(),
        inp.lost,
        inp.usage,
        settings.fair_share_config(),
        policy,
        RoundRules(settings.min_migration_gain),
        _limits(settings),
        unknown,
        settings.forecast_budget_s,
    )


@dataclass(frozen=True)
class PreparedForecast:
    """A forecast's work made ready and pickled where the round was planned (the planning
    process), with a copy of the policy it holds: the master hands it to the forecasting
    process as it is. Otherwise the whole queue and the policy would cross to the master
    and on to the forecasting process, unpickled and pickled again on the interpreter that
    every call waits for (at 6,000 jobs, 3.8 MB and about a tenth of a second each way).
    ``jobs``: the jobs in it, ``waiting`` those holding nothing (for the log and gauges)."""

    work: bytes
    policy: str
    jobs: int
    waiting: int


def _waiting(inp: RoundInput) -> int:
    """The jobs of a forecast's input that hold nothing."""
    return sum(1 for job in inp.snapshot.jobs if job.current is None)


def prepare(inp: RoundInput, policy: Policy, now: datetime, settings: Settings) -> PreparedForecast:
    """The forecast from a round's input with a copy of `policy`, ready to hand over."""
    work = _work(inp, copy.deepcopy(policy), now, settings)
    return PreparedForecast(
        bytes(ForkingPickler.dumps(work)), policy.name, len(inp.snapshot.jobs), _waiting(inp)
    )


def _run(work: _Work, between_rounds: Callable[[], bool]) -> Forecast:
    """The forecast `work` asks for, wherever it runs."""
    state = RoundState(
        work.snapshot, work.now, work.lost, fair_share=work.fair_share, usage=work.usage
    )
    return forecast(
        state,
        work.policy,
        work.rules,
        work.limits,
        unknown_work=work.unknown,
        between_rounds=between_rounds,
    )


def _forecast_elsewhere(work: _Work | bytes) -> tuple[Forecast, bool]:
    """The forecast, in the forecasting process; and whether its budget ran out. `work`
    may come pickled (:class:`PreparedForecast`)."""
    if isinstance(work, bytes):
        work = cast(_Work, pickle.loads(work))
    deadline = time.monotonic() + work.budget_s
    spent = False

    def between_rounds() -> bool:
        nonlocal spent
        spent = time.monotonic() >= deadline
        return not spent

    result = _run(work, between_rounds)
    # The starts as a plain dict: a read-only view of one does not cross processes.
    return Forecast(
        result.now, dict(result.starts), result.rounds, result.reached, result.complete
    ), spent


@dataclass(frozen=True)
class StartTimes:
    """A finished forecast: per job waiting when it was computed and expected to start
    within the horizon, its expected start (Unix time). ``computed_at``: the start of the
    round it was computed from; ``duration_s``: how long computing it took."""

    computed_at: datetime
    starts: Mapping[int, float] = field(default_factory=dict)
    rounds: int = 0
    duration_s: float = 0.0

    def start_of(self, job_id: int) -> datetime | None:
        at = self.starts.get(job_id)
        return datetime.fromtimestamp(at, UTC) if at is not None else None


class _StoppedError(Exception):
    """The master is stopping: the forecast in progress is abandoned."""


class Forecaster:
    """Computes forecasts on its own thread and keeps the newest; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        metrics: MasterMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        process_from_jobs: int = PROCESS_FROM_JOBS,
    ) -> None:
        self._metrics = metrics
        self._clock = clock
        self._process_from_jobs = process_from_jobs
        # The forecasting process, started by the first forecast that needs it.
        self._pool: multiprocessing.pool.Pool | None = None
        self._settings = settings
        self._interval_s = settings.forecast_interval_s
        self._budget_s = settings.forecast_budget_s
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._busy = False
        # When the last forecast ended (monotonic clock), and how long it took.
        self._last_at = -float("inf")
        self._last_s = 0.0
        self._stopping = threading.Event()
        self.latest: StartTimes | None = None

    @property
    def enabled(self) -> bool:
        return self._interval_s > 0

    def due(self) -> bool:
        """Whether the round about to run should hand its input over: on, none in
        progress, and the last one ended at least ``forecast_interval_s`` ago, and at least
        long enough ago that forecasts take no more than ``MAX_SHARE`` of the time (so that
        forecasts that take long still leave the interpreter to other work between them)."""
        if not self.enabled or self._stopping.is_set():
            return False
        with self._lock:
            rest = max(self._interval_s, self._last_s * (1 - MAX_SHARE) / MAX_SHARE)
            return not self._busy and self._clock() - self._last_at >= rest

    def submit(
        self, inp: RoundInput, policy: Callable[[], Policy], now: datetime
    ) -> Future[None] | None:
        """Forecast from a round's input (``now``: the round's start) with the policy
        ``policy()`` returns: a copy of the live one, which the forecast then owns. None when
        one is in progress."""
        executor = self._take()
        return executor.submit(self._compute, inp, policy, now) if executor else None

    @property
    def process_from_jobs(self) -> int:
        """Forecasts of this many jobs or more run in the forecasting process."""
        return self._process_from_jobs

    def submit_prepared(self, prepared: PreparedForecast, now: datetime) -> Future[None] | None:
        """Forecast from work made ready elsewhere (:func:`prepare`), in the forecasting
        process. None when one is in progress."""
        executor = self._take()
        return executor.submit(self._compute_prepared, prepared, now) if executor else None

    def _take(self) -> ThreadPoolExecutor | None:
        """The forecast thread, now busy with the caller's forecast; None when one is in
        progress or the forecaster stops."""
        with self._lock:
            if self._busy or self._stopping.is_set():
                return None
            self._busy = True
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="hadar-forecast"
                )
            return self._executor

    def expected_start(self, job_id: int) -> datetime | None:
        latest = self.latest
        return latest.start_of(job_id) if latest is not None else None

    def stop(self) -> None:
        """Abandon a forecast in progress (at its next simulated round) and stop the
        thread."""
        self._stopping.set()
        with self._lock:
            executor = self._executor
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def _elsewhere(self, work: _Work | bytes, name: str) -> tuple[Forecast, bool] | None:
        """The forecast computed in the forecasting process; None when that failed (the
        caller computes it here instead)."""
        with self._lock:
            if self._stopping.is_set():
                raise _StoppedError
            if self._pool is None:
                # Spawned, not forked: the master's threads (gRPC's among them) must not be
                # copied into a child mid-flight.
                self._pool = multiprocessing.get_context("spawn").Pool(
                    processes=1, initializer=use_cpus, initargs=(helper_cpus(),)
                )
            pool = self._pool
        pending = pool.apply_async(_forecast_elsewhere, (work,))
        while not pending.ready():
            if self._stopping.is_set():
                raise _StoppedError
            pending.wait(_POLL_S)
        try:
            return pending.get()
        except Exception:
            log.warning(
                "forecast in the forecasting process failed; computing it here",
                policy=name,
                exc_info=True,
            )
            return None

    def _compute(self, inp: RoundInput, copy_policy: Callable[[], Policy], now: datetime) -> None:
        label = ["?"]

        def produce(between_rounds: Callable[[], bool]) -> tuple[Forecast, bool | None]:
            policy = copy_policy()
            label[0] = policy.name
            work = _work(inp, policy, now, self._settings)
            found = (
                self._elsewhere(work, policy.name)
                if len(inp.snapshot.jobs) >= self._process_from_jobs
                else None
            )
            return found if found is not None else (_run(work, between_rounds), None)

        self._forecast(now, produce, label, len(inp.snapshot.jobs), _waiting(inp))

    def _compute_prepared(self, prepared: PreparedForecast, now: datetime) -> None:
        def produce(between_rounds: Callable[[], bool]) -> tuple[Forecast, bool | None]:
            found = self._elsewhere(prepared.work, prepared.policy)
            if found is not None:
                return found
            # The forecasting process failed: here, as a forecast of a short queue runs.
            work = cast(_Work, pickle.loads(prepared.work))
            return _run(work, between_rounds), None

        self._forecast(now, produce, [prepared.policy], prepared.jobs, prepared.waiting)

    def _forecast(
        self,
        now: datetime,
        produce: Callable[[Callable[[], bool]], tuple[Forecast, bool | None]],
        label: list[str],
        jobs: int,
        waiting: int,
    ) -> None:
        """Run `produce` (handed the check between simulated rounds of a forecast on this
        thread; it returns the forecast and, when computed elsewhere, whether its budget
        ran out) and keep its result. `label[0]` names the policy in the log."""
        started = self._clock()
        deadline = started + self._budget_s
        spent = False

        def between_rounds() -> bool:
            nonlocal spent
            if self._stopping.is_set():
                raise _StoppedError
            # Gives the interpreter to the RPC threads between simulated rounds.
            time.sleep(0)
            spent = self._clock() >= deadline
            return not spent

        try:
            result, spent_elsewhere = produce(between_rounds)
            if spent_elsewhere is not None:
                spent = spent_elsewhere
        except _StoppedError:
            return
        except Exception:
            # The previous forecast stays served; the next round tries again.
            log.exception("forecast of start times failed", policy=label[0])
            return
        finally:
            ended = self._clock()
            with self._lock:
                self._busy = False
                self._last_at = ended
                self._last_s = ended - started
        duration = ended - started
        self.latest = StartTimes(
            now, MappingProxyType(dict(result.starts)), result.rounds, duration
        )
        if self._metrics is not None:
            self._metrics.forecast_duration.observe(duration)
            self._metrics.forecast_jobs.labels(estimate="yes").set(len(result.starts))
            self._metrics.forecast_jobs.labels(estimate="no").set(waiting - len(result.starts))
        log.info(
            "start times forecast",
            jobs=jobs,
            estimates=len(result.starts),
            rounds=result.rounds,
            complete=result.complete,
            reached_s=round(result.reached - result.now),
            budget_spent=spent,
            duration_s=round(duration, 3),
        )
