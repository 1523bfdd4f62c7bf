"""Placement helpers: which free GPUs a job gets, consolidated on as few servers as possible.

:class:`FreeGpus` is a small mutable ledger a policy keeps for the duration of one
``plan`` call: it starts from the cluster's usable GPUs, and every ``take`` removes the
GPUs it hands out, so a policy cannot give one GPU to two jobs by accident.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence, Set
from itertools import chain

from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.views import ClusterView, Snapshot


class FreeGpus:
    """Free GPUs per type and node for one planning pass.

    Per type, nodes sit in buckets by their number of free GPUs (each bucket a sorted list
    of node names), so a best-fit choice costs O(GPUs per server), not O(nodes).
    """

    __slots__ = ("_buckets", "_count", "_nodes", "_places", "_types")

    def __init__(self, cluster: ClusterView, used: Iterable[GpuSlot] = ()) -> None:
        self._types = cluster.usable_by_slot()
        self._places = cluster.place_by_slot
        self._fill(cluster, self.grouped(used))

    @classmethod
    def without(cls, cluster: ClusterView, taken: Mapping[tuple[str, str], Set[int]]) -> FreeGpus:
        """The cluster's usable GPUs less ``taken`` (indices by GPU type and node, as
        :meth:`grouped` gives them)."""
        free = object.__new__(cls)
        free._types = cluster.usable_by_slot()
        free._places = cluster.place_by_slot
        free._fill(cluster, taken)
        return free

    def _fill(self, cluster: ClusterView, taken: Mapping[tuple[str, str], Set[int]]) -> None:
        # Built in one pass over the servers, each filed once in its bucket: in name order,
        # so every bucket comes out sorted. Servers with nothing taken share the
        # template's index tuples.
        nodes: dict[str, dict[str, tuple[int, ...]]] = {}
        buckets: dict[str, list[list[str]]] = {}
        count: dict[str, int] = {}
        widths = cluster.free_buckets_template
        for gpu_type, per_node in cluster.free_template.items():
            free_nodes: dict[str, tuple[int, ...]] = {}
            by_free: list[list[str]] = [[] for _ in widths[gpu_type]]
            total = 0
            for name, indices in per_node.items():
                gone = taken.get((gpu_type, name))
                left = tuple(i for i in indices if i not in gone) if gone else indices
                free_nodes[name] = left
                by_free[len(left)].append(name)
                total += len(left)
            nodes[gpu_type] = free_nodes
            buckets[gpu_type] = by_free
            count[gpu_type] = total
        self._nodes = nodes
        self._buckets = buckets
        self._count = count

    def copy(self, types: Collection[str] | None = None) -> FreeGpus:
        """An independent ledger with the same free GPUs; given ``types``, of those types
        only (taking from or discarding GPUs of another type is then an error): a caller
        that takes from a few types need not copy them all."""
        other = object.__new__(FreeGpus)
        other._types = self._types
        other._places = self._places
        other._nodes = {
            t: dict(per_node) for t, per_node in self._nodes.items() if types is None or t in types
        }
        other._buckets = {
            t: [list(b) for b in buckets]
            for t, buckets in self._buckets.items()
            if types is None or t in types
        }
        other._count = {t: c for t, c in self._count.items() if types is None or t in types}
        return other

    def discard(self, slots: Iterable[GpuSlot]) -> None:
        """Mark those of ``slots`` that are free as taken; the others are skipped."""
        self.discard_grouped(self.grouped(slots))

    def grouped(self, slots: Iterable[GpuSlot]) -> dict[tuple[str, str], set[int]]:
        """The usable ones of ``slots`` by (GPU type, node): their indices."""
        by_node: dict[tuple[str, str], set[int]] = {}
        # A ledger is built from every running job's GPUs each round: one lookup per GPU.
        places = self._places
        for slot in slots:
            place = places.get(slot)
            if place is not None:
                indices = by_node.get(place)
                if indices is None:
                    by_node[place] = {slot.index}
                else:
                    indices.add(slot.index)
        return by_node

    def discard_grouped(self, by_node: Mapping[tuple[str, str], Set[int]]) -> None:
        """:meth:`discard` for GPUs already grouped (see :meth:`grouped`)."""
        # Grouped by server, so each server's free count moves once.
        for (gpu_type, node), indices in by_node.items():
            self._drop(gpu_type, node, indices)

    def _drop(self, gpu_type: str, node: str, gone: Set[int]) -> None:
        """Mark the free GPUs ``gone`` of ``node`` as taken (those not free are skipped)."""
        indices = self._nodes[gpu_type].get(node)
        if indices is None:
            return
        left = tuple(i for i in indices if i not in gone)
        if len(left) == len(indices):
            return
        self._nodes[gpu_type][node] = left
        self._move(gpu_type, node, len(indices), len(left))
        self._count[gpu_type] -= len(indices) - len(left)

    def _remove(self, gpu_type: str, slot: GpuSlot) -> bool:
        indices = self._nodes[gpu_type].get(slot.node)
        if indices is None or slot.index not in indices:
            return False
        at = indices.index(slot.index)
        self._nodes[gpu_type][slot.node] = indices[:at] + indices[at + 1 :]
        self._move(gpu_type, slot.node, len(indices), len(indices) - 1)
        self._count[gpu_type] -= 1
        return True

    def count(self, gpu_type: str | None = None) -> int:
        """Free GPUs of ``gpu_type`` (of any type when None)."""
        if gpu_type is None:
            return sum(self._count.values())
        return self._count.get(gpu_type, 0)

    def counts(self) -> dict[str, int]:
        return {t: c for t, c in sorted(self._count.items()) if c > 0}

    def types(self) -> tuple[str, ...]:
        """Types with at least one free GPU, sorted."""
        return tuple(t for t, c in sorted(self._count.items()) if c > 0)

    def free_on_node(self, gpu_type: str) -> dict[str, int]:
        """node -> free GPUs of ``gpu_type`` on it (nodes with none left out)."""
        return {n: len(v) for n, v in sorted(self._nodes.get(gpu_type, {}).items()) if v}

    def max_free_on_one_node(self, gpu_type: str) -> int:
        buckets = self._buckets.get(gpu_type, [])
        for c in range(len(buckets) - 1, 0, -1):
            if buckets[c]:
                return c
        return 0

    def type_of(self, slot: GpuSlot) -> str:
        return self._types[slot].type

    def is_free(self, slot: GpuSlot) -> bool:
        gpu = self._types.get(slot)
        if gpu is None:
            return False
        return slot.index in self._nodes[gpu.type].get(slot.node, ())

    def _move(self, gpu_type: str, name: str, old: int, new: int) -> None:
        buckets = self._buckets[gpu_type]
        bucket = buckets[old]
        del bucket[bisect.bisect_left(bucket, name)]
        bisect.insort(buckets[new], name)

    def _take_from(self, gpu_type: str, name: str, k: int) -> list[GpuSlot]:
        indices = self._nodes[gpu_type][name]
        old = len(indices)
        picked, self._nodes[gpu_type][name] = indices[:k], indices[k:]
        self._move(gpu_type, name, old, old - k)
        self._count[gpu_type] -= k
        return [GpuSlot(name, i) for i in picked]

    def servers_needed(self, n: int, gpu_type: str) -> int | None:
        """How many servers :meth:`take` would spread ``n`` GPUs of ``gpu_type`` over
        (None: too few free); takes nothing."""
        if n < 1:
            raise ValueError(f"cannot take {n} GPUs")
        if self._count.get(gpu_type, 0) < n:
            return None
        sizes = [len(bucket) for bucket in self._buckets[gpu_type]]
        servers = 0
        remaining = n
        while remaining > 0:
            servers += 1
            if any(sizes[c] for c in range(remaining, len(sizes))):
                break
            largest = next(c for c in range(len(sizes) - 1, 0, -1) if sizes[c])
            sizes[largest] -= 1
            remaining -= largest
        return servers

    def fewest_servers(self, n: int, allowed: Iterable[str]) -> int | None:
        """The fewest servers ``n`` GPUs of one type among ``allowed`` need (None: no
        type has ``n`` free); takes nothing."""
        needed = [
            servers
            for t in set(allowed)
            if self.count(t) >= n and (servers := self.servers_needed(n, t)) is not None
        ]
        return min(needed, default=None)

    def packed_type(self, n: int, allowed: Iterable[str] | None = None) -> str | None:
        """The type among ``allowed`` (all when None) whose free GPUs hold ``n`` on
        the fewest servers; ties go to the type with the most free GPUs (spreading work
        over the types, blind to their speeds), then the name. None when no single type
        has ``n`` free."""
        best: tuple[int, int, str] | None = None
        for gpu_type in sorted(set(self._count) if allowed is None else set(allowed)):
            servers = self.servers_needed(n, gpu_type) if self.count(gpu_type) >= n else None
            if servers is None:
                continue
            key = (servers, -self.count(gpu_type), gpu_type)
            if best is None or key < best:
                best = key
        return best[2] if best is not None else None

    def take(self, n: int, gpu_type: str) -> tuple[GpuSlot, ...] | None:
        """``n`` free GPUs of one type on as few servers as possible, or None if too few.

        If one server has ``n`` free, use the one that fits most tightly (fewest free GPUs
        that still suffice, keeping big holes for big jobs); otherwise take whole servers
        with the most free GPUs first and best-fit the remainder. Ties go to the lowest
        node name, so results are deterministic.
        """
        if n < 1:
            raise ValueError(f"cannot take {n} GPUs")
        if self._count.get(gpu_type, 0) < n:
            return None
        buckets = self._buckets[gpu_type]
        slots: list[GpuSlot] = []
        remaining = n
        while remaining > 0:
            fit = next((c for c in range(remaining, len(buckets)) if buckets[c]), None)
            if fit is not None:
                slots.extend(self._take_from(gpu_type, buckets[fit][0], remaining))
                break
            largest = next(c for c in range(len(buckets) - 1, 0, -1) if buckets[c])
            slots.extend(self._take_from(gpu_type, buckets[largest][0], largest))
            remaining -= largest
        return tuple(slots)

    def take_any(
        self, n: int, allowed: Iterable[str] | None = None, prefer: Sequence[str] = ()
    ) -> tuple[GpuSlot, ...] | None:
        """``n`` GPUs of a single type among ``allowed`` (all types when None/empty).

        Types in ``prefer`` are tried first, in that order; then the remaining types from
        the one with the most free GPUs. None when no single type has ``n`` free.
        """
        allowed_set = set(allowed) if allowed else set(self._count)
        order = [t for t in prefer if t in allowed_set]
        rest = sorted((t for t in allowed_set if t not in order), key=lambda t: (-self.count(t), t))
        for gpu_type in [*order, *rest]:
            if self.count(gpu_type) >= n:
                return self.take(n, gpu_type)
        return None

    def take_mixed(
        self, n: int, allowed: Iterable[str] | None = None, prefer: Sequence[str] = ()
    ) -> tuple[GpuSlot, ...] | None:
        """``n`` GPUs, of one type if possible, else spanning types (``prefer`` first)."""
        single = self.take_any(n, allowed, prefer)
        if single is not None:
            return single
        allowed_set = set(allowed) if allowed else set(self._count)
        if sum(self.count(t) for t in allowed_set) < n:
            return None
        order = [t for t in prefer if t in allowed_set]
        order += sorted(
            (t for t in allowed_set if t not in order), key=lambda t: (-self.count(t), t)
        )
        slots: list[GpuSlot] = []
        for gpu_type in order:
            k = min(self.count(gpu_type), n - len(slots))
            if k > 0:
                got = self.take(k, gpu_type)
                if got is None:  # pragma: no cover - count() guarantees enough
                    raise AssertionError("free count out of step")
                slots.extend(got)
            if len(slots) == n:
                break
        return tuple(slots)

    def take_slots(self, slots: Iterable[GpuSlot]) -> bool:
        """Take exactly these GPUs if all are free (all or nothing)."""
        slots = tuple(slots)
        if len(slots) == 1:  # most jobs: nothing to group
            gpu = self._types.get(slots[0])
            return gpu is not None and self._remove(gpu.type, slots[0])
        # Grouped by server, so a job's GPUs on one server move its free count once.
        by_node: dict[tuple[str, str], list[int]] = {}
        for slot in slots:
            gpu = self._types.get(slot)
            if gpu is None:
                return False
            by_node.setdefault((gpu.type, slot.node), []).append(slot.index)
        for (gpu_type, node), wanted in by_node.items():
            indices = self._nodes[gpu_type].get(node, ())
            if len(set(wanted)) != len(wanted) or not set(wanted) <= set(indices):
                return False
        for (gpu_type, node), wanted in by_node.items():
            self._drop(gpu_type, node, set(wanted))
        return True

    def release(self, slots: Iterable[GpuSlot]) -> None:
        """Give GPUs back (a policy that changes its mind within one pass)."""
        for slot in slots:
            gpu = self._types.get(slot)
            if gpu is None:
                raise ValueError(f"GPU {slot} is not a usable GPU of this cluster")
            if self.is_free(slot):
                raise ValueError(f"GPU {slot} is already free")
            indices = self._nodes[gpu.type][slot.node]
            old = len(indices)
            self._nodes[gpu.type][slot.node] = tuple(sorted((*indices, slot.index)))
            self._move(gpu.type, slot.node, old, old + 1)
            self._count[gpu.type] += 1


def num_servers(slots: Iterable[GpuSlot]) -> int:
    """How many distinct servers these GPUs are on."""
    return len({slot.node for slot in slots})


def pack_spread(snapshot: Snapshot, plan: Plan, current: Mapping[int, Allocation]) -> Plan:
    """``plan`` with every job it places anew across servers moved onto as few servers as
    the GPUs no other job in the plan uses allow: one server when one has enough GPUs of
    an allowed type, else the fewest servers any one allowed type's free GPUs need (a
    4-GPU job on free GPUs 3+1+1+1 goes on 2 servers, 3+1, not on 4).

    Policies choose a job's GPU type (or a mix of types) by counts over the whole cluster,
    and a choice that spreads the job can leave fewer servers that hold it unused; a spread
    job runs slower and ties up more servers. Only jobs the plan starts or moves are
    repacked, as one ordinary copy on unshared GPUs (copies, sharing and folding are
    deliberate), and only onto strictly fewer servers than the plan gave. Among the types
    that need the fewest servers, the one the plan chose for the job comes first, else the
    type on which the job runs fastest, then the name; its servers are taken the fullest
    first and the remainder best-fit (:meth:`FreeGpus.take`). The plan's other jobs keep
    exactly their GPUs.

    A plan marked ``packed`` is returned as it is (its policy ran :func:`repack`).
    """
    if plan.packed:
        return plan
    moved = repack(snapshot, plan.allocations, current)
    if not moved:
        return plan
    return Plan({**plan.allocations, **moved}, plan.reasons)


def repack(
    snapshot: Snapshot,
    allocations: Mapping[int, Allocation],
    current: Mapping[int, Allocation],
    free: FreeGpus | None = None,
) -> dict[int, Allocation]:
    """:func:`pack_spread`'s moves: the jobs of ``allocations`` it puts on fewer servers,
    with their new allocations. ``free``: the caller's ledger of the usable GPUs that no
    job of ``allocations`` holds, where no two of them share a GPU; used (and changed)
    instead of building one."""
    moved: dict[int, Allocation] = {}
    usable = snapshot.cluster.usable_by_slot()
    # One ledger for the whole pass, each repacked job's GPUs handed back to it and taken
    # anew: a pass costs O(the cluster + the spread jobs' GPUs), not O(cluster) per job.
    # How many of the plan's jobs use each GPU: a GPU shared with another job stays taken
    # when this one gives it back. Not counted when no two of them share a GPU: that stays
    # so as jobs move onto free GPUs, and every GPU of the plan has one user.
    users: Counter[GpuSlot] | None = None
    for job_id, alloc in allocations.items():
        if (
            alloc.num_copies != 1
            or alloc.shared_with is not None
            or alloc.accumulation_steps != 1
            or len(alloc.nodes) < 2
        ):
            continue
        held = current.get(job_id)
        if held is not None and alloc.same_placement(held):
            continue
        job = snapshot.jobs_by_id().get(job_id)
        if job is None or job.num_gpus != alloc.num_gpus:
            continue
        if free is None:
            taken, disjoint = snapshot.cluster.held_by_place(allocations.values())
            free = FreeGpus.without(snapshot.cluster, taken)
            if not disjoint:
                # An allocation lists each GPU once, so its slots count as they are.
                users = Counter(chain.from_iterable(a.slots for a in allocations.values()))
        mine = [
            slot
            for slot in set(alloc.slots)
            if slot in usable and (users is None or users[slot] == 1)
        ]
        free.release(mine)
        n = job.num_gpus
        servers: dict[str, int] = {}
        for gpu_type in free.types():
            if job.allows(gpu_type):
                needed = free.servers_needed(n, gpu_type)
                if needed is not None and needed < len(alloc.nodes):
                    servers[gpu_type] = needed
        slots = None
        if servers:
            fewest = min(servers.values())
            candidates = [t for t, needed in servers.items() if needed == fewest]
            chosen = {usable[slot].type for slot in alloc.slots if slot in usable}
            speed = {
                t: snapshot.throughput.throughput(job.job_type, t, n, consolidated=fewest == 1)
                for t in candidates
            }
            best = min(candidates, key=lambda t: (t not in chosen, -speed[t], t))
            slots = free.take(n, best)
        if slots is None:
            # Stays where the plan put it.
            free.take_slots(mine)
            continue
        moved[job_id] = Allocation.on(slots, job.batch_size)
        if users is not None:
            users.subtract(set(alloc.slots))
            users.update(slots)
    return moved
