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
milliseconds, stay on the thread.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

import structlog

import master.rounds.crossing  # noqa: F401  (views with read-only mappings cross to the child)
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


def _forecast_elsewhere(work: _Work) -> tuple[Forecast, bool]:
    """The forecast, in the forecasting process; and whether its budget ran out."""
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
        self._interval_s = settings.forecast_interval_s
        self._budget_s = settings.forecast_budget_s
        self._limits = ForecastLimits(
            horizon_s=settings.forecast_horizon_s,
            max_rounds=settings.forecast_max_rounds,
            early_rounds=settings.early_rounds,
            early_round_delay_s=settings.early_round_delay_s,
        )
        self._rules = RoundRules(settings.min_migration_gain)
        self._fair_share = settings.fair_share_config()
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
        with self._lock:
            if self._busy or self._stopping.is_set():
                return None
            self._busy = True
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="hadar-forecast"
                )
            executor = self._executor
        return executor.submit(self._compute, inp, policy, now)

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

    def _elsewhere(self, work: _Work, name: str) -> tuple[Forecast, bool] | None:
        """The forecast computed in the forecasting process; None when that failed (the
        caller computes it here instead)."""
        with self._lock:
            if self._stopping.is_set():
                raise _StoppedError
            if self._pool is None:
                # Spawned, not forked: the master's threads (gRPC's among them) must not be
                # copied into a child mid-flight.
                self._pool = multiprocessing.get_context("spawn").Pool(processes=1)
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

        name = "?"
        try:
            policy = copy_policy()
            name = policy.name
            # Commands submitted without iterations report no progress: only their time
            # limit says when they end.
            unknown = frozenset(
                job_id for job_id, job in inp.jobs.items() if not job.spec.iterations
            )
            work = _Work(
                inp.snapshot,
                now.timestamp(),
                inp.lost,
                inp.usage,
                self._fair_share,
                policy,
                self._rules,
                self._limits,
                unknown,
                self._budget_s,
            )
            found = (
                self._elsewhere(work, name)
                if len(inp.snapshot.jobs) >= self._process_from_jobs
                else None
            )
            if found is not None:
                result, spent = found
            else:
                result = _run(work, between_rounds)
        except _StoppedError:
            return
        except Exception:
            # The previous forecast stays served; the next round tries again.
            log.exception("forecast of start times failed", policy=name)
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
            waiting = sum(1 for job in inp.snapshot.jobs if job.current is None)
            self._metrics.forecast_duration.observe(duration)
            self._metrics.forecast_jobs.labels(estimate="yes").set(len(result.starts))
            self._metrics.forecast_jobs.labels(estimate="no").set(waiting - len(result.starts))
        log.info(
            "start times forecast",
            jobs=len(inp.snapshot.jobs),
            estimates=len(result.starts),
            rounds=result.rounds,
            complete=result.complete,
            reached_s=round(result.reached - result.now),
            budget_spent=spent,
            duration_s=round(duration, 3),
        )
