"""What a policy decides for one round: which GPUs each job gets and how it uses them.

An :class:`Allocation` is the placement of one job for the next lease. The GPUs are grouped
per *copy*: an ordinary job has one copy (one torch.distributed group over all its GPUs);
a HadarE-style job runs several independent copies, each on its own node, whose parameters
are averaged at the end of the round. Within a copy each GPU processes a share of the job's
global batch; the shares sum to the global batch, and are proportional to GPU speed when the
copy spans GPU types so that all workers finish an iteration together.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from master.scheduling.memory import fits, format_memory, gpu_memory

if TYPE_CHECKING:
    from master.scheduling.views import GpuView, JobView, Snapshot

K = TypeVar("K")
V = TypeVar("V")


class GpuSlot(NamedTuple):
    """One physical GPU: the node that holds it and its index on that node.

    A named tuple: hashing and comparing are done in C, and planning hashes slots a lot.
    """

    node: str
    index: int  # type: ignore[assignment]  # shadows tuple.index, on purpose

    def __str__(self) -> str:
        return f"{self.node}/{self.index}"


def split_batch(global_batch: int, weights: Sequence[float]) -> tuple[int, ...]:
    """Split ``global_batch`` into integer shares proportional to ``weights``.

    Largest-remainder rounding keeps the sum exact; every share is at least 1 whenever the
    batch has at least one sample per worker, so no worker idles.
    """
    n = len(weights)
    if n == 0:
        raise ValueError("cannot split a batch over zero GPUs")
    if global_batch < n:
        raise ValueError(f"global batch {global_batch} is smaller than the {n} workers")
    if any(w <= 0 for w in weights):
        raise ValueError(f"batch split weights must be positive, got {list(weights)}")
    total = float(sum(weights))
    # Reserve one sample per worker, then share the rest proportionally.
    rest = global_batch - n
    raw = [rest * w / total for w in weights]
    shares = [int(r) for r in raw]
    leftover = rest - sum(shares)
    order = sorted(range(n), key=lambda i: (-(raw[i] - shares[i]), i))
    for i in order[:leftover]:
        shares[i] += 1
    return tuple(s + 1 for s in shares)


@dataclass(frozen=True, slots=True)
class Allocation:
    """The GPUs one job gets for the next lease and how it uses them.

    ``copies`` holds one tuple of slots per copy (one copy for an ordinary job).
    ``batch_shares`` is aligned with :attr:`slots` (copies flattened in order); each copy's
    shares sum to the job's global batch. ``accumulation_steps`` > 1 means each GPU runs its
    share as that many micro-batches: when the job shares its GPUs with ``shared_with`` to fit
    both in memory, otherwise to fold the job's logical workers onto fewer GPUs (see
    :attr:`folded`).
    """

    copies: tuple[tuple[GpuSlot, ...], ...]
    batch_shares: tuple[int, ...]
    accumulation_steps: int = 1
    shared_with: int | None = None
    #: All GPUs of the allocation, copies flattened in order (derived from ``copies``).
    slots: tuple[GpuSlot, ...] = field(init=False, repr=False, compare=False)
    #: Derived once: every round reads them for every running job.
    num_gpus: int = field(init=False, repr=False, compare=False)
    num_copies: int = field(init=False, repr=False, compare=False)
    #: Distinct nodes in first-use order.
    nodes: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.copies or any(not copy for copy in self.copies):
            raise ValueError("an allocation needs at least one GPU in every copy")
        slots = tuple(slot for copy in self.copies for slot in copy)
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "num_gpus", len(slots))
        object.__setattr__(self, "num_copies", len(self.copies))
        object.__setattr__(self, "nodes", tuple(dict.fromkeys(slot.node for slot in slots)))
        if len(set(slots)) != len(slots):
            raise ValueError(f"an allocation lists a GPU twice: {[str(s) for s in slots]}")
        if len(self.batch_shares) != len(slots):
            raise ValueError(
                f"{len(self.batch_shares)} batch shares for {len(slots)} GPUs; need one per GPU"
            )
        if any(share <= 0 for share in self.batch_shares):
            raise ValueError(f"batch shares must be positive, got {self.batch_shares}")
        if self.accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {self.accumulation_steps}")
        sums = {sum(shares) for shares in self.shares_per_copy()}
        if len(sums) != 1:
            raise ValueError(f"every copy must process the same global batch, got {sorted(sums)}")

    @classmethod
    def on(
        cls,
        slots: Sequence[GpuSlot],
        global_batch: int,
        *,
        weights: Sequence[float] | None = None,
        accumulation_steps: int = 1,
        shared_with: int | None = None,
    ) -> Allocation:
        """One copy on ``slots``, the global batch split by ``weights`` (equal by default).

        When the batch is smaller than the number of GPUs (a profile-only batch size) the
        shares are nominal: one sample per GPU is recorded so the allocation stays valid.
        """
        slots = tuple(slots)
        batch = max(global_batch, len(slots))
        w = list(weights) if weights is not None else [1.0] * len(slots)
        return cls(
            copies=(slots,),
            batch_shares=split_batch(batch, w),
            accumulation_steps=accumulation_steps,
            shared_with=shared_with,
        )

    @classmethod
    def copies_on(
        cls,
        groups: Sequence[Sequence[GpuSlot]],
        global_batch: int,
        *,
        weights: Sequence[Sequence[float]] | None = None,
    ) -> Allocation:
        """Several independent copies, one per group of slots (HadarE)."""
        copies = tuple(tuple(g) for g in groups)
        shares: list[int] = []
        batch = max(global_batch, *(len(c) for c in copies))
        for i, copy in enumerate(copies):
            w = list(weights[i]) if weights is not None else [1.0] * len(copy)
            shares.extend(split_batch(batch, w))
        return cls(copies=copies, batch_shares=tuple(shares))

    @property
    def global_batch(self) -> int:
        return sum(self.shares_per_copy()[0])

    def shares_per_copy(self) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        start = 0
        for copy in self.copies:
            out.append(self.batch_shares[start : start + len(copy)])
            start += len(copy)
        return out

    @property
    def folded(self) -> bool:
        """Whether each GPU computes several of the job's logical workers in turn.

        An unshared allocation with ``accumulation_steps`` k > 1 runs the job's W workers on
        W / k GPUs per copy: each GPU processes k workers' micro-batches and accumulates
        their gradients (relaxed fixed-scale synchronization), so the update is the same as
        on W GPUs and an iteration takes about k times as long.
        """
        return self.shared_with is None and self.accumulation_steps > 1

    def folds(self, num_workers: int) -> bool:
        """Whether this is a folded allocation of exactly ``num_workers`` logical workers."""
        return self.folded and all(
            len(copy) * self.accumulation_steps == num_workers for copy in self.copies
        )

    def slots_on(self, node: str) -> tuple[GpuSlot, ...]:
        return tuple(slot for slot in self.slots if slot.node == node)

    def same_placement(self, other: Allocation) -> bool:
        """Same GPUs in the same copies (batch shares and accumulation may differ)."""
        return tuple(frozenset(c) for c in self.copies) == tuple(frozenset(c) for c in other.copies)

    def __str__(self) -> str:
        groups = ["+".join(str(s) for s in copy) for copy in self.copies]
        text = " | ".join(groups)
        if self.shared_with is not None:
            text += f" (shared with {self.shared_with}, x{self.accumulation_steps})"
        return text


def _frozen_map(items: Mapping[K, V] | None) -> Mapping[K, V]:
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True)
class Plan:
    """A policy's decision for one round: job id -> allocation; absent jobs get nothing.

    ``reasons`` explains, per job, why it waits or why it got what it got (shown by
    ``hctl show``), e.g. ``"waiting: no free v100"``.

    ``packed``: the policy has already put every job it places anew on as few servers as
    :func:`master.scheduling.placement.pack_spread` would (it ran it on this plan), so the
    round need not run it again. A plan made from another loses the mark.
    """

    allocations: Mapping[int, Allocation] = field(default_factory=dict)
    reasons: Mapping[int, str] = field(default_factory=dict)
    packed: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allocations", _frozen_map(self.allocations))
        object.__setattr__(self, "reasons", _frozen_map(self.reasons))

    def __deepcopy__(self, memo: dict[int, object]) -> Plan:
        return self  # immutable; its read-only mappings cannot be copied

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.allocations

    def __iter__(self) -> Iterator[int]:
        return iter(self.allocations)

    def __len__(self) -> int:
        return len(self.allocations)

    def get(self, job_id: int) -> Allocation | None:
        return self.allocations.get(job_id)

    def reason(self, job_id: int) -> str | None:
        return self.reasons.get(job_id)

    def used_slots(self) -> dict[GpuSlot, list[int]]:
        """GPU -> ids of the jobs placed on it (more than one only when shared)."""
        used: dict[GpuSlot, list[int]] = {}
        for job_id, alloc in self.allocations.items():
            for slot in alloc.slots:
                used.setdefault(slot, []).append(job_id)
        return used

    def violations(self, snapshot: Snapshot, checked: Plan | None = None) -> list[str]:
        """Everything that makes this plan unexecutable on ``snapshot`` (empty when valid).

        ``checked``: a plan already found valid on ``snapshot``; a job with the very same
        allocation in it passed the checks of its own GPUs there, so only the checks
        between jobs are made for it again.

        Checked: jobs exist and are active; GPUs exist, are healthy and schedulable, are
        of an allowed type and have the memory the job asks for; a job gets exactly its GPU
        count per copy (or that count divided by its accumulation steps when folded); a GPU
        holds two jobs only when both allocations name each other in ``shared_with`` and both
        jobs are shareable; only forkable jobs run as copies, each on its own node; a running
        job that is not
        preemptible keeps its GPUs.
        """
        problems: list[str] = []
        jobs = snapshot.jobs_by_id()
        usable = snapshot.cluster.usable_by_slot()
        owner: dict[GpuSlot, int] = {}
        collisions: dict[GpuSlot, list[int]] = {}
        type_counts = snapshot.cluster.type_counts
        known = checked.allocations if checked is not None else {}
        for job_id, alloc in self.allocations.items():
            if known.get(job_id) is alloc:
                continue
            job = jobs.get(job_id)
            if job is None:
                problems.append(f"job {job_id} is planned but not in the snapshot")
                continue
            # One copy of the job's size, the common case, needs none of the copy checks.
            if alloc.num_copies != 1 or alloc.num_gpus != job.num_gpus:
                problems.extend(_copy_problems(job, alloc))
            counts = type_counts(alloc)
            if counts is None or (job.restricted and not all(job.allows(t) for t, _ in counts)):
                problems.extend(_slot_problems(job, alloc, usable))
        # Which GPUs more than one job holds, looked for only when some GPU repeats.
        slots = [slot for alloc in self.allocations.values() for slot in alloc.slots]
        if len(set(slots)) != len(slots):
            for job_id, alloc in self.allocations.items():
                if job_id not in jobs:
                    continue
                for slot in alloc.slots:
                    first = owner.setdefault(slot, job_id)
                    if first != job_id:
                        collisions.setdefault(slot, [first]).append(job_id)
        for job in snapshot.jobs:
            if job.current is not None and not job.preemptible:
                planned = self.allocations.get(job.id)
                if planned is None or not planned.same_placement(job.current):
                    problems.append(
                        f"job {job.id} is not preemptible but the plan moves or stops it"
                    )
        for slot, holders in collisions.items():
            if len(holders) > 2:
                problems.append(f"GPU {slot} given to {len(holders)} jobs: {sorted(holders)}")
                continue
            a, b = holders
            ja, jb = jobs.get(a), jobs.get(b)
            mutual = self.allocations[a].shared_with == b and self.allocations[b].shared_with == a
            if not mutual:
                problems.append(f"GPU {slot} given to jobs {a} and {b} without sharing")
            elif ja is not None and jb is not None and not (ja.shareable and jb.shareable):
                problems.append(f"GPU {slot} shared by {a} and {b}, not both shareable")
        return problems


def _copy_problems(job: JobView, alloc: Allocation) -> list[str]:
    """What is wrong with ``alloc``'s copies for ``job``: their sizes, whether the job may
    run as copies, and that each copy sits on its own node."""
    problems: list[str] = []
    job_id = job.id
    for copy in alloc.copies:
        if len(copy) != job.num_gpus and not alloc.folds(job.num_gpus):
            problems.append(f"job {job_id} asked for {job.num_gpus} GPUs, a copy got {len(copy)}")
    if alloc.num_copies > 1 and not job.forkable:
        problems.append(f"job {job_id} runs as {alloc.num_copies} copies but is not forkable")
    if len(alloc.copies) > 1 and len(set(alloc.nodes)) != alloc.num_copies:
        copy_nodes = [sorted({s.node for s in c}) for c in alloc.copies]
        if any(len(n) != 1 for n in copy_nodes) or len({n[0] for n in copy_nodes}) != len(
            copy_nodes
        ):
            problems.append(f"job {job_id}: copies must each sit on their own node")
    return problems


def _slot_problems(job: JobView, alloc: Allocation, usable: Mapping[GpuSlot, GpuView]) -> list[str]:
    """What is wrong with the GPUs ``alloc`` gives ``job``: unusable or not allowed."""
    problems: list[str] = []
    for slot in alloc.slots:
        gpu = usable.get(slot)
        if gpu is None:
            problems.append(f"job {job.id} placed on unusable or unknown GPU {slot}")
        elif not job.allows(gpu.type):
            memory = gpu_memory(gpu.type, gpu.memory_bytes)
            why = (
                f"needs {format_memory(job.memory_bytes_per_gpu)} per GPU, "
                f"{gpu.type} ({slot}) has {format_memory(memory)}"
                if not fits(job.memory_bytes_per_gpu, memory)
                else f"may not run on {gpu.type} ({slot})"
            )
            problems.append(f"job {job.id} {why}")
    return problems
