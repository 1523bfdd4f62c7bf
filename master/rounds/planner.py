"""A round's first two steps, reading the store and deciding: on the round's thread, or for a
long queue in a process of its own.

Reading a queue of thousands of jobs and deciding over it takes the master's interpreter for
a second or more a round, and every RPC waits its turn for the interpreter behind it at each
step (each SQL statement gives it up). Once the last round offered the policy
``planning_process_from_jobs`` jobs or more, the next rounds read and decide in a child
process instead (started once and kept, with its own connection to the database and its own
memo of what it read), on the machine's other core, and the round's thread only stores the
decision and pushes it.

The policy lives in the master: each round in the child takes the policy along and brings
it back as the round left it (what it learned, its memory between rounds), so the two
places can take turns round by round. What comes back is what storing the round needs: the
jobs its actions name and those whose waiting reason changed, not the whole queue (the
whole input only when a forecast of start times is due, which takes it). A child that fails
or dies leaves the round to the thread, which reads and decides again from scratch; the
process is started again for a later round.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.pool
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime

import structlog

import master.rounds.crossing  # noqa: F401  (views with read-only mappings cross to the child)
from master.process.transactions import Transactor
from master.rounds.snapshot import ReadMemo, RoundInput, read_round_input
from master.scheduling.policy import Policy
from master.scheduling.round import RoundDecision, RoundRules, RoundState, decide_round
from master.scheduling.throughput import ThroughputModel
from master.settings import Settings
from store import Database
from store.states import JobState

log = structlog.get_logger(__name__)

# How often a round waiting for the child checks whether the master stops.
_POLL_S = 0.2


def decide(inp: RoundInput, policy: Policy, settings: Settings, now: float) -> RoundDecision:
    """The daemon's round decision: what the store shows, decided by the one round function
    the simulator runs too (:func:`master.scheduling.round.decide_round`). ``now``: the
    round's start in Unix time."""
    state = RoundState(
        inp.snapshot,
        now,
        inp.lost,
        inp.completed,
        fair_share=settings.fair_share_config(),
        usage=inp.usage,
    )
    return decide_round(state, policy, RoundRules(settings.min_migration_gain))


@dataclass(frozen=True)
class Planned:
    """A round read and decided. ``inp``: what storing the round needs of its input (all
    of it when planned on the round's thread or asked for whole); ``policy``: the policy as
    the round left it; ``jobs``: how many jobs were offered to the policy, ``waiting`` how
    many of them it gave nothing; ``read_s`` and ``plan_s``: the two steps' seconds (for a
    round planned elsewhere, ``read_s`` includes the crossings)."""

    inp: RoundInput
    decision: RoundDecision
    policy: Policy
    jobs: int
    waiting: int
    read_s: float
    plan_s: float
    elsewhere: bool = False


def plan(
    tx: Transactor,
    memo: ReadMemo,
    policy: Policy,
    settings: Settings,
    base_model: ThroughputModel,
    now: datetime,
) -> Planned:
    """Read the store and decide, here."""
    started = time.monotonic()
    inp = tx.read(
        lambda uow: read_round_input(
            uow,
            base_model,
            settings.round_seconds,
            lost_hold_s=settings.lost_lease_hold_s,
            now=now,
            restart_s=settings.restart_cost_s,
            fair_share=settings.fair_share_config(),
            memo=memo,
        )
    )
    read_s = time.monotonic() - started
    decision = decide(inp, policy, settings, now.timestamp())
    plan_s = time.monotonic() - started - read_s
    waiting = sum(1 for job_id in inp.jobs if job_id not in decision.placements)
    return Planned(inp, decision, policy, len(inp.jobs), waiting, read_s, plan_s)


def trimmed(planned: Planned) -> Planned:
    """`planned` with only what storing the round needs: the jobs its actions name and
    those whose waiting reason changed (with those reasons), the nodes and the completions;
    and every error the policy raised carrying its traceback as a note, since a traceback
    does not cross to another process."""
    inp, decision = planned.inp, planned.decision
    reasons = {
        job_id: reason
        for job_id, reason in decision.waiting.items()
        if (job := inp.jobs.get(job_id)) is not None
        and job.state is not JobState.RUNNING
        and job.reason != reason
    }
    named = {a.job_id for a in decision.actions} | reasons.keys()
    light = dataclasses.replace(
        inp,
        snapshot=dataclasses.replace(inp.snapshot, jobs=()),
        jobs={job_id: job for job_id, job in inp.jobs.items() if job_id in named},
        current={},
        tasks={},
        lost={},
        usage={},
    )
    return dataclasses.replace(
        planned,
        inp=light,
        decision=dataclasses.replace(decision, waiting=reasons),
        elsewhere=True,
    )


def _with_traceback(error: BaseException) -> BaseException:
    if error.__traceback__ is not None:
        error.add_note("".join(traceback.format_tb(error.__traceback__)).rstrip())
    return error


def portable(planned: Planned) -> Planned:
    """`planned` with each error the policy raised carrying its traceback as a note."""
    decision = planned.decision
    for error in (decision.plan_error, *decision.learn_errors, *decision.isolated.values()):
        if error is not None:
            _with_traceback(error)
    return planned


# The child's own: its connection to the database and its memo of what it read.
_child: tuple[Transactor, ReadMemo] | None = None


def _start_child(url: str) -> None:
    global _child
    _child = (Transactor(Database(url)), ReadMemo())


def _plan_in_child(
    policy: Policy, settings: Settings, base_model: ThroughputModel, now: datetime, whole: bool
) -> Planned:
    assert _child is not None, "the planning process starts with its database"
    tx, memo = _child
    planned = plan(tx, memo, policy, settings, base_model, now)
    return portable(planned if whole else trimmed(planned))


class Planner:
    """Reads and decides each round where it costs the master's calls least; see the
    module docstring."""

    def __init__(
        self,
        tx: Transactor,
        memo: ReadMemo,
        settings: Settings,
        base_model: ThroughputModel,
    ) -> None:
        self._tx = tx
        self._memo = memo
        self._settings = settings
        self._base_model = base_model
        self._from_jobs = settings.planning_process_from_jobs
        # An in-memory SQLite database exists in this process only.
        self._can_leave = self._from_jobs > 0 and not tx.database.in_memory
        self._last_jobs = 0
        self._lock = threading.Lock()
        self._pool: multiprocessing.pool.Pool | None = None
        self._stopping = threading.Event()

    @property
    def elsewhere_next(self) -> bool:
        """Whether the next round plans in the child process."""
        return self._can_leave and self._last_jobs >= self._from_jobs

    def plan(self, policy: Policy, now: datetime, *, whole: bool = False) -> Planned:
        """Read and decide the round starting `now` with `policy`. With `whole`, the whole
        input comes back wherever it was planned (a forecast takes it)."""
        planned: Planned | None = None
        if self.elsewhere_next:
            planned = self._elsewhere(policy, now, whole)
        if planned is None:
            planned = plan(self._tx, self._memo, policy, self._settings, self._base_model, now)
        self._last_jobs = planned.jobs
        return planned

    def stop(self) -> None:
        """Stop the child process (a round waiting for it plans on its own thread)."""
        self._stopping.set()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()

    def _elsewhere(self, policy: Policy, now: datetime, whole: bool) -> Planned | None:
        """The round planned in the child; None when that failed."""
        started = time.monotonic()
        with self._lock:
            if self._stopping.is_set():
                return None
            if self._pool is None:
                # Spawned, not forked: the master's threads (gRPC's among them) must not
                # be copied into a child mid-flight.
                self._pool = multiprocessing.get_context("spawn").Pool(
                    processes=1, initializer=_start_child, initargs=(self._tx.database.url,)
                )
            pool = self._pool
        # However long the queue, a round takes far less than this: a child that takes
        # longer is stuck (or died: a pool's task is then never answered) and is replaced.
        deadline = started + max(60.0, 3 * self._settings.round_seconds)
        try:
            pending = pool.apply_async(
                _plan_in_child, (policy, self._settings, self._base_model, now, whole)
            )
            while not pending.ready():
                if self._stopping.is_set():
                    return None
                if time.monotonic() >= deadline:
                    raise TimeoutError("the planning process did not answer in time")
                pending.wait(_POLL_S)
            planned: Planned = pending.get()
        except Exception:
            log.warning(
                "planning the round in the planning process failed; planning it here",
                exc_info=True,
            )
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.terminate()
            return None
        took = time.monotonic() - started
        return dataclasses.replace(planned, read_s=took - planned.plan_s)
