"""Expected start times of waiting jobs: the live policy run forward over the current queue.

:func:`forecast` starts from what a round knows (:class:`RoundState`: every unfinished job
with what it holds, the cluster, the throughput model, the lost leases, the completions not
yet told to the policy) and decides simulated rounds one after another with the one round
function the daemon and the simulator run (:func:`decide_round`), on a copy of the live
policy. Between rounds every placed job progresses at its allocation's predicted throughput
(:func:`allocation_throughput`, as in the simulator), after its restart cost when its
placement changed; a job that completes frees its GPUs and the policy is told of it in the
next round. The first simulated round a waiting job is placed in gives its expected start.

What the forecast assumes, so that its cost stays bounded and its answer honest:

- No job arrives: only the queue as it is now is run forward.
- A job whose amount of work is unknown (``unknown_work``: a command submitted without
  iterations, which never reports progress) runs until its time limit; one without a time
  limit is taken to run past the horizon. Every job stops at its time limit at the latest.
- After a round that starts, stops and moves no job, the next is decided 1 round later,
  then 2, 4, 8... (sooner at a simulated exit or lost-lease end), so a quiet stretch of n
  rounds costs about log2(n) decisions; a policy that changes its mind as time passes (as
  its jobs' received service grows) is caught at most about as late as the stretch is
  long.
- Jobs sharing GPUs progress at the profile's co-location figure (half their speed without
  one) for the whole round; HadarE copies at ``copy_efficiency`` of their summed speed.
- It stops at the horizon: ``ForecastLimits.horizon_s`` of simulated time or
  ``ForecastLimits.max_rounds`` decided rounds, whichever comes first, or earlier when the
  caller says so between rounds (the daemon's computing budget). Jobs not started by then
  get no estimate, nor do jobs the round's input leaves out (held, waiting on a
  dependency, past their array's limit).

It reads no clock, store or network; the daemon (``master/rounds/forecaster.py``) runs it
off the round thread and keeps the latest result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from master.scheduling.fairshare import decay_factor
from master.scheduling.plan import Allocation
from master.scheduling.policy import Policy
from master.scheduling.rates import allocation_throughput
from master.scheduling.round import CompletedJob, RoundRules, RoundState, decide_round
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot

#: Seven days: past that, a queue's order says little about when a job starts.
DEFAULT_HORIZON_S = 7 * 24 * 3600.0
#: Rounds one forecast decides at most; quiet stretches count once (see the module notes).
DEFAULT_MAX_ROUNDS = 2000


@dataclass(frozen=True, slots=True)
class ForecastLimits:
    """How far a forecast runs and how it models the daemon's rounds.

    ``horizon_s``: simulated seconds after the round's start; ``max_rounds``: decided
    rounds. ``early_rounds`` and ``early_round_delay_s``: as the daemon's settings of the
    same names, a round ``early_round_delay_s`` after a job exits while others wait.
    ``copy_efficiency``: the share of their summed speed that HadarE copies make.
    """

    horizon_s: float = DEFAULT_HORIZON_S
    max_rounds: int = DEFAULT_MAX_ROUNDS
    early_rounds: bool = True
    early_round_delay_s: float = 1.0
    copy_efficiency: float = 0.9

    def __post_init__(self) -> None:
        if not self.horizon_s > 0:
            raise ValueError(f"horizon_s must be > 0, got {self.horizon_s}")
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {self.max_rounds}")
        if self.early_round_delay_s < 0:
            raise ValueError(f"early_round_delay_s must be >= 0, got {self.early_round_delay_s}")
        if not 0 < self.copy_efficiency <= 1:
            raise ValueError(f"copy_efficiency must be in (0, 1], got {self.copy_efficiency}")


@dataclass(frozen=True)
class Forecast:
    """What a forecast found. ``starts``: per job waiting at ``now`` (holding nothing) and
    placed within the horizon, its first simulated start (seconds on the caller's clock).
    ``rounds``: rounds decided; ``reached``: the simulated time it stopped at; ``complete``:
    every waiting job got an estimate."""

    now: float
    starts: Mapping[int, float] = field(default_factory=dict)
    rounds: int = 0
    reached: float = 0.0
    complete: bool = False


@dataclass(slots=True)
class _Run:
    """One placed job's course within a simulated round."""

    job: JobView
    alloc: Allocation
    begin: float
    rate: float
    finish: float
    #: When its work would be done, were it not stopped by its time limit.
    work_done: float


def forecast(
    state: RoundState,
    policy: Policy,
    rules: RoundRules | None = None,
    limits: ForecastLimits | None = None,
    *,
    unknown_work: Set[int] = frozenset(),
    between_rounds: Callable[[], bool] | None = None,
) -> Forecast:
    """Run ``policy`` forward from ``state``; see the module docstring. ``policy`` is
    changed as rounds change it: pass a copy of the live one. ``between_rounds`` is called
    after each decided round (the daemon yields the interpreter there); when it returns
    False the forecast ends there, with the starts found so far."""
    rules = rules or RoundRules()
    limits = limits or ForecastLimits()
    first = state.snapshot
    cluster, model, round_s = first.cluster, first.throughput, first.round_seconds
    now = state.now
    end = now + limits.horizon_s
    jobs: dict[int, JobView] = {job.id: job for job in first.jobs}
    waiting = {job.id for job in first.jobs if job.current is None}
    starts: dict[int, float] = {}
    completed = state.completed
    usage = dict(state.usage)
    fair = state.fair_share
    half_life = fair.half_life_s if fair is not None else 1.0
    lost_ends = sorted(lease.ends_at for lease in state.lost.values())
    weights: dict[tuple[str, str], float] = {}
    speeds: dict[int, tuple[Allocation, Allocation | None, float]] = {}
    kinds: dict[int, tuple[Allocation, tuple[tuple[str, int, float], ...]]] = {}
    running = {job.id for job in first.jobs if job.current is not None}
    number = first.round_number
    rounds = 0
    quiet = 0  # decided rounds in a row that changed nothing
    while len(starts) < len(waiting) and now < end and rounds < limits.max_rounds and jobs:
        snapshot = Snapshot(cluster, tuple(jobs.values()), number, round_s, model)
        # Views restricted to the GPUs their memory fits are kept, so later rounds reuse them.
        jobs = {job.id: job for job in snapshot.jobs}
        round_state = RoundState(snapshot, now, state.lost, completed, fair_share=fair, usage=usage)
        decision = decide_round(round_state, policy, rules)
        completed = ()
        rounds += 1
        placements = decision.placements
        for job_id in placements:
            if job_id in waiting and job_id not in starts:
                starts[job_id] = now
        runs = [
            _course(
                jobs[job_id],
                alloc,
                placements,
                jobs,
                now,
                limits,
                unknown_work,
                model,
                cluster,
                speeds,
            )
            for job_id, alloc in placements.items()
        ]
        first_exit = min((run.finish for run in runs), default=math.inf)
        round_end = now + round_s
        others_wait = len(jobs) > len(placements)
        quiet = 0 if decision.changes() or decision.learned else quiet + 1
        if limits.early_rounds and others_wait and first_exit < round_end:
            round_end = first_exit + limits.early_round_delay_s
        elif quiet:
            # Quiet: the next round comes 1, 2, 4... rounds later, sooner when something
            # exits or a lost lease ends.
            step = round_s * 2.0 ** min(quiet - 1, 40)
            until = min([first_exit, *(t for t in lost_ends if t > now)], default=math.inf)
            if until >= now + step:
                round_end = now + step
            elif limits.early_rounds and others_wait:
                round_end = max(round_end, until + limits.early_round_delay_s)
            else:
                round_end = now + max(1, math.ceil((until - now) / round_s)) * round_s
        round_end = min(round_end, max(end, now + round_s))
        by_user: dict[str, float] = {}
        notices: list[CompletedJob] = []
        for job_id in running - placements.keys():
            if job_id in jobs:
                jobs[job_id] = _changed(jobs[job_id], current=None)  # preempted
        running = set(placements)
        for run in runs:
            job = run.job
            stop = min(run.finish, round_end)
            held = max(0.0, stop - now)
            progress = run.rate * max(0.0, stop - run.begin)
            by_user[job.user] = by_user.get(job.user, 0.0) + held * run.alloc.num_gpus
            if run.finish <= round_end:
                done = job.iterations_done + progress
                if job.id not in unknown_work and run.finish == run.work_done:
                    done = job.total_iterations
                notices.append(CompletedJob(job, min(done, job.total_iterations), run.finish))
                del jobs[job.id]
                running.discard(job.id)
                continue
            by_type = dict(job.gpu_seconds_by_type)
            attained = job.attained_service
            for gpu_type, count, weight in _types(kinds, weights, model, cluster, job, run.alloc):
                by_type[gpu_type] = by_type.get(gpu_type, 0.0) + held * count
                attained += held * count * weight
            jobs[job.id] = _changed(
                job,
                current=run.alloc,
                iterations_done=min(job.total_iterations, job.iterations_done + progress),
                run_seconds=job.run_seconds + held,
                attained_service=attained,
                gpu_seconds_by_type=MappingProxyType(by_type),
            )
        completed = tuple(notices)
        if fair is not None:
            decay = decay_factor(round_end - now, half_life)
            usage = {u: v * decay for u, v in usage.items()}
            for user, used in by_user.items():
                usage[user] = usage.get(user, 0.0) + used
        now = round_end
        number += 1
        if between_rounds is not None and not between_rounds():
            break
    return Forecast(
        now=state.now,
        starts=MappingProxyType(starts),
        rounds=rounds,
        reached=min(now, end),
        complete=len(starts) == len(waiting),
    )


def _course(
    job: JobView,
    alloc: Allocation,
    placements: Mapping[int, Allocation],
    jobs: Mapping[int, JobView],
    now: float,
    limits: ForecastLimits,
    unknown_work: Set[int],
    model: ThroughputModel,
    cluster: ClusterView,
    speeds: dict[int, tuple[Allocation, Allocation | None, float]],
) -> _Run:
    """When ``job`` placed on ``alloc`` at ``now`` exits, and at what speed it progresses.
    ``speeds`` keeps each job's speed with the allocations it was worked out for."""
    restarted = job.current is None or (job.current is not alloc and job.current != alloc)
    begin = now + (job.restart_s if restarted else 0.0)
    partner_alloc = placements.get(alloc.shared_with) if alloc.shared_with is not None else None
    known = speeds.get(job.id)
    if known is not None and known[0] is alloc and known[1] is partner_alloc:
        rate = known[2]
    else:
        rate = _speed(job, alloc, partner_alloc, jobs, limits, model, cluster)
        speeds[job.id] = (alloc, partner_alloc, rate)
    work_done = math.inf
    if job.id not in unknown_work and rate > 0:
        work_done = begin + job.remaining_iterations / rate
    finish = work_done
    if job.time_limit_s > 0:
        finish = min(finish, now + max(0.0, job.time_limit_s - job.run_seconds))
    return _Run(job, alloc, begin, rate, finish, work_done)


def _speed(
    job: JobView,
    alloc: Allocation,
    partner_alloc: Allocation | None,
    jobs: Mapping[int, JobView],
    limits: ForecastLimits,
    model: ThroughputModel,
    cluster: ClusterView,
) -> float:
    """Iterations/s of ``job`` on ``alloc``, as the simulator counts them."""
    alone = allocation_throughput(model, cluster, job.job_type, alloc)
    if alloc.num_copies > 1:
        return alone * limits.copy_efficiency
    partner = jobs.get(alloc.shared_with) if alloc.shared_with is not None else None
    if partner_alloc is not None and partner is not None and partner_alloc.shared_with == job.id:
        gpu_type = cluster.gpu_type(alloc.slots[0])
        pair = model.colocated(job.job_type, partner.job_type, gpu_type, alloc.num_gpus)
        return min(pair[0], alone) if pair is not None else alone / 2.0
    return alone


def _changed(job: JobView, **changes: Any) -> JobView:
    """``job`` with ``changes``, without the checks of a new view: rounds change views of
    every running job, and only fields a valid view keeps valid (progress, service, what it
    holds) change here."""
    out = object.__new__(JobView)
    out.__dict__.update(job.__dict__)
    out.__dict__.update(changes)
    return out


def _types(
    cache: dict[int, tuple[Allocation, tuple[tuple[str, int, float], ...]]],
    weights: dict[tuple[str, str], float],
    model: ThroughputModel,
    cluster: ClusterView,
    job: JobView,
    alloc: Allocation,
) -> tuple[tuple[str, int, float], ...]:
    """(GPU type, GPUs of it, service weight) of ``job``'s allocation, kept per job."""
    known = cache.get(job.id)
    if known is not None and known[0] is alloc:
        return known[1]
    counts: dict[str, int] = {}
    for slot in alloc.slots:
        gpu_type = cluster.gpu_type(slot)
        counts[gpu_type] = counts.get(gpu_type, 0) + 1
    out = tuple(
        (t, n, _weight(weights, model, cluster, job.job_type, t)) for t, n in counts.items()
    )
    cache[job.id] = (alloc, out)
    return out


def _weight(
    cache: dict[tuple[str, str], float],
    model: ThroughputModel,
    cluster: ClusterView,
    job_type: str,
    gpu_type: str,
) -> float:
    """Speed of ``job_type`` on ``gpu_type`` relative to its slowest type on the cluster:
    what one GPU-second counts towards attained service, as in the simulator."""
    key = (job_type, gpu_type)
    cached = cache.get(key)
    if cached is not None:
        return cached
    rates = [model.throughput(job_type, t, 1) for t in cluster.gpu_types]
    slowest = min((r for r in rates if r > 0), default=0.0)
    mine = model.throughput(job_type, gpu_type, 1)
    cached = mine / slowest if slowest > 0 else 1.0
    cache[key] = cached
    return cached
