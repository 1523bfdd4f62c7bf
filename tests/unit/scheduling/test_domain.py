"""Domain types: views, allocations, plans, placement, diffs and the throughput model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from master.scheduling.diff import ActionKind, Hysteresis, diff, preemption_reason
from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan, split_batch
from master.scheduling.policy import UnknownPolicyError, available_policies, make_policy
from master.scheduling.rates import allocation_throughput, speed_weights
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot
from tests.unit.sim.gavel_data import THROUGHPUTS

GAVEL = THROUGHPUTS
R18 = "ResNet-18 (batch size 128)"


def small_model() -> ThroughputModel:
    return ThroughputModel(
        {
            ("a", "v100", 1, True): 10.0,
            ("a", "k80", 1, True): 2.0,
            ("a", "v100", 2, True): 18.0,
            ("a", "v100", 2, False): 15.0,
            ("a", "k80", 2, False): 3.5,
        },
        {("a", "b", "v100", 1): (6.0, 4.0), ("a", "c", "v100", 1): (0.0, 0.0)},
    )


def test_split_batch_sums_exactly_and_follows_weights() -> None:
    """Shares sum to the batch, are proportional to the weights, and never zero."""
    assert split_batch(128, [1, 1, 1]) == (43, 43, 42)
    shares = split_batch(100, [3.0, 1.0])
    assert sum(shares) == 100 and shares[0] > 2.5 * shares[1]
    assert split_batch(4, [100.0, 1.0, 1.0, 1.0]) == (1, 1, 1, 1)
    with pytest.raises(ValueError, match="smaller than"):
        split_batch(2, [1, 1, 1])


def test_allocation_validates_and_groups_copies() -> None:
    """An allocation rejects duplicate GPUs and mismatched shares; copies stay identifiable."""
    a, b, c = GpuSlot("n1", 0), GpuSlot("n1", 1), GpuSlot("n2", 0)
    alloc = Allocation.copies_on([[a, b], [c, GpuSlot("n2", 1)]], 64)
    assert alloc.num_copies == 2 and alloc.num_gpus == 4
    assert alloc.copies[1] == (c, GpuSlot("n2", 1))
    assert alloc.shares_per_copy() == [(32, 32), (32, 32)] and alloc.global_batch == 64
    with pytest.raises(ValueError, match="twice"):
        Allocation(((a, a),), (1, 1))
    with pytest.raises(ValueError, match="one per GPU"):
        Allocation(((a, b),), (2,))
    with pytest.raises(ValueError, match="same global batch"):
        Allocation(((a,), (b,)), (2, 3))


def test_cluster_from_counts_and_free_queries() -> None:
    """Counts become 4-GPU servers per type; a 0 count adds nothing; drained nodes are unusable."""
    cluster = ClusterView.from_counts({"v100": 6, "p100": 0, "k80": 4})
    assert cluster.capacity_by_type() == {"k80": 4, "v100": 6}
    assert [len(n.gpus) for n in cluster.nodes] == [4, 2, 4]
    used = [GpuSlot("v100-000", 0)]
    assert cluster.free_count_by_type(used) == {"k80": 4, "v100": 5}
    drained = ClusterView(
        (
            NodeView("x", (GpuView("x", 0, "v100"),), schedulable=False),
            NodeView("y", (GpuView("y", 0, "v100", healthy=False), GpuView("y", 1, "k80"))),
        )
    )
    assert [g.slot for g in drained.usable_gpus()] == [GpuSlot("y", 1)]
    with pytest.raises(ValueError, match="listed under"):
        NodeView("x", (GpuView("y", 0, "v100"),))


def test_free_gpus_consolidates_and_never_double_books() -> None:
    """take() prefers one server (best fit), else fewest servers; taken GPUs are gone."""
    cluster = ClusterView.from_counts({"v100": 10}, gpus_per_server=4)
    free = FreeGpus(cluster, used=[GpuSlot("v100-000", 0)])
    two = free.take(2, "v100")
    assert two is not None and {s.node for s in two} == {"v100-002"}  # the 2-GPU server fits
    three = free.take(3, "v100")
    assert three is not None and {s.node for s in three} == {"v100-000"}
    five = free.take(4, "v100")
    assert five is not None and {s.node for s in five} == {"v100-001"}
    assert free.take(1, "v100") is None
    free.release(two)
    assert free.count("v100") == 2
    assert free.take_slots(two) and not free.take_slots(two)


def test_cluster_type_counts_of_an_allocation_follow_its_gpus() -> None:
    """An allocation's GPU types are counted in first-use order, None when one of its GPUs
    is not usable; a cluster answers for each allocation object, not for an equal one it
    saw before on other GPUs."""
    cluster = ClusterView(
        (
            NodeView("a", (GpuView("a", 0, "v100"), GpuView("a", 1, "k80"))),
            NodeView("b", (GpuView("b", 0, "v100", healthy=False),)),
        )
    )
    mixed = Allocation.on([GpuSlot("a", 1), GpuSlot("a", 0)], 8)
    assert cluster.type_counts(mixed) == (("k80", 1), ("v100", 1))
    assert cluster.type_counts(mixed) == (("k80", 1), ("v100", 1))
    assert cluster.type_counts(Allocation.on([GpuSlot("b", 0)], 8)) is None
    assert cluster.type_counts(Allocation.on([GpuSlot("c", 0)], 8)) is None
    assert cluster.type_counts(Allocation.on([GpuSlot("a", 0)], 8)) == (("v100", 1),)


def test_free_gpus_copy_is_independent_and_discards_only_free_gpus() -> None:
    """A copied ledger takes GPUs without touching the original; discarding GPUs already
    taken, or unknown, changes nothing; a copy plus discards equals a ledger built with
    those GPUs used."""
    cluster = ClusterView.from_counts({"v100": 8, "k80": 4}, gpus_per_server=4)
    free = FreeGpus(cluster, used=[GpuSlot("v100-000", 0)])
    copy = free.copy()
    assert copy.take(4, "v100") is not None
    assert free.count("v100") == 7 and copy.count("v100") == 3
    gone = [GpuSlot("v100-000", 0), GpuSlot("v100-001", 2), GpuSlot("zz", 0)]
    again = free.copy()
    again.discard(gone)
    built = FreeGpus(cluster, used=gone)
    assert again.counts() == built.counts() == {"k80": 4, "v100": 6}
    assert again.take(3, "v100") == built.take(3, "v100")


def test_free_gpus_copy_of_some_types_takes_as_the_whole_ledger_would() -> None:
    """A copy of some types holds only their free GPUs, takes from them exactly as a copy
    of the whole ledger would, and leaves the original as it was."""
    cluster = ClusterView.from_counts({"v100": 8, "k80": 8}, gpus_per_server=4)
    free = FreeGpus(cluster, used=[GpuSlot("v100-000", 0), GpuSlot("v100-001", 1)])
    part, whole = free.copy(["v100"]), free.copy()
    assert part.counts() == {"v100": 6}
    assert part.take(3, "v100") == whole.take(3, "v100")
    assert part.take(1, "k80") is None
    assert free.counts() == {"k80": 8, "v100": 6}


def test_free_gpus_mixed_and_preferences() -> None:
    """take_any respects allowed types and preference order; take_mixed spans types."""
    cluster = ClusterView.from_counts({"v100": 2, "k80": 4})
    free = FreeGpus(cluster)
    got = free.take_any(2, prefer=["v100"])
    assert got is not None and all(s.node.startswith("v100") for s in got)
    assert free.take_any(2, allowed={"v100"}) is None
    mixed = FreeGpus(cluster).take_mixed(6)
    assert mixed is not None and len(set(mixed)) == 6


def job(job_id: int, n: int = 1, **kw: object) -> JobView:
    return JobView(id=job_id, job_type="a", num_gpus=n, total_iterations=100, **kw)  # type: ignore[arg-type]


def test_plan_violations_catch_double_booking_and_wrong_counts() -> None:
    """violations() names GPUs given twice without sharing, wrong GPU counts and bad types."""
    cluster = ClusterView.from_counts({"v100": 4, "k80": 4})
    snap = Snapshot(
        cluster,
        (job(1), job(2), job(3, 2, allowed_gpu_types=frozenset({"v100"}))),
        0,
        360.0,
        small_model(),
    )
    s = GpuSlot("v100-000", 0)
    bad = Plan(
        {
            1: Allocation.on([s], 8),
            2: Allocation.on([s], 8),
            3: Allocation.on([GpuSlot("k80-000", 0)], 8),
        }
    )
    problems = "\n".join(bad.violations(snap))
    assert "without sharing" in problems
    assert "asked for 2" in problems and "may not run on k80" in problems
    shared = Plan(
        {1: Allocation.on([s], 8, shared_with=2), 2: Allocation.on([s], 8, shared_with=1)}
    )
    assert "not both shareable" in "\n".join(shared.violations(snap))
    ok = Plan({1: Allocation.on([s], 8)}, {2: "waiting: no free v100"})
    assert ok.violations(snap) == [] and ok.reason(2) == "waiting: no free v100"


def test_throughput_sources_in_order() -> None:
    """Measurements beat the profile, the profile beats the prior; observe() is copy-on-write."""
    model = small_model()
    assert model.estimate("a", "v100").source == "profile"
    assert model.throughput("a", "v100", 2, consolidated=False) == 15.0
    assert model.throughput("a", "k80", 2) == 3.5  # no consolidated figure: spread one
    measured = model.observe("a", "v100", 1, 20.0).observe("a", "v100", 1, 10.0)
    assert measured.estimate("a", "v100").source == "measured"
    assert measured.throughput("a", "v100") == pytest.approx(0.3 * 10 + 0.7 * 20)
    assert model.throughput("a", "v100") == 10.0
    # Unknown GPU type for a known job: scaled by relative speed from a profiled type.
    a100 = model.estimate("a", "a100-40gb")
    assert a100.source == "prior" and a100.iterations_per_s > 10.0
    unknown = model.estimate("zzz", "v100", 1)
    assert unknown.source == "prior" and unknown.iterations_per_s == pytest.approx(3.3)
    assert model.colocated("a", "b", "v100") == (6.0, 4.0)
    assert model.colocated("b", "a", "v100") == (4.0, 6.0)
    assert model.colocated("a", "c", "v100") is None
    assert model.best_type("a", ["k80", "v100"]) == "v100"


def test_reads_gavel_throughputs_as_is() -> None:
    """Gavel's JSON loads: per-scale figures, spread variants and co-location pairs."""
    model = ThroughputModel.from_gavel_json(GAVEL)
    data = json.loads(GAVEL.read_text())
    assert model.throughput(R18, "v100", 1) == data["v100"][f"('{R18}', 1)"]["null"]
    key = "('ResNet-50 (batch size 64)', 4)"
    assert (
        model.throughput("ResNet-50 (batch size 64)", "v100", 4, consolidated=False)
        == data["v100_unconsolidated"][key]["null"]
    )
    pair = model.colocated("ResNet-18 (batch size 64)", R18, "v100", 1)
    assert pair == tuple(data["v100"]["('ResNet-18 (batch size 64)', 1)"][f"('{R18}', 1)"])


def test_bad_throughput_files_fail_clearly(tmp_path: Path) -> None:
    """A malformed key or file is reported with the file name."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"v100": {"not a tuple": {"null": 1.0}}}))
    with pytest.raises(ValueError, match=r"t\.json.*bad throughput key"):
        ThroughputModel.from_gavel_json(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        ThroughputModel.from_gavel_json(path)


def test_mixed_type_copy_runs_at_slowest_unless_split_by_speed() -> None:
    """A copy over v100+k80 runs at k80 pace with an even split, faster with a speed split."""
    cluster = ClusterView.from_counts({"v100": 1, "k80": 1})
    model = small_model()
    slots = [GpuSlot("v100-000", 0), GpuSlot("k80-000", 0)]
    even = allocation_throughput(model, cluster, "a", Allocation.on(slots, 64))
    assert even == pytest.approx(3.5)
    weighted = Allocation.on(slots, 640, weights=speed_weights(model, cluster, "a", slots))
    assert allocation_throughput(model, cluster, "a", weighted) == pytest.approx(
        (15.0 + 3.5) / 2, rel=0.05
    )


def test_diff_kinds_and_hysteresis() -> None:
    """diff yields start/stop/migrate/resize/extend; small-gain migrations are suppressed."""
    cluster = ClusterView.from_counts({"v100": 4, "k80": 4})
    snap = Snapshot(cluster, tuple(job(i) for i in range(1, 6)), 3, 360.0, small_model())
    v = [GpuSlot("v100-000", i) for i in range(4)]
    k = [GpuSlot("k80-000", i) for i in range(4)]
    current = {
        1: Allocation.on([v[0]], 8),
        2: Allocation.on([v[1]], 8),
        3: Allocation.on([k[0]], 8),
        4: Allocation.on([v[2]], 8),
    }
    plan = Plan(
        {
            1: Allocation.on([v[0]], 8),  # extend
            2: Allocation.on([v[3]], 8),  # same type move: no gain, kept
            3: Allocation.on([v[2]], 8),  # k80 -> v100: large gain, migrates
            5: Allocation.on([k[1], k[2]], 8),  # start
        }
    )
    actions = diff(current, plan, snapshot=snap, hysteresis=Hysteresis(0.1))
    kinds = {a.job_id: a.kind for a in actions}
    assert kinds == {
        1: ActionKind.EXTEND,
        2: ActionKind.EXTEND,
        3: ActionKind.MIGRATE,
        4: ActionKind.STOP,
        5: ActionKind.START,
    }
    assert actions[0].kind is ActionKind.STOP
    raw = {a.job_id: a.kind for a in diff(current, plan)}
    assert raw[2] is ActionKind.MIGRATE
    grown = diff({1: Allocation.on([v[0]], 8)}, Plan({1: Allocation.on(v[:2], 8)}))
    assert grown[0].kind is ActionKind.RESIZE


def test_a_stop_names_the_jobs_that_take_its_gpus() -> None:
    """A stopped job's action lists the jobs the plan puts on its GPUs, and the round's
    history line says so: "preempted in round 42 for job 17"."""
    v = [GpuSlot("v100-000", i) for i in range(4)]
    current = {1: Allocation.on(v[:2], 8), 2: Allocation.on([v[2]], 8)}
    plan = Plan(
        {17: Allocation.on([v[0]], 8), 18: Allocation.on([v[1], v[3]], 8)},
        {2: "waiting: fair share"},
    )
    stops = {a.job_id: a for a in diff(current, plan) if a.kind is ActionKind.STOP}
    assert stops[1].displaced_by == (17, 18)
    assert stops[2].displaced_by == ()
    assert preemption_reason(stops[1], 42) == "preempted in round 42 for jobs 17, 18"
    assert preemption_reason(stops[2], 42) == "preempted in round 42 (waiting: fair share)"
    single = diff({1: Allocation.on([v[0]], 8)}, Plan({17: Allocation.on([v[0]], 8)}))
    assert preemption_reason(single[0], 42) == "preempted in round 42 for job 17"


def test_registry_rejects_unknown_names() -> None:
    """make_policy names the known policies when the name is wrong."""
    names = available_policies()
    with pytest.raises(UnknownPolicyError, match="known policies"):
        make_policy("no-such-policy")
    assert names == sorted(names)


def test_a_progressed_view_equals_one_built_with_the_new_progress() -> None:
    """JobView.progressed keeps every fixed field and replaces only the progress ones: it
    equals the view constructed from scratch with them, and leaves the original as it was."""
    from types import MappingProxyType

    base = JobView(
        id=7,
        job_type="resnet",
        num_gpus=2,
        total_iterations=100.0,
        priority=2.0,
        allowed_gpu_types=frozenset({"v100"}),
        user="ann",
        time_limit_s=50.0,
        restart_s=3.0,
    )
    alloc = Allocation.on([GpuSlot("n0", 0), GpuSlot("n0", 1)], 1)
    seconds = MappingProxyType({"v100": 40.0})
    moved = base.progressed(
        iterations_done=30.0,
        attained_service=80.0,
        gpu_seconds_by_type=seconds,
        run_seconds=20.0,
        current=alloc,
    )
    fresh = JobView(
        id=7,
        job_type="resnet",
        num_gpus=2,
        total_iterations=100.0,
        priority=2.0,
        allowed_gpu_types=frozenset({"v100"}),
        user="ann",
        time_limit_s=50.0,
        restart_s=3.0,
        iterations_done=30.0,
        attained_service=80.0,
        gpu_seconds_by_type=seconds,
        run_seconds=20.0,
        current=alloc,
    )
    assert moved == fresh
    assert base.iterations_done == 0.0 and base.current is None
    assert base.gpu_seconds_by_type == {}
