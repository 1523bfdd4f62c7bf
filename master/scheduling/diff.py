"""Turn a plan into the actions that change what runs now, avoiding churn.

``diff`` compares the placements running now with the plan for the next round and
yields one action per job that runs now or will run: ``start`` (was not running),
``stop`` (runs now, not in the plan), ``migrate`` (same number of GPUs, different GPUs),
``resize`` (different number of GPUs or copies, or a different batch split or
accumulation), and ``extend`` (unchanged: its lease is simply renewed).

Hysteresis: a running job that the plan merely moves to other GPUs with the same count
keeps its current GPUs when the move's predicted throughput gain is below
``min_migration_gain`` and none of its current GPUs is given to another job. With
``pay_restart``, a running job that the plan migrates or resizes (other GPUs, another
count, other copies) while none of its current GPUs is given to another job also keeps
them when the move does not win back the job's restart cost within
``restart_horizon_rounds`` rounds (:func:`master.scheduling.churn.move_pays`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from master.scheduling.churn import move_pays
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.rates import allocation_throughput
from master.scheduling.views import Snapshot


class ActionKind(enum.StrEnum):
    START = "start"
    STOP = "stop"
    MIGRATE = "migrate"
    RESIZE = "resize"
    EXTEND = "extend"


@dataclass(frozen=True, slots=True)
class Action:
    """One change for one job. ``allocation`` is the target (None for ``stop``)."""

    kind: ActionKind
    job_id: int
    allocation: Allocation | None
    previous: Allocation | None
    reason: str = ""
    # For a stop: the jobs the plan puts on the GPUs this job gives up, by id.
    displaced_by: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Hysteresis:
    """How much better a move must be before a running job is moved.

    ``min_migration_gain``: relative throughput gain (0.1 = 10 %) a migration must bring.
    Only applies to non-forced moves: a move is forced when another job takes one of the
    running job's GPUs, or the job's current GPUs are no longer usable.
    """

    min_migration_gain: float = 0.1
    #: A non-forced move (migration or resize) must also pay for the job's restart
    #: (``JobView.restart_s``) within this many rounds.
    pay_restart: bool = True
    restart_horizon_rounds: float = 1.0

    def __post_init__(self) -> None:
        if self.min_migration_gain < 0:
            raise ValueError("min_migration_gain must be >= 0")
        if self.restart_horizon_rounds < 0:
            raise ValueError("restart_horizon_rounds must be >= 0")


def preemption_reason(action: Action, round_number: int) -> str:
    """Why a stopped job lost its GPUs, for its history: "preempted in round 42 for job 17"."""
    text = f"preempted in round {round_number}"
    if action.displaced_by:
        ids = ", ".join(str(job_id) for job_id in action.displaced_by)
        text += f" for job{'s' if len(action.displaced_by) > 1 else ''} {ids}"
    if action.reason:
        text += f" ({action.reason})"
    return text


def diff(
    current: Mapping[int, Allocation],
    plan: Plan,
    *,
    snapshot: Snapshot | None = None,
    hysteresis: Hysteresis | None = None,
) -> list[Action]:
    """Actions to go from ``current`` (job id -> running allocation) to ``plan``.

    Hysteresis needs ``snapshot`` (for job types, GPU types and the throughput model);
    without it every planned move is carried out. Actions are ordered stops first, then
    migrations and resizes, then starts, then extends; by job id within a kind, so the
    GPUs a start needs are freed by earlier actions.
    """
    planned = held_back(current, plan, snapshot=snapshot, hysteresis=hysteresis)
    # One list per rank (stops, moves, starts, extends), each filled in job id order: the
    # order a sort by (rank, id) gives.
    stops: list[Action] = []
    moves: list[Action] = []
    starts: list[Action] = []
    extends: list[Action] = []
    reasons = plan.reasons
    holders: dict[GpuSlot, list[int]] | None = None  # built on the first stop
    # Bound once: the loop runs for every job of every round.
    extended = extends.append
    get_old, get_new, get_reason = current.get, planned.get, reasons.get
    for job_id in sorted(current.keys() | planned.keys()):
        old = get_old(job_id)
        new = get_new(job_id)
        reason = get_reason(job_id) or ""
        if old is not None and new is not None and (old is new or old == new):
            # Most jobs of a round: unchanged, their leases renewed.
            extended(Action(ActionKind.EXTEND, job_id, new, old, reason))
        elif old is None and new is not None:
            starts.append(Action(ActionKind.START, job_id, new, None, reason))
        elif old is not None and new is None:
            if holders is None:
                holders = {}
                for other, alloc in planned.items():
                    for slot in alloc.slots:
                        holders.setdefault(slot, []).append(other)
            takers = tuple(sorted({o for slot in old.slots for o in holders.get(slot, ())}))
            stops.append(Action(ActionKind.STOP, job_id, None, old, reason, takers))
        elif old is not None and new is not None:
            if (
                old.num_gpus == new.num_gpus
                and old.num_copies == new.num_copies
                and not old.same_placement(new)
            ):
                moves.append(Action(ActionKind.MIGRATE, job_id, new, old, reason))
            else:
                moves.append(Action(ActionKind.RESIZE, job_id, new, old, reason))
    return [*stops, *moves, *starts, *extends]


def held_back(
    current: Mapping[int, Allocation],
    plan: Plan,
    *,
    snapshot: Snapshot | None = None,
    hysteresis: Hysteresis | None = None,
) -> dict[int, Allocation]:
    """What each job holds after :func:`diff`'s actions: the plan's allocations, with the
    moves hysteresis holds back (see :func:`diff`) left where they are."""
    planned: dict[int, Allocation] = dict(plan.allocations)
    if snapshot is not None:
        _apply_hysteresis(current, planned, snapshot, hysteresis or Hysteresis())
    return planned


def _apply_hysteresis(
    current: Mapping[int, Allocation],
    planned: dict[int, Allocation],
    snapshot: Snapshot,
    hysteresis: Hysteresis,
) -> None:
    moved: list[int] = []
    for job_id, old in current.items():
        new = planned.get(job_id)
        if new is None or old is new or old == new or old.same_placement(new):
            continue
        moved.append(job_id)
    if not moved:
        return
    # Sorted only now: in most rounds nothing moves.
    moved.sort()
    usable = snapshot.cluster.usable_by_slot()
    claimed: dict[GpuSlot, int] = {}
    for job_id, alloc in planned.items():
        for slot in alloc.slots:
            claimed[slot] = job_id
    for job_id in moved:
        old = current[job_id]
        new = planned[job_id]
        migration = old.num_gpus == new.num_gpus and old.num_copies == new.num_copies
        if not migration and not hysteresis.pay_restart:
            continue
        if any(slot not in usable for slot in old.slots):
            continue
        if any(claimed.get(slot, job_id) != job_id for slot in old.slots):
            continue
        try:
            job = snapshot.job(job_id)
        except KeyError:
            continue
        model, cluster = snapshot.throughput, snapshot.cluster
        before = allocation_throughput(model, cluster, job.job_type, old)
        after = allocation_throughput(model, cluster, job.job_type, new)
        small = migration and before > 0 and after < before * (1 + hysteresis.min_migration_gain)
        unpaid = hysteresis.pay_restart and not move_pays(
            before,
            after,
            remaining=job.remaining_iterations,
            restart_s=job.restart_s,
            horizon_s=snapshot.round_seconds * hysteresis.restart_horizon_rounds,
        )
        if small or unpaid:
            for slot in new.slots:
                claimed.pop(slot, None)
            for slot in old.slots:
                claimed[slot] = job_id
            planned[job_id] = old
