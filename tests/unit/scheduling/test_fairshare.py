"""Fair share and quotas as pure functions (master.scheduling.fairshare) and in the round:
shares by user and group, decay, the factor, which jobs the policy is shown, what a plan
may start, and the reasons the held jobs give."""

from __future__ import annotations

import math

import pytest

from master.scheduling.fairshare import (
    FairShareConfig,
    decay_factor,
    decayed_gpu_seconds,
    decayed_usage,
    factor,
    limit_plan,
    normalized_shares,
    prepare,
    report,
)
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policy import make_policy
from master.scheduling.round import RoundState, decide_round
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot

CLUSTER = ClusterView.from_counts({"v100": 4})
MODEL = ThroughputModel({("a", "v100", n, True): 10.0 * n for n in (1, 2, 4)})
SLOTS = [GpuSlot("v100-000", i) for i in range(4)]


def job(
    job_id: int, user: str, gpus: int = 1, on: tuple[int, ...] = (), at: float = 0.0
) -> JobView:
    current = Allocation.on([SLOTS[i] for i in on], 1) if on else None
    return JobView(
        id=job_id,
        job_type="a",
        num_gpus=gpus,
        total_iterations=1000.0,
        user=user,
        current=current,
        arrival_time=at,
    )


def snapshot(*jobs: JobView) -> Snapshot:
    return Snapshot(CLUSTER, tuple(jobs), 1, 60.0, MODEL)


def test_shares_normalize_over_active_users_and_split_groups() -> None:
    """A group's share is split among its active members by their user shares; users in
    no group keep their own share; unlisted users get the default; inactive users take
    nothing."""
    config = FairShareConfig(
        user_shares={"alice": 3, "carol": 1, "dave": 2},
        groups={"vision": ("alice", "carol")},
        group_shares={"vision": 2},
    )
    shares = normalized_shares(config, ["alice", "carol", "dave", "eve"])
    # Top level: vision 2, dave 2, eve 1 (default) -> 2/5, 2/5, 1/5.
    assert shares["alice"] == pytest.approx(0.4 * 3 / 4)
    assert shares["carol"] == pytest.approx(0.4 * 1 / 4)
    assert shares["dave"] == pytest.approx(0.4)
    assert shares["eve"] == pytest.approx(0.2)
    # Carol idle: alice holds the whole group share.
    assert normalized_shares(config, ["alice", "dave"])["alice"] == pytest.approx(0.5)


def test_config_refuses_bad_values() -> None:
    """Shares must be positive, quotas non-negative, a user in one group only."""
    with pytest.raises(ValueError, match="share of user 'a'"):
        FairShareConfig(user_shares={"a": 0})
    with pytest.raises(ValueError, match="two groups"):
        FairShareConfig(groups={"g": ("a",), "h": ("a",)})
    with pytest.raises(ValueError, match="quota of user 'a'"):
        FairShareConfig(user_quotas={"a": -1})
    with pytest.raises(ValueError, match="half-life"):
        FairShareConfig(half_life_s=0)


def test_decay_halves_per_half_life_and_integrates_intervals() -> None:
    """A GPU-second a half-life ago counts half; an interval's decayed GPU-seconds are the
    exact integral, so splitting it changes nothing."""
    assert decay_factor(3600.0, 3600.0) == pytest.approx(0.5)
    assert decay_factor(-5.0, 3600.0) == 1.0
    whole = decayed_gpu_seconds(2, 0.0, 7200.0, 7200.0, 3600.0)
    parts = decayed_gpu_seconds(2, 0.0, 3600.0, 7200.0, 3600.0) + decayed_gpu_seconds(
        2, 3600.0, 7200.0, 7200.0, 3600.0
    )
    assert whole == pytest.approx(parts)
    assert whole == pytest.approx(2 * 3600.0 / math.log(2) * (1 - 0.25))
    # Recent use counts more than the same use long ago; nothing after now counts.
    assert decayed_gpu_seconds(1, 7000, 7200, 7200, 3600) > decayed_gpu_seconds(
        1, 0, 200, 7200, 3600
    )
    assert decayed_gpu_seconds(1, 8000, 9000, 7200, 3600) == 0.0
    usage = decayed_usage([("a", 1, 0, 10), ("a", 1, 10, 20), ("b", 2, 0, 10)], 20, 1e9)
    assert usage == pytest.approx({"a": 20.0, "b": 20.0})


def test_factor_is_slurms_classic_one() -> None:
    """2^(-U/S): 1 without usage, 1/2 at exactly the share, smaller beyond, never 0."""
    assert factor(0.0, 0.5) == 1.0
    assert factor(0.5, 0.5) == pytest.approx(0.5)
    assert factor(1.0, 0.25) == pytest.approx(1 / 16)
    assert factor(1.0, 1e-9) > 0


def test_priority_follows_usage_against_share() -> None:
    """The policy sees each job's priority scaled by its user's factor: the user who used
    more than their share ranks below the one who used less."""
    config = FairShareConfig()
    visible, held, _ = prepare(
        snapshot(job(1, "alice"), job(2, "bob")), config, {"alice": 300.0, "bob": 100.0}
    )
    assert held == {}
    priority = {j.user: j.priority for j in visible.jobs}
    assert priority["alice"] == pytest.approx(2 ** (-0.75 / 0.5))
    assert priority["bob"] == pytest.approx(2 ** (-0.25 / 0.5))
    off, _, _ = prepare(snapshot(job(1, "alice")), FairShareConfig(enabled=False), {"alice": 1.0})
    assert off.jobs[0].priority == 1.0


def test_waiting_jobs_past_entitlement_are_held_while_another_user_waits() -> None:
    """bob holds 2 of 4 GPUs (his half): while alice waits with work for the other two,
    his next job is not shown to the policy and says why; alice's are shown."""
    snap = snapshot(
        job(1, "bob", on=(0,)),
        job(2, "bob", on=(1,)),
        job(3, "bob"),
        job(4, "alice"),
        job(5, "alice"),
    )
    visible, held, _ = prepare(snap, FairShareConfig(), {})
    assert [j.id for j in visible.jobs] == [1, 2, 4, 5]
    assert held == {
        3: "waiting: bob over fair share (holds 2 of 4 GPUs, 50% share) while others wait"
    }


def test_gpus_no_one_under_share_waits_for_go_to_the_others() -> None:
    """Work stays conserved: once the user under their share has nothing waiting, the free
    GPUs are offered to the user over their share; while she waits, they are not."""
    bob = [job(1, "bob", on=(0,)), job(2, "bob", on=(1,)), job(3, "bob"), job(4, "bob")]
    visible, held, _ = prepare(snapshot(*bob, job(5, "alice", on=(2,))), FairShareConfig(), {})
    assert [j.id for j in visible.jobs] == [1, 2, 3, 5]
    assert set(held) == {4}
    visible, held, _ = prepare(snapshot(*bob, job(5, "alice")), FairShareConfig(), {})
    assert set(held) == {3, 4}


def test_running_jobs_over_share_make_room_for_a_waiting_user() -> None:
    """bob holds all 4 GPUs and alice waits with two jobs: two of bob's latest jobs are left
    out (so preempted), no more; a job that may not be preempted is never chosen."""
    bob = [job(i, "bob", on=(i,), at=float(i)) for i in range(4)]
    pinned = JobView(
        id=3,
        job_type="a",
        num_gpus=1,
        total_iterations=10.0,
        user="bob",
        current=bob[3].current,
        arrival_time=3.0,
        preemptible=False,
    )
    snap = snapshot(bob[0], bob[1], bob[2], pinned, job(10, "alice"), job(11, "alice"))
    visible, held, _ = prepare(snap, FairShareConfig(), {})
    assert set(held) == {2, 1}
    assert {j.id for j in visible.jobs} == {0, 3, 10, 11}


def test_quota_holds_whatever_the_shares() -> None:
    """A user at their quota waits with a reason naming it, alone on the cluster and with
    fair share off; a per-user override replaces the global quota."""
    config = FairShareConfig(enabled=False, max_gpus_per_user=2, user_quotas={"carol": 3})
    snap = snapshot(
        job(1, "alice", on=(0,)), job(2, "alice", on=(1,)), job(3, "alice"), job(4, "carol", gpus=2)
    )
    visible, held, _ = prepare(snap, config, {})
    assert held == {3: "waiting: user alice at quota of 2 GPUs"}
    assert 4 in {j.id for j in visible.jobs}


def test_round_starts_no_more_than_the_quota_allows() -> None:
    """A policy that starts every waiting job of a user (fifo) starts only what the quota
    allows; the rest wait with the quota reason, and the decision carries it."""
    snap = snapshot(*(job(i, "alice") for i in range(4)))
    state = RoundState(snap, 0.0, fair_share=FairShareConfig(max_gpus_per_user=2))
    decision = decide_round(state, make_policy("fifo"))
    assert sorted(decision.placements) == [0, 1]
    assert decision.waiting[2] == "waiting: user alice at quota of 2 GPUs"
    assert decision.waiting[3] == "waiting: user alice at quota of 2 GPUs"


def test_round_splits_an_empty_cluster_by_shares() -> None:
    """Both users submit at once, bob ten times more and first: fifo gives alice her 3 of 4
    GPUs (share 3:1) in the first round, and bob's others say why they wait."""
    jobs = [job(i, "bob", at=0.0) for i in range(10)] + [
        job(20, "alice", at=1.0),
        job(21, "alice", at=1.0),
        job(22, "alice", at=1.0),
    ]
    state = RoundState(snapshot(*jobs), 0.0, fair_share=FairShareConfig(user_shares={"alice": 3}))
    decision = decide_round(state, make_policy("fifo"))
    assert sorted(decision.placements) == [0, 20, 21, 22]
    assert "bob over fair share" in decision.waiting[5]
    # Without fair share, fifo gives bob everything.
    plain = decide_round(RoundState(snapshot(*jobs), 0.0), make_policy("fifo"))
    assert sorted(plain.placements) == [0, 1, 2, 3]


def test_report_lists_share_usage_and_factor() -> None:
    """The sshare-like report: each user's raw and normalized share, decayed usage, its
    fraction and the factor, users with past usage included."""
    rows = report(
        FairShareConfig(user_shares={"alice": 3}),
        {"alice": 30.0, "bob": 10.0, "old": 0.0},
        ["alice", "bob"],
    )
    assert [r.user for r in rows] == ["alice", "bob"]
    alice = rows[0]
    assert alice.raw_share == 3.0
    assert alice.share == pytest.approx(0.75)
    assert alice.usage == pytest.approx(0.75)
    assert alice.factor == pytest.approx(0.5)


def test_plan_past_entitlement_is_trimmed() -> None:
    """A plan starting several jobs of a user past their entitlement while another user
    waits below theirs starts only those within it, the latest arrivals dropped; the
    dropped ones say why."""
    snap = snapshot(
        job(1, "bob", at=1.0), job(2, "bob", at=2.0), job(3, "bob", at=3.0), job(4, "alice", at=4.0)
    )
    _, _, state = prepare(snap, FairShareConfig(), {})
    greedy = Plan({i: Allocation.on([SLOTS[i - 1]], 1) for i in (1, 2, 3)})
    trimmed = limit_plan(snap, greedy, state, {})
    assert sorted(trimmed.allocations) == [1, 2]
    assert (trimmed.reason(3) or "").startswith("waiting: bob over fair share")
