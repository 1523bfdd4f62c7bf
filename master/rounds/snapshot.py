"""From the store to the scheduling views: the cluster, the active jobs and what they hold."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from master.jobs.holds import read_holds
from master.jobs.usage import run_seconds
from master.scheduling.churn import DEFAULT_RESTART_S
from master.scheduling.fairshare import FairShareConfig, UserShare, decayed_usage, report
from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.round import CompletedJob, LostLease
from master.scheduling.throughput import ThroughputModel, plausible_rate
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot
from protos.bounds import PRIORITY_MAX, PRIORITY_MIN
from protos.warnsignal import MAX_BEFORE_S
from store import UnitOfWork
from store.domain import Job, Node, Task, ThroughputMeasurement, UsageRecord
from store.job_memo import JobMemo
from store.repositories.counters import ROUND
from store.states import GpuHealth, JobState, NodeState, ProgramKind, TaskState

# Tasks that make up a job's current placement (acknowledged or about to be).
PLACED_STATES = (TaskState.ASSIGNED, TaskState.STARTING, TaskState.RUNNING)


# A command submitted without its amount of work (iterations 0) is planned as a job of this
# many iterations: it never reports progress, so only its length relative to other jobs
# matters to a policy, and a middling one neither favours nor starves it.
UNKNOWN_WORK_ITERATIONS = 1000


def preemptible(job: Job) -> bool:
    """Whether rounds may stop, move, resize or fork the job once it runs.

    Its spec must allow it, and its program must be known to use the runtime helper, which
    resumes from checkpoints. Workloads do; opaque commands do not; a script is known to by
    its first progress report. Until then a script is scheduled like an opaque command:
    placed once (never forked into copies) and left where it started until it exits, since
    stopping a plain script loses all its work and a second copy would redo it alongside.
    An interactive session never is: a person is typing into it.
    """
    spec = job.spec
    if not spec.preemptible or spec.interactive:
        return False
    return spec.program_kind is not ProgramKind.SCRIPT or job.reports_progress


@dataclass
class ReadMemo:
    """What one round's read keeps for the next, so that the next loads and converts only
    what changed: the jobs (:class:`store.job_memo.JobMemo`, checked against the store's
    row versions on every read) and the views of the jobs that hold nothing and never
    ran, each with the job and the restart cost it was built from (a job changed in the
    store comes back from the memo with a new version). Rounds read one at a time;
    the job memo may be shared with other readers."""

    jobs: JobMemo = field(default_factory=JobMemo)
    views: dict[int, tuple[Job, float, JobView]] = field(default_factory=dict)

    def view(self, job: Job, restart_s: float) -> JobView:
        """The view of `job`, holding nothing and with no service received."""
        known = self.views.get(job.id)
        # Same version, same job but for its waiting reason (written without a new
        # version, and no part of a view): each round sets the reasons of the jobs that
        # arrived since the one before.
        if known is not None and known[0].version == job.version and known[1] == restart_s:
            return known[2]
        view = job_view(job, None, restart_s)
        self.views[job.id] = (job, restart_s, view)
        return view


@dataclass(frozen=True)
class RoundInput:
    snapshot: Snapshot
    jobs: Mapping[int, Job]
    current: Mapping[int, Allocation]
    tasks: Mapping[int, tuple[Task, ...]]
    nodes: Mapping[str, Node]
    # Per job, the last-ending lease on an unreachable node not yet over (see lost_leases).
    lost: Mapping[int, LostLease] = field(default_factory=dict)
    # Jobs completed that the policy has not been told about (see completions).
    completed: tuple[CompletedJob, ...] = ()
    # Each user's decayed GPU-seconds (fair share); empty when fair share is off.
    usage: Mapping[str, float] = field(default_factory=dict)


def user_usage(
    uow: UnitOfWork,
    now: datetime,
    half_life_s: float,
    running: Sequence[UsageRecord] | None = None,
) -> dict[str, float]:
    """Each user's GPU-seconds from the usage records, decayed to `now` with
    `half_life_s`: ended attempts and those still holding GPUs (counted up to `now`;
    `running`, when the caller has read them already). Attempts that ended more than 20
    half-lives ago (under a millionth) are not read."""
    since = now - timedelta(seconds=20 * half_life_s)
    records = uow.usage.ended(since=since) + list(
        uow.usage.running() if running is None else running
    )
    return decayed_usage(
        (
            (
                r.user,
                float(r.num_gpus),
                r.started_at.timestamp(),
                (r.ended_at or now).timestamp(),
            )
            for r in records
        ),
        now.timestamp(),
        half_life_s,
    )


def fair_share_report(
    uow: UnitOfWork, config: FairShareConfig, now: datetime
) -> tuple[UserShare, ...]:
    """Each user's share, decayed usage, factor and GPUs held now, as the rounds see them
    (the users with unfinished jobs, and those with usage)."""
    active = {job.user for job in uow.jobs.list_unfinished()}
    held: dict[str, int] = {}
    for record in uow.usage.running():
        held[record.user] = held.get(record.user, 0) + record.num_gpus
    return report(config, user_usage(uow, now, config.half_life_s), active, held)


def lost_leases(
    uow: UnitOfWork,
    nodes: Iterable[Node],
    hold_s: float,
    now: datetime,
    jobs: Mapping[int, Job],
) -> dict[int, LostLease]:
    """Leases that tasks on unreachable nodes may still be running under.

    A worker that cannot hear from the master stops its preemptible tasks when their lease
    ends, then kills them after the grace period. The master does not store when each
    lease ends, but every lease it sent for a task ended at most `hold_s` (lease length,
    grace and a margin) after the task was written off: nothing is sent for a LOST task.
    """
    if hold_s <= 0:
        return {}
    unreachable = [n.name for n in nodes if n.state is NodeState.UNREACHABLE]
    held: dict[int, LostLease] = {}
    since = now - timedelta(seconds=hold_s + MAX_BEFORE_S)
    for task in uow.tasks.lost_on_nodes(unreachable, since):
        if task.finished_at is None:
            continue
        job = jobs.get(task.job_id)
        if job is None:
            continue
        # A job warned before its stop (sbatch --signal) gets SIGTERM only that much later.
        ends = task.finished_at + timedelta(seconds=hold_s + job.spec.warn_before_s)
        if ends <= now:
            continue
        known = held.get(task.job_id)
        if known is None or ends.timestamp() > known.ends_at:
            # An opaque command runs to completion on its worker whatever the lease.
            held[task.job_id] = LostLease(
                task.job_id, task.node, task.lease, ends.timestamp(), job.spec.preemptible
            )
    return held


def completions(uow: UnitOfWork) -> tuple[CompletedJob, ...]:
    """The completed jobs the policy has not been told about, oldest first, each with the
    iterations it ran."""
    notices = uow.memory.completions()
    jobs = uow.jobs.get_many([job_id for job_id, _ in notices])
    return tuple(
        CompletedJob(
            job_view(jobs[job_id], None), float(jobs[job_id].iterations_done), at.timestamp()
        )
        for job_id, at in notices
        if job_id in jobs
    )


def service_received(
    records: Iterable[UsageRecord], now: datetime
) -> dict[int, tuple[dict[str, float], float]]:
    """Per job, the GPU-seconds its attempts received on each GPU type and the seconds it
    ran (:func:`master.jobs.usage.run_seconds`), from the accounting records: what las and hare
    order jobs by, the same figures the simulator keeps."""
    by_job: dict[int, list[UsageRecord]] = defaultdict(list)
    for record in records:
        by_job[record.job_id].append(record)
    out: dict[int, tuple[dict[str, float], float]] = {}
    for job_id, attempts in by_job.items():
        seconds: dict[str, float] = {}
        for record in attempts:
            seconds[record.gpu_type] = seconds.get(record.gpu_type, 0.0) + record.gpu_seconds(now)
        out[job_id] = (seconds, run_seconds(attempts, now))
    return out


def job_view(
    job: Job,
    alloc: Allocation | None,
    restart_s: float = DEFAULT_RESTART_S,
    service: tuple[Mapping[str, float], float] | None = None,
) -> JobView:
    """What a policy sees of a job holding ``alloc`` (None: nothing). ``restart_s`` is what
    a move costs the job until its own cost is measured; ``service``: the GPU-seconds per
    type it received and the seconds it ran (:func:`service_received`)."""
    by_type, run_s = service if service is not None else ({}, 0.0)
    spec = job.spec
    return JobView(
        id=job.id,
        job_type=spec.job_type,
        num_gpus=spec.num_gpus,
        total_iterations=float(spec.iterations or UNKNOWN_WORK_ITERATIONS),
        iterations_done=float(job.iterations_done),
        batch_size=max(1, spec.batch_size),
        # A job stored before priorities were bounded is planned at the nearest bound.
        priority=min(max(spec.priority, PRIORITY_MIN), PRIORITY_MAX),
        allowed_gpu_types=frozenset(spec.allowed_gpu_types),
        preemptible=preemptible(job),
        migratable=preemptible(job),
        shareable=spec.shareable,
        forkable=spec.forkable,
        memory_bytes_per_gpu=spec.gpu_memory_bytes,
        arrival_time=job.submitted_at.timestamp(),
        attained_service=job.attained_service,
        current=alloc,
        user=job.user,
        restart_s=job.restart_s if job.restart_s is not None else restart_s,
        gpu_seconds_by_type=by_type,
        run_seconds=run_s,
        # Already the cluster's default when the job gave none (set at submission).
        time_limit_s=float(spec.time_limit_s),
    )


def with_measurements(
    base: ThroughputModel, measurements: Iterable[ThroughputMeasurement]
) -> ThroughputModel:
    model = base
    for m in measurements:
        # A figure stored before measured rates were bounded counts as never measured.
        if plausible_rate(m.iterations_per_s):
            model = model.observe(m.job_type, m.gpu_type, m.num_gpus, m.iterations_per_s)
    return model


def cluster_view(nodes: Iterable[Node]) -> ClusterView:
    return ClusterView(
        tuple(
            NodeView(
                name=node.name,
                gpus=tuple(
                    GpuView(
                        node=node.name,
                        index=g.index,
                        type=g.type,
                        memory_bytes=g.memory_bytes,
                        healthy=g.health is GpuHealth.HEALTHY,
                    )
                    for g in node.gpus
                ),
                schedulable=node.state is NodeState.READY,
            )
            for node in nodes
        )
    )


def current_allocation(job: Job, tasks: Iterable[Task]) -> Allocation | None:
    """The allocation a running job holds, rebuilt from its newest placement's tasks."""
    placed = [t for t in tasks if t.state in PLACED_STATES]
    if job.state is not JobState.RUNNING or not placed:
        return None
    lease = max(t.lease for t in placed)
    placed = sorted((t for t in placed if t.lease == lease), key=lambda t: t.task_index)
    copies: dict[int, list[Task]] = defaultdict(list)
    for task in placed:
        copies[task.copy_index].append(task)
    slots: list[tuple[GpuSlot, ...]] = []
    shares: list[int] = []
    for index in sorted(copies):
        copy_slots: list[GpuSlot] = []
        for task in copies[index]:
            copy_slots.extend(GpuSlot(task.node, i) for i in task.gpu_indices)
            shares.extend(task.local_batch_sizes or [1] * len(task.gpu_indices))
        slots.append(tuple(copy_slots))
    first = placed[0]
    try:
        return Allocation(
            copies=tuple(slots),
            batch_shares=tuple(shares),
            accumulation_steps=first.accumulation_steps,
            shared_with=first.shared_with_job_id or None,
        )
    except ValueError:
        return None


def read_round_input(
    uow: UnitOfWork,
    base_model: ThroughputModel,
    round_seconds: float,
    *,
    lost_hold_s: float = 0.0,
    now: datetime | None = None,
    restart_s: float = DEFAULT_RESTART_S,
    fair_share: FairShareConfig | None = None,
    memo: ReadMemo | None = None,
) -> RoundInput:
    """The round's views: every unfinished job (those held by a lost lease too: the round
    hides them from the policy), the jobs completed since the last round, and with
    `lost_hold_s` and `now` the leases that may still run on lost nodes
    (:func:`lost_leases`). `restart_s` is what a move costs a job whose cost
    was not measured yet (the `restart_cost_s` setting). With `fair_share` on and `now`,
    each user's decayed usage (:func:`user_usage`). With a `memo` (:class:`ReadMemo`),
    only the jobs changed since its last read are loaded and converted."""
    nodes = uow.nodes.all()
    jobs_memo = memo.jobs if memo is not None else None
    unfinished = uow.jobs.list_unfinished(memo=jobs_memo)
    # Jobs with unmet dependencies and array elements beyond their array's cap are not
    # offered to the policy (nor listed as the round's waiting jobs: HoldEnforcer keeps
    # their reasons).
    held = read_holds(uow, unfinished, jobs_memo).held()
    jobs = [job for job in unfinished if job.id not in held]
    tasks_by_job: dict[int, list[Task]] = defaultdict(list)
    for task in uow.tasks.active():
        tasks_by_job[task.job_id].append(task)
    model = with_measurements(base_model, uow.throughput.all())
    by_id = {j.id: j for j in jobs}
    lost = lost_leases(uow, nodes, lost_hold_s, now, by_id) if now is not None else {}
    # Attempts still running serve both the jobs' service and, with fair share, their
    # users' usage: read once.
    running = uow.usage.running()
    service = service_received(
        [r for r in uow.usage.ended_of_unfinished_jobs() if r.job_id in by_id]
        + [r for r in running if r.job_id in by_id],
        now or datetime.now(UTC),
    )
    current: dict[int, Allocation] = {}
    views: list[JobView] = []
    kept: dict[int, tuple[Job, float, JobView]] = {}
    for job in jobs:
        alloc = current_allocation(job, tasks_by_job.get(job.id, ()))
        if alloc is not None:
            current[job.id] = alloc
        received = service.get(job.id)
        if memo is not None and alloc is None and received is None:
            views.append(memo.view(job, restart_s))
            kept[job.id] = memo.views[job.id]
        else:
            views.append(job_view(job, alloc, restart_s, received))
    if memo is not None:
        # The views of this round's waiting jobs only: those placed or ended are forgotten.
        memo.views = kept
    snapshot = Snapshot(
        cluster=cluster_view(nodes),
        jobs=tuple(views),
        round_number=uow.counters.current(ROUND) + 1,
        round_seconds=round_seconds,
        throughput=model,
    )
    return RoundInput(
        snapshot=snapshot,
        jobs=by_id,
        current=current,
        tasks={k: tuple(v) for k, v in tasks_by_job.items()},
        nodes={n.name: n for n in nodes},
        lost=lost,
        completed=completions(uow),
        usage=(
            user_usage(uow, now, fair_share.half_life_s, running)
            if fair_share is not None and fair_share.enabled and now is not None
            else {}
        ),
    )
