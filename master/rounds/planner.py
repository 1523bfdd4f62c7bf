"""A round's first two steps, reading the store and deciding: on the round's thread, or for a
long queue in a process of its own, at a lower scheduling priority than the master.

Reading a queue of thousands of jobs and deciding over it takes the master's interpreter for
a second or more a round, and every RPC waits its turn for the interpreter behind it at each
step (each SQL statement gives it up). Once the last round offered the policy
``planning_process_from_jobs`` jobs or more, the next rounds read and decide in a child
process instead (started once and kept, with its own connection to the database and its own
memo of what it read), on the machine's other core, and the round's thread only stores the
decision and pushes it.

While rounds plan in the child, the policy lives there: it goes to the child with the first
such round, stays for the next ones, and comes back only when the master needs it (a round
on the thread again, a forecast's copy, a look at it): sending a policy that learns from
every job, both ways every round, cost the master more than the round's read did. What the
policy learned is stored with every round as on the thread, so a child that fails or dies
takes no more with it than a restart of the master would: the policy comes back from the
store's memory. What comes back with a round is what storing it needs: the jobs its actions
name and the waiting reasons, not the whole queue. When a forecast of start times is due,
a long queue's forecast is made ready in the child, with a copy of the policy it holds, and
crosses pickled, to be handed on to the forecasting process as it is; a shorter queue's
whole input comes back for the forecast on the master's thread. A child that fails, dies
or stops answering leaves the round to the thread, which reads and decides again from
scratch; the process is started again for a later round.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from threading import Event
from typing import TypeVar, cast

import structlog

import master.rounds.crossing  # noqa: F401  (views with read-only mappings cross to the child)
from master.process.cpus import helper_cpus, use_cpus
from master.process.transactions import Transactor
from master.rounds.forecaster import PreparedForecast, prepare
from master.rounds.reasons import WaitingEntries, waiting_entries
from master.rounds.snapshot import ReadMemo, RoundInput, read_round_input
from master.scheduling.policy import Policy, import_memory, make_policy
from master.scheduling.round import RoundDecision, RoundRules, RoundState, decide_round
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView
from master.settings import Settings
from store import Database, UnitOfWork
from store.states import NodeState

log = structlog.get_logger(__name__)
T = TypeVar("T")

# How often a round waiting for the child checks whether the master stops.
_POLL_S = 0.2
# The planning process's scheduling priority below the master's: where both want a core at
# once (the child reading a long queue while calls arrive), the master's calls go first, and
# a round waits a little longer instead. A little, not starved: the round still finishes
# within its deadline on a machine that is busy all the time.
PLANNING_NICENESS = 5
# How long the child may take to give the policy back, between rounds.
_RECLAIM_S = 30.0


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


def read_input(
    uow: UnitOfWork,
    settings: Settings,
    base_model: ThroughputModel,
    now: datetime,
    memo: ReadMemo | None,
) -> RoundInput:
    """The round's input as the daemon reads it under `settings` (through `memo` when
    given)."""
    return read_round_input(
        uow,
        base_model,
        settings.round_seconds,
        lost_hold_s=settings.lost_lease_hold_s,
        now=now,
        restart_s=settings.restart_cost_s,
        fair_share=settings.fair_share_config(),
        memo=memo,
    )


@dataclass(frozen=True)
class Planned:
    """A round read and decided. ``inp``: what storing the round needs of its input (all
    of it when planned on the round's thread or asked for whole); ``policy``: the policy as
    the round left it, None when it stayed in the child; ``jobs``: how many jobs were
    offered to the policy, ``waiting`` how many of them it gave nothing; ``read_s`` and
    ``plan_s``: the two steps' seconds (for a round planned elsewhere, ``read_s`` includes
    the crossings); ``reasons``: why each waiting job waits
    (:mod:`master.rounds.reasons`)."""

    inp: RoundInput
    decision: RoundDecision
    policy: Policy | None
    jobs: int
    waiting: int
    read_s: float
    plan_s: float
    elsewhere: bool = False
    reasons: WaitingEntries = dataclasses.field(default_factory=WaitingEntries)
    # A forecast made ready where the round was planned (then `inp` is trimmed).
    forecast: PreparedForecast | None = None


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
    inp = tx.read(lambda uow: read_input(uow, settings, base_model, now, memo))
    read_s = time.monotonic() - started
    decision = decide(inp, policy, settings, now.timestamp())
    plan_s = time.monotonic() - started - read_s
    waiting = sum(1 for job_id in inp.jobs if job_id not in decision.placements)
    reasons = waiting_entries(inp.jobs, decision.waiting)
    return Planned(inp, decision, policy, len(inp.jobs), waiting, read_s, plan_s, reasons=reasons)


def trimmed(planned: Planned) -> Planned:
    """`planned` with only what storing the round needs: the jobs its actions name (at a
    thousand submissions between rounds, unpickling the whole queue took the master's
    interpreter as long as reading it took the child), its waiting reasons as plain
    entries, the draining and drained nodes and the completions.

    The snapshot keeps no jobs and no cluster view, and the nodes only those a drain
    concerns: storing a round looks at nothing else of them. At 200 nodes the views and
    the nodes were two fifths of the answer, and the master unpickles the answer on its own
    interpreter, which every call waits for meanwhile."""
    inp, decision = planned.inp, planned.decision
    named = {a.job_id for a in decision.actions}
    light = dataclasses.replace(
        inp,
        snapshot=dataclasses.replace(inp.snapshot, jobs=(), cluster=ClusterView(())),
        jobs={job_id: job for job_id, job in inp.jobs.items() if job_id in named},
        current={},
        tasks={},
        nodes={
            name: node
            for name, node in inp.nodes.items()
            if node.state in (NodeState.DRAINING, NodeState.DRAINED)
        },
        lost={},
        usage={},
    )
    return dataclasses.replace(
        planned, inp=light, decision=dataclasses.replace(decision, waiting={})
    )


def portable(planned: Planned) -> Planned:
    """`planned` with each error the policy raised carrying its traceback as a note, since
    a traceback does not cross to another process."""
    decision = planned.decision
    for error in (decision.plan_error, *decision.learn_errors, *decision.isolated.values()):
        if error is not None and error.__traceback__ is not None:
            error.add_note("".join(traceback.format_tb(error.__traceback__)).rstrip())
    return planned


@dataclass
class _Child:
    """The planning process's own: its connection to the database, its memo of what it
    read, and the policy while it holds it."""

    tx: Transactor
    memo: ReadMemo
    policy: Policy | None = None


_child: _Child | None = None


class PolicyNotHereError(RuntimeError):
    """The planning process does not hold the policy (it was started again since)."""


def _start_child(url: str) -> None:
    global _child
    try:
        os.nice(PLANNING_NICENESS)
    except OSError:  # not allowed here: plan at the master's priority
        log.info("the planning process runs at the master's priority")
    _child = _Child(Transactor(Database(url)), ReadMemo())


def _plan_in_child(
    policy: Policy | None,
    settings: Settings,
    base_model: ThroughputModel,
    now: datetime,
    whole: bool,
    forecast_from: int | None = None,
) -> Planned:
    """Plan with `policy`, kept for the next rounds; None: with the one kept. With
    `whole`, the whole input comes back, unless the queue has `forecast_from` jobs or more:
    then the forecast's work is made ready here (with a copy of the policy kept here) and
    the input comes back trimmed."""
    assert _child is not None, "the planning process starts with its database"
    if policy is not None:
        _child.policy = policy
    if _child.policy is None:
        raise PolicyNotHereError("the planning process holds no policy")
    planned = plan(_child.tx, _child.memo, _child.policy, settings, base_model, now)
    if whole and forecast_from is not None and len(planned.inp.snapshot.jobs) >= forecast_from:
        ready = prepare(planned.inp, _child.policy, now, settings)
        planned = dataclasses.replace(trimmed(planned), forecast=ready)
    elif not whole:
        planned = trimmed(planned)
    return portable(dataclasses.replace(planned, policy=None, elsewhere=True))


def _policy_in_child() -> Policy:
    """The policy the planning process holds (a copy reaches the master)."""
    if _child is None or _child.policy is None:
        raise PolicyNotHereError("the planning process holds no policy")
    return _child.policy


def _serve(connection: Connection, url: str, cpus: frozenset[int] | None) -> None:
    """The planning process: answer each call the master sends until it goes away."""
    use_cpus(cpus)
    _start_child(url)
    while True:
        try:
            call, args = connection.recv()
        except (EOFError, OSError):
            return
        try:
            answer: tuple[bool, object] = (True, call(*args))
        except Exception as exc:
            answer = (False, exc)
        try:
            connection.send(answer)
        except Exception as exc:
            # The answer does not pickle: say so instead (nothing was written yet).
            connection.send((False, RuntimeError(f"the planning process's answer: {exc!r}")))


class ChildGoneError(RuntimeError):
    """The planning process exited (killed, out of memory) before it answered."""


class _Process:
    """The planning process, seen from the master: one call at a time, over a pipe."""

    def __init__(self, url: str) -> None:
        # Spawned, not forked: the master's threads (gRPC's among them) must not be copied
        # into a child mid-flight. A daemon: it ends with the master.
        context = multiprocessing.get_context("spawn")
        self._connection, theirs = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(theirs, url, helper_cpus()), name="hadar-planner", daemon=True
        )
        self._process.start()
        theirs.close()

    def call(
        self, call: Callable[..., T], args: tuple[object, ...], deadline: float, stopping: Event
    ) -> T | None:
        """`call(*args)` in the process; None when the master stops meanwhile. Raises what
        the call raised, ChildGoneError or TimeoutError (past `deadline`, monotonic)."""
        self._connection.send((call, args))
        while not self._connection.poll(_POLL_S):
            if stopping.is_set():
                return None
            if not self._process.is_alive():
                raise ChildGoneError(f"the planning process exited ({self._process.exitcode})")
            if time.monotonic() >= deadline:
                raise TimeoutError("the planning process did not answer in time")
        try:
            ok, value = self._connection.recv()
        except EOFError:
            raise ChildGoneError("the planning process exited") from None
        if not ok:
            assert isinstance(value, BaseException)
            raise value
        return cast(T, value)

    def close(self) -> None:
        self._process.kill()
        self._process.join(5)
        self._connection.close()


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
        self._process: _Process | None = None
        # Whether the child holds the policy (the master's copy is then behind it).
        self._away = False
        self._stopping = threading.Event()

    @property
    def elsewhere_next(self) -> bool:
        """Whether the next round plans in the child process."""
        return self._can_leave and self._last_jobs >= self._from_jobs

    @property
    def policy_away(self) -> bool:
        """Whether the child holds the policy (:meth:`reclaim` brings it back)."""
        return self._away

    def plan(
        self,
        policy: Policy,
        now: datetime,
        *,
        whole: bool = False,
        forecast_from: int | None = None,
    ) -> Planned:
        """Read and decide the round starting `now` with `policy`, the master's copy. With
        `whole`, the whole input comes back wherever it was planned (a forecast takes it),
        unless it was planned in the child and the queue has `forecast_from` jobs or more:
        then the child makes the forecast's work ready (Planned.forecast). The planned
        policy is None while the child keeps it."""
        planned: Planned | None = None
        if self.elsewhere_next:
            planned = self._elsewhere(policy, now, whole, forecast_from)
        if planned is None:
            policy = self.reclaim(policy)
            planned = plan(self._tx, self._memo, policy, self._settings, self._base_model, now)
        self._last_jobs = planned.jobs
        return planned

    def reclaim(self, policy: Policy) -> Policy:
        """The policy as the last round left it, back in the master (`policy`, the master's
        copy, when the child does not hold it); the next round in the child takes it along
        again. A child that cannot give it back leaves the policy as a restart would build
        it."""
        if not self._away:
            return policy
        self._away = False
        with self._lock:
            process = self._process
        if process is not None:
            try:
                back = process.call(
                    _policy_in_child, (), time.monotonic() + _RECLAIM_S, self._stopping
                )
                if back is not None:
                    return back
            except Exception:
                log.warning("the planning process did not give the policy back", exc_info=True)
                self._drop(process)
        return self._recovered(policy)

    def stop(self) -> None:
        """Stop the child process (a round waiting for it plans on its own thread)."""
        self._stopping.set()
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            process.close()

    def _drop(self, process: _Process) -> None:
        with self._lock:
            if self._process is process:
                self._process = None
        process.close()

    def _recovered(self, stale: Policy) -> Policy:
        """The policy as a restarted master builds it: from the settings and the memory
        stored with the last round (`stale`, the master's last copy, should that fail)."""
        try:
            fresh = make_policy(stale.name, **dict(self._settings.policy_params))
            memory = self._tx.read(lambda uow: uow.memory.get(fresh.name))
            if memory is not None:
                import_memory(fresh, memory)
        except Exception:
            log.exception("the policy could not be rebuilt from the store; keeping the last copy")
            return stale
        log.warning("the policy was rebuilt from its stored memory", policy=fresh.name)
        return fresh

    def _elsewhere(
        self, policy: Policy, now: datetime, whole: bool, forecast_from: int | None
    ) -> Planned | None:
        """The round planned in the child; None when that failed."""
        started = time.monotonic()
        with self._lock:
            if self._stopping.is_set():
                return None
            if self._process is None:
                self._process = _Process(self._tx.database.url)
            process = self._process
        # However long the queue, a round takes far less than this: a child that takes
        # longer is stuck, and is replaced.
        deadline = started + max(60.0, 3 * self._settings.round_seconds)
        # Sent with this round, or kept there since an earlier one.
        sent = not self._away
        try:
            planned = process.call(
                _plan_in_child,
                (
                    policy if sent else None,
                    self._settings,
                    self._base_model,
                    now,
                    whole,
                    forecast_from,
                ),
                deadline,
                self._stopping,
            )
            # Sent (or kept there): the child holds the policy from now on.
            self._away = True
            if planned is None:
                return None
        except Exception:
            log.warning(
                "planning the round in the planning process failed; planning it here",
                exc_info=True,
            )
            # What the child learned this round goes with it (nothing of the round was
            # stored): the round is planned again here from the master's copy when it went
            # with this round, else from the policy as stored with the last round.
            self._away = not sent
            self._drop(process)
            return None
        took = time.monotonic() - started
        return dataclasses.replace(planned, read_s=took - planned.plan_s)
