"""HadarE: Hadar plus forking jobs into copies on otherwise idle servers.

Sultana et al. (IPDPS 2024; arXiv 2503.10918), the enhanced scheduler. After the Hadar
primal-dual pass (see :mod:`master.scheduling.policies.hadar`), GPUs that no job took are
not left idle: every server with free GPUs hosts a *copy* of a job, a second (third, ...)
instance of the job training on its own data shard; at the end of each round the job
tracker averages the copies' parameters and all copies continue from the average. The
job's progress is the sum of its copies' iterations times an efficiency below one
(``copy_efficiency``; model averaging is not exactly synchronous training).

Filling: servers are visited fastest type first; each gets the set of copies whose
utility gains sum highest within its idle GPUs (a copy uses the job's full GPU count on
that one server, so GPUs a set leaves over stay idle; a job has at most one copy per
server, and only jobs whose first copy sits on one server are forked, since each copy
must be one server's group). Only jobs marked forkable get copies: averaging copies changes
how a model trains, so a job runs as copies only when its owner asked for it. The paper
forks every job: ``variant="paper"`` declares that setting (``forks_every_job``), which the
simulator gives by treating every job as forkable and the daemon refuses.
A job that Hadar left waiting may also start there as its first copy. Shareable jobs
still waiting once every idle GPU is used may share a placed job's GPUs by SJF-BSBF's
best-sharing-benefit rule (see :mod:`master.scheduling.policies.sjf_bsbf`). The gain of a copy
of speed ``r`` for a job already at combined speed ``S`` is
``w * round_s / remaining * (e * (S + r) - S_now)`` where ``S_now`` is ``S`` for a job
with one copy and ``e * S`` with several; a copy is only added when that gain is positive.

Churn: in the daemon every move of a running job costs a checkpoint and a restart
(``JobView.restart_s``). A running job keeps its GPUs, with its copies, unless another job
takes one of them or the new placement pays for the restart within the next
``restart_horizon_rounds`` rounds (:func:`master.scheduling.churn.move_pays`); the pass's
price alone never stops a job whose GPUs nobody else gets. Adding copies to a running job
restarts it, so that too must pay. Finally the plan is work-conserving: a job still waiting
while enough idle GPUs of its allowed types remain is placed on them (oldest first, across
servers and types if need be), and a waiting job for which too few are idle says so in its
reason.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from master.scheduling.churn import move_pays
from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._speeds import (
    allocation_on,
    allocation_rate,
    allowed_types,
    current_usable,
    job_rate,
    keep_pinned,
    remaining_seconds,
)
from master.scheduling.policies.hadar import Decision, PrimalDual
from master.scheduling.policies.sjf_bsbf import Sharing, SjfBsbfPolicy, residents_of
from master.scheduling.rates import copy_throughput
from master.scheduling.views import JobView, Snapshot

NAME = "hadare"

VARIANTS = ("default", "paper")


@dataclass(slots=True)
class _Forked:
    job: JobView
    copies: list[tuple[GpuSlot, ...]] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    version: int = 0

    @property
    def nodes(self) -> set[str]:
        return {slot.node for copy in self.copies for slot in copy}


class HadarEPolicy:
    name = NAME

    def __init__(
        self,
        *,
        floor_fraction: float = 0.9,
        mixed: bool = True,
        copy_efficiency: float = 0.9,
        completion_exponent: float = 2.0,
        ceiling: str = "remaining",
        horizon_s: float | None = None,
        exchange: bool = True,
        per_type_bounds: bool = False,
        fork_in_pass: bool = False,
        max_copies: int = 16,
        share: bool = True,
        assumed_pair_slowdown: float = 0.0,
        finish_weight: float = 0.1,
        restart_horizon_rounds: float = 1.0,
        variant: str = "default",
    ) -> None:
        if variant not in VARIANTS:
            raise ValueError(
                f"hadare variant must be one of {', '.join(VARIANTS)}, got {variant!r}"
            )
        self.variant = variant
        if not 0 < copy_efficiency <= 1:
            raise ValueError(f"copy_efficiency must be in (0, 1], got {copy_efficiency}")
        if restart_horizon_rounds < 0:
            raise ValueError(f"restart_horizon_rounds must be >= 0, got {restart_horizon_rounds}")
        self.restart_horizon_rounds = restart_horizon_rounds
        self._mixed = mixed
        self._pass = PrimalDual(
            floor_fraction=floor_fraction,
            mixed=mixed,
            completion_exponent=completion_exponent,
            ceiling=ceiling,
            horizon_s=horizon_s,
            exchange=exchange,
            per_type_bounds=per_type_bounds,
            copy_efficiency=copy_efficiency if fork_in_pass else None,
            max_copies=max_copies,
            finish_weight=finish_weight,
        )
        self.copy_efficiency = copy_efficiency
        self._pass.restart_horizon_rounds = restart_horizon_rounds
        self.last_decisions: dict[int, Decision] = {}
        self._sharer = SjfBsbfPolicy(assumed_pair_slowdown=assumed_pair_slowdown) if share else None
        self.last_sharing: list[Sharing] = []

    @property
    def forks_every_job(self) -> bool:
        """Read by :func:`master.scheduling.policy.forks_every_job`."""
        return self.variant == "paper"

    def _combined(self, rates: list[float]) -> float:
        if not rates:
            return 0.0
        total = sum(rates)
        return total if len(rates) == 1 else total * self.copy_efficiency

    def _gain(self, snapshot: Snapshot, entry: _Forked, rate: float) -> float:
        """Utility gained per GPU by adding a copy of speed ``rate`` to ``entry``."""
        before = self._combined(entry.rates)
        after = self._combined([*entry.rates, rate])
        gained = self._pass.utility(snapshot, entry.job, after)
        if before > 0:
            gained -= self._pass.utility(snapshot, entry.job, before)
        return gained / entry.job.num_gpus

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self._pass.now = now
        cluster = snapshot.cluster
        free = FreeGpus(cluster)
        allocations, rest = keep_pinned(snapshot, free)
        placed, reasons, decisions, _ = self._pass.run(snapshot, free, rest)
        self.last_decisions = decisions
        self._stay(snapshot, free, placed, reasons, rest)
        # Jobs the per-server fill may give GPUs: a waiting job one copy (its ordinary
        # placement), and a forkable one (which asked to run as averaged copies) more.
        forkable: dict[int, _Forked] = {}
        for job in rest:
            if not job.preemptible:
                continue  # placed by the priced pass alone
            alloc = placed.get(job.id)
            if alloc is None:
                forkable[job.id] = _Forked(job)
            elif job.forkable and all(len({s.node for s in copy}) == 1 for copy in alloc.copies):
                forkable[job.id] = _Forked(
                    job,
                    list(alloc.copies),
                    [
                        copy_throughput(snapshot.throughput, cluster, job.job_type, copy, shares)
                        for copy, shares in zip(alloc.copies, alloc.shares_per_copy(), strict=True)
                    ],
                )
        self._fill(snapshot, free, forkable)
        for job_id, entry in forkable.items():
            if not entry.copies:
                continue
            if job_id in placed and len(entry.copies) == placed[job_id].num_copies:
                allocations[job_id] = placed[job_id]
            elif len(entry.copies) == 1:
                if job_id in placed:
                    allocations[job_id] = placed[job_id]
                else:
                    allocations[job_id] = Allocation.on(entry.copies[0], entry.job.batch_size)
                    reasons.pop(job_id, None)
            else:
                allocations[job_id] = Allocation.copies_on(entry.copies, entry.job.batch_size)
                reasons.pop(job_id, None)
        for job_id, alloc in placed.items():
            allocations.setdefault(job_id, alloc)
        self.last_sharing = []
        if self._sharer is not None:
            self._share(snapshot, allocations, reasons)
        self._backfill(snapshot, free, allocations, reasons)
        return Plan(allocations, reasons)

    def _horizon_s(self, snapshot: Snapshot) -> float:
        return snapshot.round_seconds * self.restart_horizon_rounds

    def _pays(self, snapshot: Snapshot, job: JobView, before: float, after: float) -> bool:
        return move_pays(
            before,
            after,
            remaining=job.remaining_iterations,
            restart_s=job.restart_s,
            horizon_s=self._horizon_s(snapshot),
        )

    def _stay(
        self,
        snapshot: Snapshot,
        free: FreeGpus,
        placed: dict[int, Allocation],
        reasons: dict[int, str],
        jobs: list[JobView],
    ) -> None:
        """Running jobs the pass moved (or dropped) keep their GPUs when no other job was
        given any of them and the move does not pay for the job's restart."""
        claimed = {slot: job_id for job_id, alloc in placed.items() for slot in alloc.slots}
        for job in jobs:
            current = job.current
            new = placed.get(job.id)
            if current is None or new == current or not job.preemptible:
                continue
            if new is None and job.restart_s <= 0:
                continue  # stopping it costs nothing: the fill may use its GPUs better
            if not current_usable(snapshot, job):
                continue
            if any(claimed.get(slot, job.id) != job.id for slot in current.slots):
                continue  # another job gets one of its GPUs: the move is forced
            before = allocation_rate(snapshot, job, current)
            after = allocation_rate(snapshot, job, new) if new is not None else 0.0
            if self._pays(snapshot, job, before, after):
                continue
            if new is not None:
                free.release(new.slots)
            if not free.take_slots(current.slots):
                if new is not None and not free.take_slots(new.slots):  # pragma: no cover
                    raise AssertionError("GPUs just released were not free")
                continue
            for slot in new.slots if new is not None else ():
                claimed.pop(slot, None)
            for slot in current.slots:
                claimed[slot] = job.id
            placed[job.id] = current
            reasons.pop(job.id, None)

    def _grow_pays(self, snapshot: Snapshot, entry: _Forked, rate: float) -> bool:
        """Whether a copy of speed ``rate`` may be added to ``entry``: always, unless the job
        runs unchanged now, when the copy restarts it and must pay for that."""
        current = entry.job.current
        if current is None or tuple(entry.copies) != current.copies:
            return True
        before = self._combined(entry.rates)
        after = self._combined([*entry.rates, rate])
        return self._pays(snapshot, entry.job, before, after)

    def _backfill(
        self,
        snapshot: Snapshot,
        free: FreeGpus,
        allocations: dict[int, Allocation],
        reasons: dict[int, str],
    ) -> None:
        """Work conservation: place every job still waiting that the idle GPUs can hold,
        oldest first; a job they cannot hold says how many of its GPUs are idle."""
        waiting = sorted(
            (job for job in snapshot.jobs if job.id not in allocations),
            key=lambda j: (j.arrival_time, j.id),
        )
        for job in waiting:
            types = allowed_types(snapshot, job)
            if not types:
                continue
            prefer = sorted(types, key=lambda t: (-job_rate(snapshot, job, t), t))
            slots = (
                free.take_mixed(job.num_gpus, types, prefer)
                if self._mixed
                else free.take_any(job.num_gpus, types, prefer)
            )
            if slots is not None:
                allocations[job.id] = allocation_on(snapshot, job, slots)
                reasons.pop(job.id, None)
                continue
            idle = sum(free.count(t) for t in types)
            if idle > 0:
                reasons[job.id] = (
                    f"waiting: needs {job.num_gpus} GPUs of its allowed types, "
                    f"{idle} {'is' if idle == 1 else 'are'} idle (hadare)"
                )

    def _share(
        self, snapshot: Snapshot, allocations: dict[int, Allocation], reasons: dict[int, str]
    ) -> None:
        """Let shareable jobs still waiting share a placed job's GPUs, shortest first, when
        SJF-BSBF's rule says the pair's average JCT is lower co-located than one after the
        other (the sharer runs a sub-batch with gradient accumulation)."""
        assert self._sharer is not None
        jobs = {job.id: job for job in snapshot.jobs}
        residents = residents_of(self._sharer, snapshot, jobs, allocations)
        waiting = sorted(
            (jobs[j] for j in reasons if jobs[j].shareable),
            key=lambda j: (remaining_seconds(snapshot, j), j.arrival_time, j.id),
        )
        for job in waiting:
            sharing = self._sharer.best_partner(snapshot, job, residents)
            if sharing is None:
                continue
            self._sharer.pair(snapshot, allocations, jobs, sharing)
            residents.shared.add(sharing.partner)
            reasons.pop(job.id, None)
            self.last_sharing.append(sharing)

    def _fill(self, snapshot: Snapshot, free: FreeGpus, forkable: dict[int, _Forked]) -> None:
        """Give every server's idle GPUs to the copies that together gain most.

        Per server, the set of copies (at most one per job) whose summed utility gain is
        largest within the server's idle GPUs: a small knapsack, since a job's copy needs
        its full GPU count on the server and GPUs left over on a server stay idle. Taking
        copies by gain per GPU instead lets one-GPU copies break up every server a
        whole-server job could have used. Candidates come from lazy heaps per (type, GPU
        count), so a server looks only at the few best jobs of each size.
        """
        cluster = snapshot.cluster
        model = snapshot.throughput
        heaps: dict[tuple[str, int], list[tuple[float, int, int]]] = {}
        for t in free.types():
            for job_id, entry in forkable.items():
                if t not in allowed_types(snapshot, entry.job):
                    continue
                rate = job_rate(snapshot, entry.job, t)
                gain = self._gain(snapshot, entry, rate)
                if gain > 0 and self._grow_pays(snapshot, entry, rate):
                    heaps.setdefault((t, entry.job.num_gpus), []).append(
                        (-gain, job_id, entry.version)
                    )
        for heap in heaps.values():
            heapq.heapify(heap)
        types = sorted(free.types(), key=lambda t: (-model.speed(t), t))
        for t in types:
            for node_name in free.free_on_node(t):
                node = cluster.node(node_name)
                idle = [g.slot for g in node.usable_gpus if g.type == t and free.is_free(g.slot)]
                sizes = sorted(n for (ht, n) in heaps if ht == t)
                chosen = self._pack(heaps, forkable, t, sizes, node_name, len(idle))
                for entry in chosen:
                    n = entry.job.num_gpus
                    slots, idle = tuple(idle[:n]), idle[n:]
                    if not free.take_slots(slots):  # pragma: no cover - idle slots are free
                        raise AssertionError("idle GPUs were not free")
                    entry.copies.append(slots)
                    entry.rates.append(model.throughput(entry.job.job_type, t, n))
                    entry.version += 1
                    if not entry.job.forkable:
                        continue  # placed; it runs as the one copy it asked for
                    for other in allowed_types(snapshot, entry.job):
                        gain = self._gain(snapshot, entry, job_rate(snapshot, entry.job, other))
                        if gain > 0:
                            heapq.heappush(
                                heaps.setdefault((other, n), []),
                                (-gain, entry.job.id, entry.version),
                            )

    @staticmethod
    def _pack(
        heaps: dict[tuple[str, int], list[tuple[float, int, int]]],
        forkable: dict[int, _Forked],
        gpu_type: str,
        sizes: list[int],
        node_name: str,
        room: int,
    ) -> list[_Forked]:
        """The copies for one server's ``room`` idle GPUs with the largest summed gain."""
        items: list[tuple[float, int, _Forked]] = []  # (total gain, GPUs, entry)
        for n in sizes:
            if n > room:
                break
            heap = heaps[(gpu_type, n)]
            aside: list[tuple[float, int, int]] = []
            wanted = room // n
            while heap and wanted:
                item = heapq.heappop(heap)
                neg_gain, job_id, version = item
                entry = forkable[job_id]
                if version != entry.version:
                    continue  # stale: re-pushed with its new gain
                aside.append(item)
                if node_name in entry.nodes:
                    continue
                items.append((-neg_gain * n, n, entry))
                wanted -= 1
            for item in aside:
                heapq.heappush(heap, item)
        if not items:
            return []
        # best[c]: (gain, chosen item indices) using at most c GPUs; items are few.
        best: list[tuple[float, tuple[int, ...]]] = [(0.0, ())] * (room + 1)
        for i, (gain, n, _) in enumerate(items):
            for c in range(room, n - 1, -1):
                candidate = best[c - n][0] + gain
                if candidate > best[c][0]:
                    best[c] = (candidate, (*best[c - n][1], i))
        return [items[i][2] for i in best[room][1]]


def make(
    *,
    floor_fraction: float = 0.9,
    mixed: bool = True,
    copy_efficiency: float = 0.9,
    completion_exponent: float = 2.0,
    ceiling: str = "remaining",
    horizon_s: float | None = None,
    exchange: bool = True,
    per_type_bounds: bool = False,
    fork_in_pass: bool = False,
    max_copies: int = 16,
    share: bool = True,
    assumed_pair_slowdown: float = 0.0,
    finish_weight: float = 0.1,
    restart_horizon_rounds: float = 1.0,
    variant: str = "default",
) -> HadarEPolicy:
    """A HadarE policy. ``variant="paper"`` forks every job, as the paper does (for the
    simulator only; see :func:`master.scheduling.policy.forks_every_job`)."""
    return HadarEPolicy(
        floor_fraction=floor_fraction,
        mixed=mixed,
        copy_efficiency=copy_efficiency,
        completion_exponent=completion_exponent,
        ceiling=ceiling,
        horizon_s=horizon_s,
        exchange=exchange,
        per_type_bounds=per_type_bounds,
        fork_in_pass=fork_in_pass,
        max_copies=max_copies,
        share=share,
        assumed_pair_slowdown=assumed_pair_slowdown,
        finish_weight=finish_weight,
        restart_horizon_rounds=restart_horizon_rounds,
        variant=variant,
    )
