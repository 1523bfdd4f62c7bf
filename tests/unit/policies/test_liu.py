"""liu: speed-proportional batch split and deferred-acceptance placement."""

from __future__ import annotations

import time

import pytest

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.policies.liu import (
    ENUMERATE_MAX,
    PAPER_DRAWS,
    LiuPolicy,
    categories,
    category_count,
    category_rate,
)
from tests.unit.policies.builders import job, snapshot


def test_categories_are_the_multisets_of_gpu_types() -> None:
    cats = categories(["v100", "k80"], 2)
    assert sorted(cats) == sorted([(("v100", 2),), (("k80", 2),), (("k80", 1), ("v100", 1))])


def test_batch_split_is_proportional_to_speed_within_one_percent() -> None:
    """Each worker's share over its GPU's speed is the same for all workers (within 1%)."""
    blocker = job(
        9,
        num_gpus=2,
        preemptible=False,
        current=Allocation.on([GpuSlot("v100-000", 0), GpuSlot("v100-000", 1)], 64),
    )
    wide = job(1, num_gpus=4, batch_size=1000)
    snap = snapshot({"v100": 4, "p100": 4, "k80": 4}, [blocker, wide])
    plan = LiuPolicy().plan(snap, 0.0)
    assert plan.violations(snap) == []
    alloc = plan.get(1)
    assert alloc is not None
    types = {snap.cluster.gpu_type(s) for s in alloc.slots}
    assert len(types) > 1, "the fastest feasible category mixes the free v100s with p100s"
    model = snap.throughput
    times = [
        share / model.throughput("vision", snap.cluster.gpu_type(slot), 4, consolidated=False)
        for slot, share in zip(alloc.slots, alloc.batch_shares, strict=True)
    ]
    assert max(times) / min(times) < 1.01
    assert sum(alloc.batch_shares) == 1000


def test_mixed_category_runs_at_the_mean_pace_not_the_slowest() -> None:
    snap = snapshot({"v100": 4, "k80": 4}, [job(1, num_gpus=4)])
    j = snap.jobs[0]
    mixed = category_rate(snap, j, (("k80", 2), ("v100", 2)))
    model = snap.throughput
    v = model.throughput("vision", "v100", 4, consolidated=False)
    k = model.throughput("vision", "k80", 4, consolidated=False)
    assert abs(mixed - (v + k) / 2) < 1e-9


def test_matching_gives_contested_gpus_to_the_job_that_finishes_sooner() -> None:
    """Both want the single v100; the cluster keeps the shorter completion, the other moves."""
    long = job(1, total_iterations=1e6, arrival_time=0.0)
    short = job(2, total_iterations=1e3, arrival_time=5.0)
    snap = snapshot({"v100": 1, "k80": 1}, [long, short])
    plan = LiuPolicy().plan(snap, 0.0)
    placed = {j: snap.cluster.gpu_type(a.slots[0]) for j, a in plan.allocations.items()}
    assert placed == {2: "v100", 1: "k80"}


def test_matching_is_stable() -> None:
    """No job prefers a sampled category that could take it by evicting a longer one."""
    jobs = [
        job(i, job_type=t, num_gpus=n, total_iterations=it)
        for i, (t, n, it) in enumerate(
            [
                ("vision", 2, 5e4),
                ("speech", 1, 2e4),
                ("text", 2, 9e5),
                ("vision", 1, 3e3),
                ("speech", 2, 7e5),
                ("text", 1, 1e4),
            ]
        )
    ]
    snap = snapshot({"v100": 2, "p100": 2, "k80": 2}, jobs, gpus_per_server=2)
    policy = LiuPolicy(sample=50)
    room = snap.cluster.capacity_by_type()
    matched = policy.match(snap, list(snap.jobs), room)
    used = dict.fromkeys(room, 0)
    for category in matched.values():
        for t, k in category:
            used[t] += k
    assert all(used[t] <= room[t] for t in room)
    time_on = {
        j.id: {
            c: j.remaining_iterations / category_rate(snap, j, c)
            for c in categories(list(room), j.num_gpus)
        }
        for j in snap.jobs
    }
    for j in snap.jobs:
        held = matched.get(j.id)
        mine = time_on[j.id][held] if held is not None else float("inf")
        for c, t_c in time_on[j.id].items():
            if t_c >= mine:
                continue
            # j prefers c; it blocks the matching if, on every type of c, the room left
            # by the others plus what longer-running holders use would fit it.
            fits_everywhere = True
            for t, k in c:
                others = [o for o in matched if o != j.id and t in dict(matched[o])]
                used_by_others = sum(dict(matched[o])[t] for o in others)
                evictable = sum(dict(matched[o])[t] for o in others if time_on[o][matched[o]] > t_c)
                if room[t] - used_by_others + evictable < k:
                    fits_everywhere = False
            assert not fits_everywhere, f"job {j.id} and category {c} block the matching"


def test_a_job_of_thousands_of_gpus_over_many_types_is_ranked_without_listing_them_all() -> None:
    """Listing every multiset of 4096 GPUs over 3 types (8 million) or of 64 over 8 types
    (a billion) would stall the round: such jobs rank their single-type categories and a
    sample of mixed ones drawn directly, each within the capacity of its types, and the
    round plans at once. (A job larger than every type, 100 GPUs here, waits under liu
    whatever its size.)"""
    assert category_count(3, 4096) > ENUMERATE_MAX and category_count(8, 64) > ENUMERATE_MAX
    assert category_count(4, 8) == len(categories(["a", "b", "c", "d"], 8)) == 165
    types = ("v100", "p100", "k80", "t4", "a10", "a40", "l40s", "h100")
    big = snapshot(
        dict.fromkeys(types, 64),
        [job(1, num_gpus=64), job(2, num_gpus=4096), job(3, num_gpus=100), job(4)],
    )
    policy = LiuPolicy()
    started = time.perf_counter()
    plan = policy.plan(big, 0.0)
    assert time.perf_counter() - started < 2.0
    assert plan.violations(big) == []
    assert 1 in plan and 4 in plan and 2 not in plan and 3 not in plan
    for category in policy._candidates(big, big.job(1)):
        assert sum(k for _, k in category) == 64 and all(k <= 64 for _, k in category)
    assert len([c for c in policy._candidates(big, big.job(1)) if len(c) > 1]) == 6
    assert policy._candidates(big, big.job(2)) == []


def test_the_paper_variant_ranks_every_feasible_category() -> None:
    """variant=paper ranks the full category set where the default samples six mixed
    categories; a job whose categories cannot be listed draws PAPER_DRAWS of them."""
    snap = snapshot({"v100": 8, "p100": 8, "k80": 8, "t4": 8}, [job(1, num_gpus=8)])
    feasible = categories(["k80", "p100", "t4", "v100"], 8)
    default = LiuPolicy()._candidates(snap, snap.job(1))
    paper = LiuPolicy(variant="paper")._candidates(snap, snap.job(1))
    assert len([c for c in default if len(c) > 1]) == 6
    assert sorted(paper) == sorted(feasible) and len(paper) == 165
    types = ("v100", "p100", "k80", "t4", "a10", "a40", "l40s", "h100")
    big = snapshot(dict.fromkeys(types, 64), [job(1, num_gpus=64)])
    drawn = LiuPolicy(variant="paper")._candidates(big, big.job(1))
    assert len([c for c in drawn if len(c) > 1]) == PAPER_DRAWS


def test_an_unknown_variant_is_refused() -> None:
    with pytest.raises(ValueError, match="liu variant must be one of default, paper"):
        LiuPolicy(variant="tuned")
