"""Every policy, as the round runs it, places a job on as few servers as the free GPUs of
one allowed type allow (one server when one has enough), and never lists one GPU twice in
a job's placement.

Copies of one job (hadare) each sit on their own server, and two jobs may share a GPU on
purpose; neither counts against these rules, which look at one copy of one job at a time.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import cache

import pytest

from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policy import available_policies, make_policy
from master.scheduling.round import RoundState, decide_round
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot
from master.sim.data import THROUGHPUTS

JOB_TYPES = (
    "ResNet-18 (batch size 64)",
    "ResNet-50 (batch size 64)",
    "Transformer (batch size 64)",
    "LM (batch size 20)",
)
GPU_TYPES = ("v100", "p100", "k80")


@cache
def model() -> ThroughputModel:
    return ThroughputModel.from_gavel_json(THROUGHPUTS)


def cluster(*servers: tuple[str, str, int]) -> ClusterView:
    return ClusterView(
        tuple(
            NodeView(name, tuple(GpuView(name, i, gpu_type) for i in range(count)))
            for name, gpu_type, count in servers
        )
    )


#: The local cluster of `hctl local up`, two racks of three types, one type unevenly split.
LAYOUTS = (
    (("local-1", "v100", 2), ("local-2", "p100", 2), ("local-3", "k80", 4)),
    tuple((f"{t}-{i}", t, 4) for t in GPU_TYPES for i in range(2)),
    (("a", "v100", 4), ("b", "v100", 3), ("c", "v100", 2), ("d", "k80", 4)),
    # No one server holds a 4-GPU job: it needs two (3+1), or more when spread carelessly.
    (
        ("a", "v100", 3),
        ("b", "v100", 1),
        ("c", "v100", 1),
        ("d", "v100", 1),
        ("e", "k80", 2),
        ("f", "k80", 1),
        ("g", "k80", 1),
    ),
)


def scenario(seed: int) -> Snapshot:
    """A cluster with a few running jobs (each on one server) and a queue of 1- to
    4-GPU jobs, some restricted to two types, some shareable or forkable."""
    rng = random.Random(seed)
    view = cluster(*LAYOUTS[seed % len(LAYOUTS)])
    free = [gpu.slot for gpu in view.usable_gpus()]
    rng.shuffle(free)
    jobs: list[JobView] = []
    for _ in range(rng.randint(1, 3)):
        n = rng.choice((1, 1, 2))
        node = rng.choice(view.nodes).name
        slots = [slot for slot in free if slot.node == node][:n]
        if len(slots) < n:
            continue
        for slot in slots:
            free.remove(slot)
        jobs.append(
            JobView(
                len(jobs) + 1,
                rng.choice(JOB_TYPES),
                n,
                50_000.0,
                iterations_done=1000.0,
                batch_size=64,
                current=Allocation.on(slots, 64),
                arrival_time=float(len(jobs)),
                preemptible=rng.random() < 0.6,
                shareable=rng.random() < 0.5,
                time_limit_s=rng.choice((0.0, 3600.0, 20_000.0)),
                run_seconds=100.0,
            )
        )
    for _ in range(rng.randint(2, 5)):
        two = frozenset(rng.sample(GPU_TYPES, 2))
        jobs.append(
            JobView(
                len(jobs) + 1,
                rng.choice(JOB_TYPES),
                rng.choice((1, 2, 2, 3, 4)),
                rng.choice((5000.0, 50_000.0, 200_000.0)),
                batch_size=64,
                arrival_time=10.0 + len(jobs),
                shareable=rng.random() < 0.5,
                forkable=rng.random() < 0.3,
                allowed_gpu_types=two if rng.random() < 0.2 else frozenset(),
                time_limit_s=rng.choice((0.0, 3600.0, 20_000.0)),
            )
        )
    return Snapshot(view, tuple(jobs), 1, 360.0, model())


def hygiene_problems(
    snapshot: Snapshot, placements: dict[int, Allocation], current: dict[int, Allocation]
) -> list[str]:
    """Each job placed this round (started or moved) whose copy lists a GPU twice, or
    spans more servers than the GPUs of one allowed type that no other job (and none of
    the job's other copies) uses would need."""
    problems: list[str] = []
    usable = snapshot.cluster.usable_gpus()
    for job_id, alloc in placements.items():
        job = snapshot.job(job_id)
        if len(set(alloc.slots)) != len(alloc.slots):
            problems.append(f"job {job_id} lists a GPU twice: {alloc}")
        held = current.get(job_id)
        if held is not None and held.same_placement(alloc):
            continue
        others = {s for j, a in placements.items() if j != job_id for s in a.slots}
        for index, copy in enumerate(alloc.copies):
            if len({slot.node for slot in copy}) < 2:
                continue
            siblings = {s for k, c in enumerate(alloc.copies) if k != index for s in c}
            room = Counter(
                (gpu.node, gpu.type)
                for gpu in usable
                if job.allows(gpu.type) and gpu.slot not in others | siblings
            )
            spans = len({slot.node for slot in copy})
            for gpu_type in sorted({t for _, t in room}):
                sizes = sorted((c for (_, t), c in room.items() if t == gpu_type), reverse=True)
                fewest = next(
                    (k for k in range(1, len(sizes) + 1) if sum(sizes[:k]) >= len(copy)), None
                )
                if fewest is not None and fewest < spans:
                    problems.append(
                        f"job {job_id} spread over {spans} servers ({alloc}) while the free "
                        f"{gpu_type} GPUs hold it on {fewest}"
                    )
    return problems


SEEDS = range(96)


@pytest.mark.parametrize("name", available_policies())
def test_jobs_are_packed_and_never_list_a_gpu_twice(name: str) -> None:
    """On clusters where packing is possible, no round of this policy spreads a job it
    places over more servers than the free GPUs of one allowed type need (one, when one
    server could hold it), nor lists a GPU twice."""
    found: list[str] = []
    for seed in SEEDS:
        snap = scenario(seed)
        current = {job.id: job.current for job in snap.jobs if job.current is not None}
        decision = decide_round(RoundState(snap, 1000.0), make_policy(name))
        assert not decision.fallback, decision.fallback
        placements = dict(decision.placements)
        found += [f"seed {seed}: {p}" for p in hygiene_problems(snap, placements, current)]
    assert not found, "\n".join(found)


class Spreads:
    """A policy that places job 1 exactly as given, however spread."""

    name = "spreads"

    def __init__(self, spread: Allocation) -> None:
        self.spread = spread

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        return Plan({1: self.spread})


def test_the_reported_spread_is_repacked() -> None:
    """The local cluster's case: a 2-GPU job the policy would split over a v100 and a
    p100 while the p100 server has both its GPUs free runs on that server instead."""
    snap = Snapshot(
        cluster(*LAYOUTS[0]),
        (JobView(1, "ResNet-50 (batch size 64)", 2, 200_000.0, batch_size=64),),
        1,
        360.0,
        model(),
    )
    spread = Allocation.on([GpuSlot("local-2", 0), GpuSlot("local-1", 0)], 64)

    decision = decide_round(RoundState(snap, 0.0), Spreads(spread))
    placed = decision.placements[1]
    assert len(placed.nodes) == 1
    assert placed.nodes[0] in {"local-1", "local-2"}


def test_a_job_no_server_holds_goes_on_the_fewest_servers() -> None:
    """A 4-GPU job on free GPUs 3+1+1+1 that a policy spreads one GPU per server runs on
    two servers instead: the 3 and a 1 (the lowest name), each GPU listed once."""
    snap = Snapshot(
        cluster(("a", "v100", 3), ("b", "v100", 1), ("c", "v100", 1), ("d", "v100", 1)),
        (JobView(1, "ResNet-50 (batch size 64)", 4, 200_000.0, batch_size=64),),
        1,
        360.0,
        model(),
    )
    spread = Allocation.on([GpuSlot("a", 0), GpuSlot("b", 0), GpuSlot("c", 0), GpuSlot("d", 0)], 64)

    decision = decide_round(RoundState(snap, 0.0), Spreads(spread))
    placed = decision.placements[1]
    assert sorted(placed.slots) == [
        GpuSlot("a", 0),
        GpuSlot("a", 1),
        GpuSlot("a", 2),
        GpuSlot("b", 0),
    ]


def test_repacking_keeps_the_jobs_gpu_types() -> None:
    """A job allowed only k80 is repacked onto the fewest k80 servers (2+1), never onto
    the v100 server that would hold it whole."""
    snap = Snapshot(
        cluster(("a", "v100", 4), ("e", "k80", 2), ("f", "k80", 1), ("g", "k80", 1)),
        (
            JobView(
                1,
                "ResNet-50 (batch size 64)",
                3,
                200_000.0,
                batch_size=64,
                allowed_gpu_types=frozenset({"k80"}),
            ),
        ),
        1,
        360.0,
        model(),
    )
    spread = Allocation.on([GpuSlot("e", 0), GpuSlot("f", 0), GpuSlot("g", 0)], 64)

    decision = decide_round(RoundState(snap, 0.0), Spreads(spread))
    placed = decision.placements[1]
    assert sorted(placed.slots) == [GpuSlot("e", 0), GpuSlot("e", 1), GpuSlot("f", 0)]
