"""Round-based discrete-event simulation of a cluster driven by a :class:`Policy`.

Time advances in rounds of ``round_s`` seconds. At the start of a round the jobs that
have arrived are shown to the policy as a :class:`Snapshot`, and the round is decided by
the daemon's own function (:func:`master.scheduling.round.decide_round`: the policy learns
from the jobs completed in the round before, plans, non-preemptible jobs keep their GPUs,
a move worth less than ``min_migration_gain`` is not made); what it decides holds for the
round. Within the round every placed job progresses
at its allocation's throughput (see :mod:`master.scheduling.rates`), after a restart
overhead when its placement changed; a job that completes mid-round finishes at the exact
time. Jobs arriving mid-round wait for the next round. When no job is active the clock
jumps to the next arrival; when every job that ran in a round has finished before its end
and jobs are waiting, the next round starts at once (``early_round_end``, as Gavel's
simulator does). With ``early_rounds`` the simulator follows the daemon instead: a job
that finishes mid-round while others wait ends the round ``early_round_delay_s`` after
its exit, as the daemon's early round does (``Settings.early_rounds``), so GPUs freed
mid-round are not idle until the round's nominal end.

Settled rounds: when every active job was placed in the last round and none arrived or
finished since, a policy that declares its plan stable then
(:func:`master.scheduling.policy.stable_when_settled`: fifo, srtf, slurm, las without
starvation promotion) is not asked; the round carries every placement over. Those of them
that declare it (:func:`master.scheduling.policy.stable_after_departures`: the same four)
are not asked either when jobs completed since but none arrived; the completions are told
at the next round that is decided. A policy that can tell from the waiting jobs and the
free GPUs that it would start and move nobody (:class:`master.scheduling.policy.StartsNone`:
plain fifo, whose head of the queue does not fit) is not asked then, while some job runs
and the last round made progress. Carried rounds
in which no job can finish or arrive run as one stretch: each job's progress is summed
round by round in one loop, with the same arithmetic as a round at a time. Its plans and
so the results are exactly those of asking it. Runs with an ``on_round`` observer or fair
share, and policies that learn, decide every round.

Sharing: two allocations that name each other in ``shared_with`` progress at the
profile's co-location throughputs; without a figure for the pair each gets half its
isolated speed (plain time slicing). HadarE copies: the job's progress is the sum of its
copies' throughputs times ``copy_efficiency``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from master.scheduling.diff import Hysteresis
from master.scheduling.fairshare import FairShareConfig, decay_factor
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policy import (
    Policy,
    StartsNone,
    forks_every_job,
    learns,
    stable_after_departures,
    stable_when_settled,
)
from master.scheduling.rates import allocation_throughput, fastest_alone_on
from master.scheduling.round import (
    CompletedJob,
    RoundDecision,
    RoundRules,
    RoundState,
    decide_round,
)
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot
from master.sim.collector import young_collections_rarer
from master.sim.gavel_compat import (
    MAX_FAILED_LEASES,
    compat_throughput,
    lease_fails,
    round_iterations,
)
from master.sim.limits import Overestimate, time_limit
from master.sim.trace import TraceJob

#: Most carried rounds one stretch runs (see Simulator._carry_stretch); bounds its lists.
_STRETCH_MAX_ROUNDS = 10_000


class SimulationError(RuntimeError):
    """The policy produced an invalid plan, or the simulation cannot make progress."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Simulator settings.

    ``overhead_s``: seconds without progress each time a job (re)starts on a new
    placement: first start, resume after preemption, migration or resize. 0 by default;
    about 30-60 s is realistic for a checkpoint-restore of a mid-size model (see
    docs/simulator.md). Every round is decided as the daemon decides it
    (:func:`master.scheduling.round.decide_round`): the jobs a policy raises on are left
    out of its plan (running ones keep their GPUs), counted in ``SimResult.isolated_rounds``
    and named in ``SimResult.isolated_jobs``; a policy that raises when no single job
    explains it, or plans something the cluster cannot run (GPUs double-booked, wrong
    counts, disallowed types), leaves every job where it is for that round, counted in
    ``SimResult.fallback_rounds``. ``validate_plans`` raises :class:`SimulationError`
    instead of either, naming the policy and round.
    ``record_segments`` keeps every (job, interval, GPUs, iterations) piece of work.
    ``stall_rounds``: raise when this many consecutive rounds pass with jobs waiting, no
    job running and no arrival to come. ``early_rounds``: end a round
    ``early_round_delay_s`` after the first job finishes in it while jobs wait, as the
    daemon does; off by default, matching Gavel's simulator and its reference figures.
    ``min_migration_gain``: the daemon's hysteresis (its setting of the same name, same
    default): a running job moves to other GPUs of the same count only for at least this
    relative throughput gain; 0 still holds back moves that would make the job slower.
    ``pay_restart``: as in the daemon, a move no other job forces must also win back its
    restart (``overhead_s``) within the round; off, for what-if runs that move freely.
    ``fair_share``: the admin's shares and per-user GPU quotas, applied to every round as
    the daemon applies them (:mod:`master.scheduling.fairshare`); each user's usage decays
    with its ``half_life_s`` over simulated time. None: neither applies.
    ``fork_all``: treat every job as forkable (it may run as averaged copies), whatever
    the trace says; for what-if runs, since forking changes how a model trains.
    ``limit_overestimate``: how the time limit of a job whose trace gives none is drawn
    (:mod:`master.sim.limits`); every policy sees the limits, backfilling ones plan by them.
    ``gavel_compat``: model rounds and speeds as Gavel's simulator does
    (:mod:`master.sim.gavel_compat`): a job runs the whole iterations that fit in the round
    at its table speed wherever its GPUs are, the round ends when the last job in it
    stops, and with no job placed the clock jumps to the next arrival.
    """

    round_s: float = 360.0
    overhead_s: float = 0.0
    copy_efficiency: float = 0.9
    early_round_end: bool = True
    early_rounds: bool = False
    early_round_delay_s: float = 1.0
    validate_plans: bool = False
    record_segments: bool = False
    stall_rounds: int = 50
    fork_all: bool = False
    min_migration_gain: float = Hysteresis().min_migration_gain
    pay_restart: bool = Hysteresis().pay_restart
    fair_share: FairShareConfig | None = None
    limit_overestimate: Overestimate = field(default_factory=Overestimate)
    gavel_compat: bool = False

    def __post_init__(self) -> None:
        if self.gavel_compat and self.early_rounds:
            raise ValueError("Gavel-compatible rounds and early rounds exclude each other")
        if not self.round_s > 0:
            raise ValueError(f"round length must be > 0 s, got {self.round_s}")
        if self.overhead_s < 0:
            raise ValueError(f"overhead must be >= 0 s, got {self.overhead_s}")
        if not 0 < self.copy_efficiency <= 1:
            raise ValueError(f"copy_efficiency must be in (0, 1], got {self.copy_efficiency}")
        if self.early_round_delay_s < 0:
            raise ValueError(f"early round delay must be >= 0 s, got {self.early_round_delay_s}")
        if self.stall_rounds < 1:
            raise ValueError("stall_rounds must be >= 1")
        if self.min_migration_gain < 0:
            raise ValueError(f"min_migration_gain must be >= 0, got {self.min_migration_gain}")


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of work: ``job_id`` ran on ``slots`` from ``start_s`` to ``end_s``."""

    job_id: int
    round_index: int
    start_s: float
    end_s: float
    iterations: float
    slots: tuple[GpuSlot, ...]
    shared_with: int | None
    copies: int = 1


@dataclass(frozen=True, slots=True)
class RoundRecord:
    index: int
    start_s: float
    end_s: float
    plan_ms: float
    busy_by_type: dict[str, int]
    active_jobs: int
    running_jobs: int
    busy_gpu_seconds: float
    #: GPU-seconds each user's jobs held in the round; jobs each user had waiting (not
    #: placed) in it.
    gpu_seconds_by_user: dict[str, float] = field(default_factory=dict)
    waiting_by_user: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobResult:
    id: int
    job_type: str
    num_gpus: int
    user: str
    priority: float
    arrival_s: float
    start_s: float
    finish_s: float
    iterations: float
    preemptions: int
    migrations: int
    gpu_seconds: dict[str, float]
    lower_bound_s: float
    copies_bound_s: float
    contention: float
    used_copies: bool
    # Given up after MAX_FAILED_LEASES failed leases (Gavel-compatible rounds only).
    failed: bool = False

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def queue_s(self) -> float:
        return self.start_s - self.arrival_s

    @property
    def rho(self) -> float:
        """Finish-time fairness (Themis): JCT over the time alone on a 1/contention share."""
        fair = self.lower_bound_s * max(1.0, self.contention)
        return self.jct_s / fair if fair > 0 else math.inf


@dataclass(frozen=True)
class SimResult:
    policy: str
    jobs: tuple[JobResult, ...]
    rounds: tuple[RoundRecord, ...]
    capacity_by_type: dict[str, int]
    config: SimConfig
    segments: tuple[Segment, ...] = field(default=())
    # Rounds in which the policy failed or its plan was invalid: every job kept its GPUs.
    fallback_rounds: int = 0
    # Rounds in which the policy failed on some jobs, left out of its plan while it planned
    # the others; and those jobs, by id.
    isolated_rounds: int = 0
    isolated_jobs: tuple[int, ...] = ()


@dataclass(slots=True)
class _Job:
    spec: TraceJob
    total: float
    limit_s: float = 0.0
    done: float = 0.0
    start: float | None = None
    finish: float | None = None
    current: Allocation | None = None
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    attained: float = 0.0
    run_s: float = 0.0
    preemptions: int = 0
    migrations: int = 0
    contention_integral: float = 0.0
    used_copies: bool = False
    view: JobView | None = None
    seen: JobView | None = None  # the view the policy saw in the latest round
    admitted_at: float = 0.0
    type_counts: tuple[Allocation, tuple[tuple[str, int, float], ...]] | None = None
    alone_rate: tuple[Allocation, float] | None = None
    failed_leases: int = 0  # consecutive (Gavel-compatible rounds)
    failed: bool = False


def resolve_iterations(
    jobs: Sequence[TraceJob], cluster: ClusterView, model: ThroughputModel
) -> list[float]:
    """Total iterations per job; a ``duration_s`` becomes iterations at the fastest type."""
    out: list[float] = []
    for job in jobs:
        if job.iterations is not None:
            out.append(job.iterations)
            continue
        assert job.duration_s is not None
        rate = best_rate(job, cluster, model)
        if rate <= 0:
            raise ValueError(f"job {job.id}: no allowed GPU type to convert duration_s")
        out.append(job.duration_s * rate)
    return out


def best_rate(job: TraceJob, cluster: ClusterView, model: ThroughputModel) -> float:
    """Fastest single-copy speed the job can get on this cluster, consolidated or spread."""
    capacity = cluster.capacity_by_type()
    best = 0.0
    for gpu_type, count in capacity.items():
        if job.allowed_gpu_types and gpu_type not in job.allowed_gpu_types:
            continue
        if count < job.num_gpus:
            continue
        for consolidated in (True, False):
            best = max(
                best,
                model.throughput(job.job_type, gpu_type, job.num_gpus, consolidated=consolidated),
            )
    return best


def bound_rate(job: TraceJob, cluster: ClusterView, model: ThroughputModel) -> float:
    """The fastest the job could run alone on this cluster as one copy (see fastest_alone_on)."""
    capacity = cluster.capacity_by_type()
    return max(
        (
            fastest_alone_on(model, job.job_type, job.num_gpus, t, c)
            for t, c in capacity.items()
            if c > 0 and (not job.allowed_gpu_types or t in job.allowed_gpu_types)
        ),
        default=0.0,
    )


def copies_rate(
    job: TraceJob, cluster: ClusterView, model: ThroughputModel, efficiency: float
) -> float:
    """Upper bound with one copy per node, every copy at the best speed that node allows."""
    total = 0.0
    for node in cluster.nodes:
        per_type: dict[str, int] = {}
        for gpu in node.usable_gpus:
            per_type[gpu.type] = per_type.get(gpu.type, 0) + 1
        rates = [
            fastest_alone_on(model, job.job_type, job.num_gpus, t, k)
            for t, k in per_type.items()
            if not job.allowed_gpu_types or t in job.allowed_gpu_types
        ]
        if rates:
            total += max(rates)
    return total * efficiency


def _bound_rates(
    spec: TraceJob, cluster: ClusterView, model: ThroughputModel, eff: float
) -> tuple[float, float]:
    """(single-copy bound speed, bound speed with copies) for the job's kind."""
    single = bound_rate(spec, cluster, model)
    return single, max(single, copies_rate(spec, cluster, model, eff))


class Simulator:
    """Runs one policy over one trace; see the module docstring."""

    def __init__(
        self,
        policy: Policy,
        trace: Sequence[TraceJob],
        cluster: ClusterView,
        model: ThroughputModel,
        config: SimConfig | None = None,
        *,
        progress: Callable[[float], None] | None = None,
        on_round: Callable[[RoundState, RoundDecision], None] | None = None,
    ) -> None:
        self.policy = policy
        self._on_round = on_round
        self.cluster = cluster
        self.model = model
        config = config or SimConfig()
        if forks_every_job(policy) and not config.fork_all:
            # The policy's setting is every job forked (see forks_every_job).
            config = replace(config, fork_all=True)
        self.config = config
        self._progress = progress
        ids = [job.id for job in trace]
        if len(set(ids)) != len(ids):
            raise ValueError("trace has duplicate job ids")
        if not trace:
            raise ValueError("trace has no jobs")
        totals = resolve_iterations(trace, cluster, model)
        over = self.config.limit_overestimate
        self._jobs = [
            _Job(spec, total, time_limit(spec, total, cluster, model, over))
            for spec, total in sorted(
                zip(trace, totals, strict=True), key=lambda p: (p[0].arrival_s, p[0].id)
            )
        ]
        self._types = {gpu.slot: gpu.type for gpu in cluster.usable_gpus()}
        self._capacity = cluster.capacity_by_type()
        # (job type, GPU type) -> speed relative to the job type's slowest type, lazily.
        self._speed_weight: dict[str, float] = {}
        self._total_gpus = cluster.num_gpus
        self._bound_rates: dict[tuple[str, int, frozenset[str]], tuple[float, float]] = {}
        self._contention = 0.0  # integral of max(1, GPU demand / GPUs) over time so far
        if self._total_gpus == 0:
            raise ValueError("the cluster has no usable GPUs")

    # --------------------------------------------------------------------- helpers
    def _service_weight(self, job_type: str, gpu_type: str) -> float:
        """Speed of ``job_type`` on ``gpu_type`` relative to its slowest type here."""
        key = f"{job_type}\x00{gpu_type}"
        cached = self._speed_weight.get(key)
        if cached is None:
            rates = [self.model.throughput(job_type, t, 1) for t in self.cluster.gpu_types]
            slowest = min((r for r in rates if r > 0), default=0.0)
            mine = self.model.throughput(job_type, gpu_type, 1)
            cached = mine / slowest if slowest > 0 else 1.0
            self._speed_weight[key] = cached
        return cached

    def _first_view(self, job: _Job) -> JobView:
        """The job's view in the first round it is shown (later ones derive from it)."""
        spec = job.spec
        job.view = JobView(
            id=spec.id,
            job_type=spec.job_type,
            num_gpus=spec.num_gpus,
            total_iterations=job.total,
            iterations_done=job.done,
            batch_size=spec.batch_size,
            priority=spec.priority,
            allowed_gpu_types=spec.allowed_gpu_types,
            preemptible=spec.preemptible,
            shareable=spec.shareable,
            forkable=spec.forkable or self.config.fork_all,
            arrival_time=spec.arrival_s,
            attained_service=job.attained,
            gpu_seconds_by_type=MappingProxyType(dict(job.gpu_seconds)),
            current=job.current,
            user=spec.user,
            run_seconds=job.run_s,
            # What a move costs here: the simulated restart overhead.
            restart_s=self.config.overhead_s,
            time_limit_s=job.limit_s,
            predicted_iterations=spec.submitted_iterations,
        )
        return job.view

    def _view(self, job: _Job) -> JobView:
        """The job's view now, for a job that ran or stopped since it was last shown (or
        was never shown); kept until it runs or stops again."""
        seen = job.seen
        if seen is None:
            return self._first_view(job)
        # Its last view, progressed.
        job.view = seen.progressed(
            iterations_done=job.done,
            attained_service=job.attained,
            gpu_seconds_by_type=MappingProxyType(dict(job.gpu_seconds)),
            run_seconds=job.run_s,
            current=job.current,
        )
        return job.view

    def _starts_none(self, active: list[_Job], check: StartsNone) -> bool:
        """Whether the policy says (:class:`StartsNone`) that its plan would leave every job
        where it is, some job waiting and some running, given what is free now."""
        free = dict(self._capacity)
        waiting: list[JobView] = []
        for job in active:
            current = job.current
            if current is None:
                view = job.view
                waiting.append(view if view is not None else self._view(job))
            else:
                for gpu_type, count, _ in self._type_counts(job, current):
                    free[gpu_type] -= count
        # With nothing running the round is decided, so that a stall names its reasons.
        return bool(waiting) and len(waiting) < len(active) and check.starts_none(waiting, free)

    def _type_counts(self, job: _Job, alloc: Allocation) -> tuple[tuple[str, int, float], ...]:
        """(GPU type, GPUs of it, service weight) for the job's allocation, cached."""
        cached = job.type_counts
        if cached is not None and cached[0] is alloc:
            return cached[1]
        counts: dict[str, int] = {}
        for slot in alloc.slots:
            gpu_type = self._types[slot]
            counts[gpu_type] = counts.get(gpu_type, 0) + 1
        info = tuple((t, n, self._service_weight(job.spec.job_type, t)) for t, n in counts.items())
        job.type_counts = (alloc, info)
        return info

    def _rates(
        self, job: _Job, alloc: Allocation, plan: Plan, by_id: dict[int, _Job]
    ) -> tuple[float, float, int | None]:
        """(rate while sharing or alone, rate alone, sharing partner or None)."""
        spec = job.spec
        partner_id = alloc.shared_with
        partner_alloc = plan.get(partner_id) if partner_id is not None else None
        cached = job.alone_rate
        if cached is not None and cached[0] is alloc:
            alone = cached[1]
        else:
            if self.config.gavel_compat and alloc.num_copies == 1 and not alloc.folded:
                gpu_type = self._types[alloc.slots[0]]
                alone = compat_throughput(self.model, spec.job_type, gpu_type, alloc.num_gpus)
            else:
                alone = allocation_throughput(self.model, self.cluster, spec.job_type, alloc)
            job.alone_rate = (alloc, alone)
        if alloc.num_copies > 1:
            rate = alone * self.config.copy_efficiency
            return rate, rate, None
        if (
            partner_id is not None
            and partner_alloc is not None
            and partner_alloc.shared_with == spec.id
        ):
            partner = by_id[partner_id]
            gpu_type = self._types[alloc.slots[0]]
            pair = self.model.colocated(
                spec.job_type, partner.spec.job_type, gpu_type, alloc.num_gpus
            )
            shared = min(pair[0], alone) if pair is not None else alone / 2.0
            return shared, alone, partner_id
        return alone, alone, None

    def _carry_stretch(
        self,
        active: list[_Job],
        by_id: dict[int, _Job],
        now: float,
        round_index: int,
        next_arrival_s: float,
    ) -> list[RoundRecord]:
        """Run the carried rounds from ``now`` on in which nothing can change: no job
        arrives (none before ``next_arrival_s``) and none finishes. Each running job's
        progress is summed round by round as the general loop sums it, so every figure is
        the same to the last bit; what that loop does per job and round (rates, pieces,
        plan and view bookkeeping) is done once for the stretch. Returns the rounds'
        records, none when the next round needs the general loop (a job may finish in it,
        one shares its GPUs or makes no progress)."""
        round_s = self.config.round_s
        plan = Plan({job.spec.id: job.current for job in active if job.current is not None})
        if len(plan.allocations) != len(active):
            return []
        rates: list[float] = []
        # No job runs for much longer than its remaining work at its rate.
        longest = float(_STRETCH_MAX_ROUNDS)
        for job in active:
            rate, _, partner = self._rates(job, plan.allocations[job.spec.id], plan, by_id)
            if partner is not None or not rate > 0:
                return []
            rates.append(rate)
            longest = min(longest, (job.total - job.done) / (rate * round_s) + 2.0)
        starts = [now]
        start = now
        while len(starts) < longest:
            start = start + round_s
            if start >= next_arrival_s:
                break
            starts.append(start)
        for job, rate in zip(active, rates, strict=True):
            remaining = job.total - job.done
            # With two rounds' margin rounding cannot make the job finish in the stretch;
            # nearer its end, its rounds are checked as the general loop checks them.
            if remaining / (rate * round_s) - 2.0 >= len(starts):
                continue
            total, done = job.total, job.done
            for index, start in enumerate(starts):
                if start + (total - done) / rate <= start + round_s:
                    del starts[index:]
                    break
                done = min(total, done + rate * ((start + round_s) - start))
            if not starts:
                return []
        # Each round's length as the general loop computes it (round end minus start).
        held_per_round = [(s + round_s) - s for s in starts]
        for job, rate in zip(active, rates, strict=True):
            if job.view is not None:
                job.seen = job.view
            job.view = None
            alloc = plan.allocations[job.spec.id]
            counts = self._type_counts(job, alloc)
            total, done, run_s, attained = job.total, job.done, job.run_s, job.attained
            seconds = job.gpu_seconds
            if len(counts) == 1:
                ((gpu_type, count, weight),) = counts
                used = seconds.get(gpu_type, 0.0)
                for held in held_per_round:
                    done = min(total, done + rate * held)
                    run_s += held
                    used += held * count
                    attained += held * count * weight
                seconds[gpu_type] = used
            else:
                for held in held_per_round:
                    done = min(total, done + rate * held)
                    run_s += held
                    for gpu_type, count, weight in counts:
                        seconds[gpu_type] = seconds.get(gpu_type, 0.0) + held * count
                        attained += held * count * weight
            job.done, job.run_s, job.attained = done, run_s, attained
        busy_by_type: dict[str, int] = {}
        for job in active:
            assert job.current is not None
            for gpu_type, count, _ in self._type_counts(job, job.current):
                busy_by_type[gpu_type] = busy_by_type.get(gpu_type, 0) + count
        demand = max(1.0, sum(job.spec.num_gpus for job in active) / self._total_gpus)
        # (busy GPU-seconds, GPU-seconds by user) per round length, summed in the general
        # loop's order; the length is the same in nearly every round.
        sums: dict[float, tuple[float, dict[str, float]]] = {}
        records: list[RoundRecord] = []
        for index, (start, held) in enumerate(zip(starts, held_per_round, strict=True)):
            found = sums.get(held)
            if found is None:
                busy_seconds = 0.0
                by_user: dict[str, float] = {}
                for job in active:
                    gpus = plan.allocations[job.spec.id].num_gpus
                    by_user[job.spec.user] = by_user.get(job.spec.user, 0.0) + held * gpus
                    busy_seconds += held * gpus
                found = sums[held] = (busy_seconds, by_user)
            stop = start + round_s
            self._contention += demand * (stop - start)
            records.append(
                RoundRecord(
                    round_index + index,
                    start,
                    stop,
                    0.0,
                    dict(busy_by_type),
                    len(active),
                    len(active),
                    found[0],
                    dict(found[1]),
                    {},
                )
            )
        return records

    @staticmethod
    def _advance(job: _Job, begin: float, pieces: list[tuple[float, float]]) -> tuple[float, float]:
        """Progress ``job`` from ``begin`` through rate ``pieces`` (until, rate).

        Returns (time the job stops holding its GPUs this round, iterations done). Sets
        ``job.finish`` at the exact time the last iteration completes.
        """
        remaining = job.total - job.done
        finish, progress = _run_pieces(remaining, begin, pieces)
        if finish is not None:
            job.done = job.total
            job.finish = finish
            return finish, remaining
        job.done = min(job.total, job.done + progress)
        return pieces[-1][0], progress

    # ------------------------------------------------------------------------ run
    def run(self) -> SimResult:
        with young_collections_rarer():
            return self._run()

    def _run(self) -> SimResult:
        cfg = self.config
        jobs = self._jobs
        by_id = {job.spec.id: job for job in jobs}
        pending = list(jobs)  # sorted by arrival; consumed from the front
        next_arrival = 0
        active: list[_Job] = []
        # GPUs the active jobs ask for, kept as jobs come and go (a sum of whole numbers,
        # the same in any order).
        asked = 0
        rounds: list[RoundRecord] = []
        segments: list[Segment] = []
        now = jobs[0].spec.arrival_s
        finished = 0
        fallbacks = 0
        isolated_rounds = 0
        isolated_jobs: set[int] = set()
        completed: tuple[CompletedJob, ...] = ()
        rules = RoundRules(
            min_migration_gain=cfg.min_migration_gain,
            pay_restart=cfg.pay_restart,
            hold_moves=not cfg.gavel_compat,
            # The daemon's actions, tasks and waiting reasons only for an observer that
            # looks at the decisions; the run itself needs the placements.
            actions=self._on_round is not None,
        )
        idle_rounds = 0
        round_index = 0
        # Each user's decayed GPU-seconds as of `usage_at` (fair share).
        usage: dict[str, float] = {}
        usage_at = now
        half_life = cfg.fair_share.half_life_s if cfg.fair_share is not None else 1.0
        # A settled round (every active job placed in the last one, none arrived or left
        # since) is carried over without deciding it, for a policy that declares its plan
        # would keep every job where it is then (see stable_when_settled). Rounds observed
        # through on_round, fair share and learning policies are always decided.
        may_carry = (
            stable_when_settled(self.policy)
            and not learns(self.policy)
            and self._on_round is None
            and cfg.fair_share is None
        )
        # Jobs that completed since the last plan do not unsettle a round for a policy that
        # declares its plan the same then (see stable_after_departures).
        departures_carry = may_carry and stable_after_departures(self.policy)
        # A round in which the policy can tell it would start nobody and move nobody (see
        # StartsNone) is carried over too, under the same conditions.
        starts_none = (
            self.policy
            if isinstance(self.policy, StartsNone)
            and not learns(self.policy)
            and self._on_round is None
            and cfg.fair_share is None
            else None
        )
        settled = False
        # Carried rounds in which no job finishes are run as one stretch (_carry_stretch),
        # unless each piece of work is recorded or rounds follow Gavel's whole iterations.
        may_stretch = not cfg.record_segments and not cfg.gavel_compat
        while finished < len(jobs):
            arrived = False
            while next_arrival < len(pending) and pending[next_arrival].spec.arrival_s <= now:
                admitted = pending[next_arrival]
                # Holds the running total at admission until the job finishes.
                admitted.contention_integral = self._contention
                admitted.admitted_at = now
                active.append(admitted)
                asked += admitted.spec.num_gpus
                next_arrival += 1
                arrived = True
            if not active:
                now = pending[next_arrival].spec.arrival_s
                continue
            carry = may_carry and settled and not arrived and (not completed or departures_carry)
            if carry and may_stretch:
                upcoming = (
                    pending[next_arrival].spec.arrival_s
                    if next_arrival < len(pending)
                    else math.inf
                )
                carried = self._carry_stretch(active, by_id, now, round_index, upcoming)
                if carried:
                    rounds.extend(carried)
                    for _ in carried:
                        if self._progress is not None:
                            self._progress(finished / len(jobs))
                    round_index += len(carried)
                    now = carried[-1].end_s
                    idle_rounds = 0
                    continue
            if not carry and starts_none is not None and idle_rounds == 0:
                # After a round without progress every round is decided (a stall quotes
                # the policy's reasons).
                started = time.perf_counter()
                carry = self._starts_none(active, starts_none)
                check_ms = (time.perf_counter() - started) * 1000.0
            else:
                check_ms = 0.0
            if carry:
                # Carried over: every job keeps its placement, as the policy would decide.
                started = time.perf_counter()
                plan = Plan({job.spec.id: job.current for job in active if job.current is not None})
                plan_ms = check_ms + (time.perf_counter() - started) * 1000.0
                settled = len(plan.allocations) == len(active)
            else:
                views: list[JobView] = []
                for job in active:
                    # A job that neither ran nor was stopped since the last round looks
                    # the same.
                    view = job.view
                    views.append(view if view is not None else self._view(job))
                snapshot = Snapshot(
                    self.cluster,
                    tuple(views),
                    round_index,
                    cfg.round_s,
                    self.model,
                )
                if usage:
                    decay = decay_factor(now - usage_at, half_life)
                    usage = {u: v * decay for u, v in usage.items()}
                usage_at = now
                state = RoundState(
                    snapshot, now, completed=completed, fair_share=cfg.fair_share, usage=usage
                )
                completed = ()
                started = time.perf_counter()
                decision = decide_round(state, self.policy, rules)
                plan_ms = check_ms + (time.perf_counter() - started) * 1000.0
                if decision.fallback:
                    fallbacks += 1
                    if cfg.validate_plans:
                        self._refuse(decision, round_index, now)
                if decision.isolated:
                    isolated_rounds += 1
                    isolated_jobs.update(decision.isolated)
                    if cfg.validate_plans:
                        job_id, exc = min(decision.isolated.items())
                        raise SimulationError(
                            f"policy {self.policy.name!r} failed on job {job_id} in round "
                            f"{round_index} at t={now:.0f}s: {exc!r}"
                        ) from exc
                if decision.learn_errors and cfg.validate_plans:
                    exc = decision.learn_errors[0]
                    raise SimulationError(
                        f"policy {self.policy.name!r} failed to learn from a completed job in "
                        f"round {round_index} at t={now:.0f}s: {exc!r}"
                    ) from exc
                if self._on_round is not None:
                    self._on_round(state, decision)
                # What runs this round: the plan as the round carried it out (hysteresis kept
                # some jobs where they were), with the policy's reasons for the others.
                plan = Plan(decision.placements, decision.plan.reasons)
                settled = (
                    not decision.fallback
                    and not decision.isolated
                    and len(plan.allocations) == len(active)
                )
            round_end = now + cfg.round_s
            demand = max(1.0, asked / self._total_gpus)
            busy_until: dict[GpuSlot, float] = {}  # only for GPUs shared by two jobs
            busy_by_type: dict[str, int] = {}
            busy_seconds = 0.0
            by_user: dict[str, float] = {}
            last_finish = now
            compat_stop = now
            any_progress = False
            any_finished = False
            allocations = plan.allocations
            # Work out every placed job's start and rates before anyone progresses, so a
            # sharing partner's finish time is computed from the round's starting state.
            placed: list[tuple[_Job, Allocation, float, float, float, int | None]] = []
            shared_end: dict[int, float] = {}
            for job_id, alloc in allocations.items():
                job = by_id[job_id]
                current = job.current
                restarted = current is None or (current is not alloc and current != alloc)
                cached = job.alone_rate
                if (
                    cached is not None
                    and cached[0] is alloc
                    and alloc.shared_with is None
                    and alloc.num_copies == 1
                ):
                    # What _rates gives a job alone on its last round's allocation.
                    shared_rate = alone_rate = cached[1]
                    partner = None
                else:
                    shared_rate, alone_rate, partner = self._rates(job, alloc, plan, by_id)
                begin = now + (cfg.overhead_s if restarted else 0.0)
                placed.append((job, alloc, begin, shared_rate, alone_rate, partner))
                if partner is not None and shared_rate > 0:
                    shared_end[job_id] = begin + (job.total - job.done) / shared_rate
            waiting = len(active) > len(allocations)
            if cfg.early_rounds and waiting:
                # The daemon asks for a round as soon as a job's exit frees GPUs while jobs
                # wait (Settings.early_rounds): the plan holds only until the first finish.
                finishes = [
                    _run_pieces(
                        job.total - job.done,
                        begin,
                        _pieces(shared_rate, alone_rate, partner, shared_end, round_end),
                    )[0]
                    for job, _, begin, shared_rate, alone_rate, partner in placed
                ]
                first = min((f for f in finishes if f is not None), default=math.inf)
                round_end = min(round_end, first + cfg.early_round_delay_s)
            # Every job the plan leaves out waits; with none waiting, none is stopped.
            for job in active if waiting else ():
                if job.current is not None and job.spec.id not in allocations:
                    job.preemptions += 1
                    job.view = None
                    job.current = None
            for job, alloc, begin, shared_rate, alone_rate, partner in placed:
                if job.view is not None:  # none built in a carried-over round
                    job.seen = job.view
                job.view = None
                old = job.current
                restarted = old is None or (old is not alloc and old != alloc)
                if old is not None and restarted:
                    job.migrations += 1
                job.current = alloc
                if job.start is None:
                    job.start = now
                if alloc.num_copies > 1:
                    job.used_copies = True
                if partner is None and not cfg.gavel_compat:
                    # One rate all round: _advance over a single piece, without building it.
                    remaining = job.total - job.done
                    end = round_end
                    progress = 0.0
                    if begin < round_end and shared_rate > 0:
                        needed = remaining / shared_rate
                        if begin + needed <= round_end:
                            end = begin + needed
                            progress = remaining
                            job.finish = end
                        else:
                            progress = shared_rate * (round_end - begin)
                    job.done = (
                        job.total if job.finish is not None else min(job.total, job.done + progress)
                    )
                elif cfg.gavel_compat and partner is None and shared_rate > 0:
                    # Whole iterations only, counted exactly; the lease ends when they are
                    # done.
                    remaining = job.total - job.done
                    progress = round_iterations(shared_rate, remaining, cfg.round_s)
                    end = begin + progress / shared_rate
                    if lease_fails(progress, alloc.num_gpus):
                        progress = 0.0
                        job.failed_leases += 1
                        if job.failed_leases >= MAX_FAILED_LEASES:
                            job.failed = True
                            job.finish = end
                    elif progress >= remaining:
                        job.failed_leases = 0
                        job.done = job.total
                        job.finish = end
                    else:
                        job.failed_leases = 0
                        job.done += progress
                else:
                    # Piecewise rates: shared until the partner finishes, then alone.
                    pieces = _pieces(shared_rate, alone_rate, partner, shared_end, round_end)
                    end, progress = self._advance(job, begin, pieces)
                compat_stop = max(compat_stop, end)
                held = end - now
                job.run_s += held
                by_user[job.spec.user] = by_user.get(job.spec.user, 0.0) + held * alloc.num_gpus
                type_counts = job.type_counts
                counts = (
                    type_counts[1]
                    if type_counts is not None and type_counts[0] is alloc
                    else self._type_counts(job, alloc)
                )
                for gpu_type, count, weight in counts:
                    job.gpu_seconds[gpu_type] = job.gpu_seconds.get(gpu_type, 0.0) + held * count
                    job.attained += held * count * weight
                    if partner is None:
                        busy_by_type[gpu_type] = busy_by_type.get(gpu_type, 0) + count
                if partner is None:
                    busy_seconds += held * alloc.num_gpus
                else:
                    for slot in alloc.slots:
                        if busy_until.get(slot, now) < end:
                            busy_until[slot] = end
                if job.finish is None:
                    last_finish = round_end
                else:
                    any_finished = True
                    last_finish = max(last_finish, job.finish)
                    # Time-weighted GPU demand over the job's stay (finish-time fairness).
                    job.contention_integral = (
                        self._contention + demand * (job.finish - now) - job.contention_integral
                    )
                if progress > 0:
                    any_progress = True
                if cfg.record_segments and (progress > 0 or held > 0):
                    segments.append(
                        Segment(
                            job.spec.id,
                            round_index,
                            now,
                            end,
                            progress,
                            alloc.slots,
                            alloc.shared_with,
                            alloc.num_copies,
                        )
                    )
            for slot, until in busy_until.items():
                gpu_type = self._types[slot]
                busy_by_type[gpu_type] = busy_by_type.get(gpu_type, 0) + 1
                busy_seconds += until - now
            any_ran = bool(placed)
            round_stop = round_end
            if cfg.early_round_end and any_ran and last_finish < round_end and waiting:
                round_stop = last_finish
            if cfg.gavel_compat:
                # Gavel's next round starts when the last lease of this one ends; with
                # nothing placed, at the next arrival.
                if any_ran:
                    round_stop = compat_stop
                elif next_arrival < len(pending):
                    round_stop = max(now, pending[next_arrival].spec.arrival_s)
                else:
                    round_stop = now
            self._contention += demand * (round_stop - now)
            waiting_by_user: dict[str, int] = {}
            for job in active if waiting else ():
                if job.spec.id not in allocations:
                    user = job.spec.user
                    waiting_by_user[user] = waiting_by_user.get(user, 0) + 1
            if cfg.fair_share is not None:
                # Counted at the round's end: close enough for a half-life of many rounds.
                decay = decay_factor(round_stop - usage_at, half_life)
                usage = {u: v * decay for u, v in usage.items()}
                for user, used in by_user.items():
                    usage[user] = usage.get(user, 0.0) + used
                usage_at = round_stop
            rounds.append(
                RoundRecord(
                    round_index,
                    now,
                    round_stop,
                    plan_ms,
                    busy_by_type,
                    len(active),
                    len(allocations),
                    busy_seconds,
                    by_user,
                    waiting_by_user,
                )
            )
            # Only a job placed this round can have finished in it.
            done_now = [job for job in active if job.finish is not None] if any_finished else []
            if done_now:
                finished += len(done_now)
                notices: list[CompletedJob] = []
                for job in done_now:
                    job.current = None
                    assert job.finish is not None and job.seen is not None
                    notices.append(CompletedJob(job.seen, job.done, job.finish))
                # The next round decided tells the policy, as the daemon's does.
                completed += tuple(notices)
                active = [job for job in active if job.finish is None]
                asked -= sum(job.spec.num_gpus for job in done_now)
            if any_progress:
                idle_rounds = 0
            else:
                idle_rounds += 1
                if idle_rounds >= cfg.stall_rounds and next_arrival >= len(pending):
                    reasons = "; ".join(
                        f"job {j.spec.id}: {plan.reason(j.spec.id) or 'no reason given'}"
                        for j in active[:5]
                    )
                    raise SimulationError(
                        f"policy {self.policy.name!r} made no progress for {idle_rounds} rounds "
                        f"with {len(active)} jobs waiting and no arrivals left: {reasons}"
                    )
            round_index += 1
            if active or next_arrival >= len(pending):
                now = round_stop
            else:
                now = max(round_stop, pending[next_arrival].spec.arrival_s)
            if self._progress is not None:
                self._progress(finished / len(jobs))
        return SimResult(
            policy=self.policy.name,
            jobs=tuple(self._result(job) for job in jobs),
            rounds=tuple(rounds),
            capacity_by_type=self.cluster.capacity_by_type(),
            config=cfg,
            segments=tuple(segments),
            fallback_rounds=fallbacks,
            isolated_rounds=isolated_rounds,
            isolated_jobs=tuple(sorted(isolated_jobs)),
        )

    def _refuse(self, decision: RoundDecision, round_index: int, now: float) -> None:
        """Raise for a round whose plan the policy failed to make (``validate_plans``)."""
        name = self.policy.name
        exc = decision.plan_error
        if exc is not None:
            raise SimulationError(
                f"policy {name!r} failed in round {round_index} at t={now:.0f}s: {exc!r}"
            ) from exc
        raise SimulationError(
            f"policy {name!r}, round {round_index} at t={now:.0f}s: "
            + "; ".join(decision.problems[:5])
        )

    def _result(self, job: _Job) -> JobResult:
        assert job.finish is not None and job.start is not None
        spec = job.spec
        key = (spec.job_type, spec.num_gpus, spec.allowed_gpu_types)
        rates = self._bound_rates.get(key)
        if rates is None:
            rates = _bound_rates(spec, self.cluster, self.model, self.config.copy_efficiency)
            self._bound_rates[key] = rates
        single, copies_speed = rates
        lower = job.total / single if single > 0 else math.inf
        copies = job.total / copies_speed if copies_speed > 0 else math.inf
        lifetime = job.finish - job.admitted_at
        return JobResult(
            id=job.spec.id,
            job_type=job.spec.job_type,
            num_gpus=job.spec.num_gpus,
            user=job.spec.user,
            priority=job.spec.priority,
            arrival_s=job.spec.arrival_s,
            start_s=job.start,
            finish_s=job.finish,
            iterations=job.done,
            preemptions=job.preemptions,
            migrations=job.migrations,
            gpu_seconds=dict(job.gpu_seconds),
            lower_bound_s=lower,
            copies_bound_s=copies,
            contention=job.contention_integral / lifetime if lifetime > 0 else 1.0,
            used_copies=job.used_copies,
            failed=job.failed,
        )


def _pieces(
    shared_rate: float,
    alone_rate: float,
    partner: int | None,
    shared_end: dict[int, float],
    end: float,
) -> list[tuple[float, float]]:
    """A placed job's rates this round as (until, rate): shared until its partner
    finishes, then alone."""
    if partner is None:
        return [(end, shared_rate)]
    until = min(shared_end.get(partner, math.inf), end)
    return [(until, shared_rate), (end, alone_rate)]


def _run_pieces(
    remaining: float, begin: float, pieces: list[tuple[float, float]]
) -> tuple[float | None, float]:
    """A job with ``remaining`` iterations run from ``begin`` through rate ``pieces``
    (until, rate): (when it finishes, None when not within them; iterations done)."""
    t = begin
    progress = 0.0
    for until, rate in pieces:
        if until <= t:
            continue
        if rate > 0:
            needed = (remaining - progress) / rate
            if t + needed <= until:
                return t + needed, remaining
            progress += rate * (until - t)
        t = until
    return None, progress


def simulate(
    policy: Policy,
    trace: Sequence[TraceJob],
    cluster: ClusterView,
    model: ThroughputModel,
    config: SimConfig | None = None,
) -> SimResult:
    """Run ``policy`` over ``trace`` on ``cluster``; see :class:`Simulator`."""
    return Simulator(policy, trace, cluster, model, config).run()
