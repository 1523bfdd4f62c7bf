"""Immutable views of the cluster and the jobs, the only input a policy sees.

The daemon builds a :class:`Snapshot` from its database every round; the simulator builds
one from its simulated state. Policies never see the store, the network or the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType

from master.scheduling.churn import DEFAULT_RESTART_S
from master.scheduling.memory import fitting_types, memory_by_type, memory_wait_reason
from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.throughput import ThroughputModel

#: GPUs by (GPU type, node): their indices.
_Places = tuple[tuple[tuple[str, str], frozenset[int]], ...]


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU: where it is, its normalized type (``v100``, ``a100-40gb``) and its health."""

    node: str
    index: int
    type: str
    memory_bytes: int = 0
    healthy: bool = True
    #: ``GpuSlot(node, index)``, built once.
    slot: GpuSlot = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slot", GpuSlot(self.node, self.index))


@dataclass(frozen=True, slots=True)
class NodeView:
    """One worker node. ``schedulable`` is false while the node is drained or suspect."""

    name: str
    gpus: tuple[GpuView, ...]
    schedulable: bool = True

    def __post_init__(self) -> None:
        for gpu in self.gpus:
            if gpu.node != self.name:
                raise ValueError(f"GPU {gpu.node}/{gpu.index} listed under node {self.name}")
        indices = [gpu.index for gpu in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"node {self.name} lists a GPU index twice: {indices}")

    @property
    def usable_gpus(self) -> tuple[GpuView, ...]:
        """GPUs a policy may place work on: healthy, on a schedulable node."""
        if not self.schedulable:
            return ()
        return tuple(gpu for gpu in self.gpus if gpu.healthy)


@dataclass(frozen=True)
class ClusterView:
    """All nodes. Queries consider only usable GPUs (healthy, on schedulable nodes)."""

    nodes: tuple[NodeView, ...]

    def __post_init__(self) -> None:
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node names in cluster: {sorted(names)}")

    @classmethod
    def from_counts(
        cls, counts: Mapping[str, int], gpus_per_server: int = 4, memory_bytes: int = 0
    ) -> ClusterView:
        """A homogeneous-per-node cluster: ``{"v100": 8, "k80": 6}`` with 4 GPUs per server.

        Nodes are named ``<type>-<n>``; a count that is not a multiple of ``gpus_per_server``
        leaves the last node of that type partly filled.
        """
        if gpus_per_server < 1:
            raise ValueError(f"gpus_per_server must be >= 1, got {gpus_per_server}")
        nodes: list[NodeView] = []
        for gpu_type, count in counts.items():
            if count < 0:
                raise ValueError(f"negative GPU count for {gpu_type}: {count}")
            for n, start in enumerate(range(0, count, gpus_per_server)):
                name = f"{gpu_type}-{n:03d}"
                size = min(gpus_per_server, count - start)
                gpus = tuple(GpuView(name, i, gpu_type, memory_bytes) for i in range(size))
                nodes.append(NodeView(name, gpus))
        return cls(tuple(nodes))

    def __deepcopy__(self, memo: dict[int, object]) -> ClusterView:
        return self  # immutable; see JobView.__deepcopy__

    @cached_property
    def _usable(self) -> tuple[GpuView, ...]:
        return tuple(gpu for node in self.nodes for gpu in node.usable_gpus)

    @cached_property
    def _usable_by_slot(self) -> Mapping[GpuSlot, GpuView]:
        return MappingProxyType({gpu.slot: gpu for gpu in self._usable})

    @cached_property
    def _by_type(self) -> Mapping[str, tuple[GpuView, ...]]:
        out: dict[str, list[GpuView]] = {}
        for gpu in self._usable:
            out.setdefault(gpu.type, []).append(gpu)
        return MappingProxyType({t: tuple(g) for t, g in sorted(out.items())})

    @cached_property
    def free_template(self) -> Mapping[str, Mapping[str, tuple[int, ...]]]:
        """type -> node -> sorted usable GPU indices (the starting point of FreeGpus)."""
        out: dict[str, dict[str, list[int]]] = {}
        for gpu in self._usable:
            out.setdefault(gpu.type, {}).setdefault(gpu.node, []).append(gpu.index)
        return MappingProxyType(
            {
                t: MappingProxyType({n: tuple(sorted(ix)) for n, ix in sorted(nodes.items())})
                for t, nodes in sorted(out.items())
            }
        )

    @cached_property
    def free_buckets_template(self) -> Mapping[str, tuple[tuple[str, ...], ...]]:
        """type -> node names (sorted) grouped by their number of usable GPUs of the type."""
        out: dict[str, tuple[tuple[str, ...], ...]] = {}
        for gpu_type, per_node in self.free_template.items():
            widest = max(len(ix) for ix in per_node.values())
            buckets: list[list[str]] = [[] for _ in range(widest + 1)]
            for name, indices in per_node.items():
                buckets[len(indices)].append(name)
            out[gpu_type] = tuple(tuple(b) for b in buckets)
        return MappingProxyType(out)

    @cached_property
    def place_by_slot(self) -> Mapping[GpuSlot, tuple[str, str]]:
        """Usable GPU -> (its type, its node), the key free-GPU ledgers group GPUs by."""
        return MappingProxyType({gpu.slot: (gpu.type, gpu.node) for gpu in self._usable})

    def usable_by_slot(self) -> Mapping[GpuSlot, GpuView]:
        """Usable GPUs by slot."""
        return self._usable_by_slot

    @cached_property
    def _type_counts(self) -> dict[int, tuple[Allocation, tuple[tuple[str, int], ...] | None]]:
        return {}

    def type_counts(self, alloc: Allocation) -> tuple[tuple[str, int], ...] | None:
        """(GPU type, GPUs of it) over the allocation's GPUs in first-use order, or None when
        one of them is not usable. Kept per allocation: a running job's allocation is the
        same object round after round, and every round checks it."""
        key = id(alloc)
        cached = self._type_counts.get(key)
        if cached is not None and cached[0] is alloc:
            return cached[1]
        usable = self._usable_by_slot
        counts: dict[str, int] = {}
        result: tuple[tuple[str, int], ...] | None = None
        for slot in alloc.slots:
            gpu = usable.get(slot)
            if gpu is None:
                break
            counts[gpu.type] = counts.get(gpu.type, 0) + 1
        else:
            result = tuple(counts.items())
        # The entry holds the allocation, so its id is not reused while it is cached.
        self._type_counts[key] = (alloc, result)
        return result

    @cached_property
    def _places(self) -> dict[int, tuple[Allocation, _Places]]:
        return {}

    def places(self, alloc: Allocation) -> _Places:
        """The allocation's usable GPUs grouped by (GPU type, node): their indices, in
        first-use order; its unusable GPUs are left out. Kept per allocation, as
        :meth:`type_counts` is."""
        key = id(alloc)
        cached = self._places.get(key)
        if cached is not None and cached[0] is alloc:
            return cached[1]
        where = self.place_by_slot
        grouped: dict[tuple[str, str], list[int]] = {}
        for slot in alloc.slots:
            place = where.get(slot)
            if place is not None:
                grouped.setdefault(place, []).append(slot.index)
        result = tuple((place, frozenset(indices)) for place, indices in grouped.items())
        # The entry holds the allocation, so its id is not reused while it is cached.
        self._places[key] = (alloc, result)
        return result

    def held_by_place(
        self, allocations: Iterable[Allocation]
    ) -> tuple[dict[tuple[str, str], AbstractSet[int]], bool]:
        """The usable GPUs of ``allocations`` by (GPU type, node): their indices; and
        whether no GPU is in two of them. Free-GPU ledgers start from every running job's
        GPUs each round: read per allocation (see :meth:`places`), not per GPU."""
        by_place: dict[tuple[str, str], AbstractSet[int]] = {}
        # A server's first allocation lends its indices; a second one makes them a set.
        merged: dict[tuple[str, str], set[int]] = {}
        disjoint = True
        for alloc in allocations:
            for place, indices in self.places(alloc):
                held = merged.get(place)
                if held is None:
                    first = by_place.get(place)
                    if first is None:
                        by_place[place] = indices
                        continue
                    held = merged[place] = set(first)
                    by_place[place] = held
                size = len(held)
                held |= indices
                if len(held) != size + len(indices):
                    disjoint = False
        return by_place, disjoint

    @cached_property
    def _by_slot(self) -> Mapping[GpuSlot, GpuView]:
        return MappingProxyType({gpu.slot: gpu for node in self.nodes for gpu in node.gpus})

    @cached_property
    def _node_by_name(self) -> Mapping[str, NodeView]:
        return MappingProxyType({node.name: node for node in self.nodes})

    def usable_gpus(self) -> tuple[GpuView, ...]:
        return self._usable

    def gpu(self, slot: GpuSlot) -> GpuView:
        try:
            return self._by_slot[slot]
        except KeyError:
            raise KeyError(f"no GPU {slot} in the cluster") from None

    def node(self, name: str) -> NodeView:
        try:
            return self._node_by_name[name]
        except KeyError:
            raise KeyError(f"no node {name!r} in the cluster") from None

    @cached_property
    def type_by_slot(self) -> Mapping[GpuSlot, str]:
        """Every GPU's type by slot, usable or not (see :meth:`gpu_type`)."""
        return MappingProxyType({gpu.slot: gpu.type for node in self.nodes for gpu in node.gpus})

    def gpu_type(self, slot: GpuSlot) -> str:
        gpu = self._by_slot.get(slot)
        if gpu is None:
            raise KeyError(f"no GPU {slot} in the cluster")
        return gpu.type

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        """Types with at least one usable GPU, sorted."""
        return tuple(sorted({gpu.type for gpu in self._usable}))

    @property
    def num_gpus(self) -> int:
        return len(self._usable)

    def gpus_by_type(self) -> dict[str, tuple[GpuView, ...]]:
        return dict(self._by_type)

    @cached_property
    def _capacity(self) -> Mapping[str, int]:
        return MappingProxyType({t: len(g) for t, g in self._by_type.items()})

    def capacity_by_type(self) -> dict[str, int]:
        """Usable GPUs per type, sorted by type; a new dict the caller may change."""
        return dict(self._capacity)

    @cached_property
    def memory_by_type(self) -> Mapping[str, int]:
        """Usable type -> memory of its smallest usable GPU in bytes (0: unknown)."""
        gpus = ((gpu.type, gpu.memory_bytes) for gpu in self._usable)
        return MappingProxyType(memory_by_type(gpus))

    def free_gpus(self, used: Iterable[GpuSlot]) -> tuple[GpuView, ...]:
        """Usable GPUs not in ``used``."""
        taken = set(used)
        return tuple(gpu for gpu in self._usable if gpu.slot not in taken)

    def free_by_type(self, used: Iterable[GpuSlot]) -> dict[str, tuple[GpuView, ...]]:
        out: dict[str, list[GpuView]] = {}
        for gpu in self.free_gpus(used):
            out.setdefault(gpu.type, []).append(gpu)
        return {t: tuple(g) for t, g in sorted(out.items())}

    def free_count_by_type(self, used: Iterable[GpuSlot]) -> dict[str, int]:
        return {t: len(g) for t, g in self.free_by_type(used).items()}


@dataclass(frozen=True)
class JobView:
    """One active (pending, running or preempted) job as a policy sees it.

    ``job_type`` is the throughput-model key (e.g. ``"ResNet-18 (batch size 128)"``).
    ``num_gpus`` is the job's scale: its number of data-parallel workers.
    ``attained_service`` is GPU-seconds received, each second weighted by the GPU's speed
    for this job relative to the slowest type (so an hour on a K80 counts less than an hour
    on a V100); ``gpu_seconds_by_type`` holds the raw GPU-seconds per type.
    ``current`` is the allocation the job holds now (None when it is not running).
    ``predicted_iterations`` is an estimate of total iterations when ``total_iterations``
    is only the user's guess (non-clairvoyant policies may ignore both).
    ``forkable`` jobs may run as several averaged copies (HadarE); others never get more
    than the one copy they asked for, since averaging copies changes how a model trains.
    ``memory_gpu_types`` are the GPU types whose memory holds ``memory_bytes_per_gpu``
    (None: not restricted); :class:`Snapshot` sets it from its cluster, and :meth:`allows`
    honours it, so no policy can place a job on GPUs too small for it.
    ``restart_s`` is what one move (migration, resize, new set of copies) costs the job in
    seconds without progress (see :mod:`master.scheduling.churn`).
    ``time_limit_s`` is the run time the job may use in all (``sbatch --time``; 0: no
    limit), counted by ``run_seconds``; a backfilling policy takes it as the job's run time
    estimate.
    """

    id: int
    job_type: str
    num_gpus: int
    total_iterations: float
    iterations_done: float = 0.0
    batch_size: int = 1
    priority: float = 1.0
    allowed_gpu_types: frozenset[str] = frozenset()
    preemptible: bool = True
    migratable: bool = True
    shareable: bool = False
    forkable: bool = False
    memory_bytes_per_gpu: int = 0
    arrival_time: float = 0.0
    attained_service: float = 0.0
    gpu_seconds_by_type: Mapping[str, float] = field(default_factory=dict)
    current: Allocation | None = None
    user: str = ""
    predicted_iterations: float | None = None
    features: Mapping[str, str] = field(default_factory=dict)
    run_seconds: float = 0.0
    memory_gpu_types: frozenset[str] | None = None
    restart_s: float = DEFAULT_RESTART_S
    time_limit_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.time_limit_s >= 0:
            raise ValueError(f"job {self.id}: time_limit_s must be >= 0, got {self.time_limit_s}")
        if self.restart_s < 0:
            raise ValueError(f"job {self.id}: restart_s must be >= 0, got {self.restart_s}")
        if self.num_gpus < 1:
            raise ValueError(f"job {self.id}: num_gpus must be >= 1, got {self.num_gpus}")
        if self.total_iterations <= 0:
            raise ValueError(f"job {self.id}: total_iterations must be > 0")
        if self.priority <= 0:
            raise ValueError(f"job {self.id}: priority must be > 0, got {self.priority}")
        # A read-only proxy is taken as given (the caller hands over a private copy).
        for name in ("gpu_seconds_by_type", "features"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    def progressed(
        self,
        *,
        iterations_done: float,
        attained_service: float,
        gpu_seconds_by_type: MappingProxyType[str, float],
        run_seconds: float,
        current: Allocation | None,
    ) -> JobView:
        """This view after the job ran or stopped: the same job with new progress.

        The fields checked at construction are all kept, so the copy skips the checks: a
        simulator makes one per running job per round.
        """
        view = object.__new__(JobView)
        # A copy of the whole field dict is cheaper than filling the new view's one by one.
        fields = self.__dict__.copy()
        fields["iterations_done"] = iterations_done
        fields["attained_service"] = attained_service
        fields["gpu_seconds_by_type"] = gpu_seconds_by_type
        fields["run_seconds"] = run_seconds
        fields["current"] = current
        object.__setattr__(view, "__dict__", fields)
        return view

    def __deepcopy__(self, memo: dict[int, object]) -> JobView:
        # Immutable: a policy's copy (the round tries copies to find the jobs a failing
        # policy fails on) may share it, and its read-only mappings cannot be copied.
        return self

    @property
    def remaining_iterations(self) -> float:
        return max(0.0, self.total_iterations - self.iterations_done)

    @property
    def is_running(self) -> bool:
        return self.current is not None

    @property
    def restricted(self) -> bool:
        """Whether :meth:`allows` rules out any type (by allow-list or memory)."""
        return self.memory_gpu_types is not None or bool(self.allowed_gpu_types)

    def allows(self, gpu_type: str) -> bool:
        """Whether this job may run on ``gpu_type``: allowed (an empty allow-list allows
        all) and with enough memory per GPU."""
        if self.memory_gpu_types is not None and gpu_type not in self.memory_gpu_types:
            return False
        return not self.allowed_gpu_types or gpu_type in self.allowed_gpu_types


@dataclass(frozen=True)
class Snapshot:
    """Everything a policy needs for one round.

    ``jobs`` are the active jobs (not finished), in a stable order (by id).
    ``throughput`` is an immutable throughput model; the daemon swaps in an updated one
    between rounds.
    """

    cluster: ClusterView
    jobs: tuple[JobView, ...]
    round_number: int
    round_seconds: float
    throughput: ThroughputModel

    def __post_init__(self) -> None:
        ids = [job.id for job in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("snapshot lists a job id twice")
        if self.round_seconds <= 0:
            raise ValueError(f"round_seconds must be > 0, got {self.round_seconds}")
        # Every policy (and the simulator) sees only GPU types with enough memory per job.
        memory = self.cluster.memory_by_type
        jobs = []
        for job in self.jobs:
            if job.memory_bytes_per_gpu <= 0:
                jobs.append(job)  # no memory request: every type fits
                continue
            usable = fitting_types(job.memory_bytes_per_gpu, memory)
            restricted = usable != job.memory_gpu_types
            jobs.append(replace(job, memory_gpu_types=usable) if restricted else job)
        object.__setattr__(self, "jobs", tuple(jobs))

    def __deepcopy__(self, memo: dict[int, object]) -> Snapshot:
        return self  # immutable; see JobView.__deepcopy__

    @cached_property
    def _job_by_id(self) -> Mapping[int, JobView]:
        return MappingProxyType({job.id: job for job in self.jobs})

    def jobs_by_id(self) -> Mapping[int, JobView]:
        """The snapshot's jobs by id (built once)."""
        return self._job_by_id

    def job(self, job_id: int) -> JobView:
        try:
            return self._job_by_id[job_id]
        except KeyError:
            raise KeyError(f"no job {job_id} in the snapshot") from None

    def pending_reason(self, job_id: int, policy_reason: str) -> str:
        """Why a job that got no GPUs waits: ``policy_reason``, unless memory alone keeps
        it waiting (then that), with a note when its memory request rules GPUs out."""
        job = self._job_by_id.get(job_id)
        if job is None or job.memory_bytes_per_gpu <= 0:
            return policy_reason
        memory = memory_wait_reason(
            job.memory_bytes_per_gpu,
            job.num_gpus,
            lambda t: not job.allowed_gpu_types or t in job.allowed_gpu_types,
            self.cluster.capacity_by_type(),
            self.cluster.memory_by_type,
        )
        if memory is None:
            return policy_reason
        reason, alone = memory
        return reason if alone else f"{policy_reason}; {reason}"

    def running_slots(self) -> dict[GpuSlot, list[int]]:
        """GPU -> ids of the jobs currently holding it."""
        used: dict[GpuSlot, list[int]] = {}
        for job in self.jobs:
            if job.current is not None:
                for slot in job.current.slots:
                    used.setdefault(slot, []).append(job.id)
        return used
