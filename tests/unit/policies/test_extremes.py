"""Every registered policy plans jobs at the ends of what a job may ask for.

A job's numbers are bounded at submission (protos/bounds.py): priorities from 0.001 to 1000
(down to a millionth of that once fair share scales them), up to 10^12 iterations, 4096
GPUs, batches of 2^20, 1 PiB of memory per GPU. Over random clusters and queues built from
those ends, and from what the daemon's store can hand a policy (job types the throughput
model does not know, jobs larger than the cluster, types the cluster lacks, measured rates
at both ends of what the model accepts), no policy may raise and every plan must be one
the round carries out: valid once pinned jobs keep their GPUs (:meth:`Plan.violations`).
Two rounds run per case, the second from what the first placed, so what policies remember
between rounds is exercised too. The tests iterate over ``available_policies()``.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from master.scheduling.fairshare import MIN_FACTOR, FairShareConfig
from master.scheduling.memory import GIB, fits
from master.scheduling.plan import Allocation, Plan
from master.scheduling.policy import Policy, available_policies, make_policy, policy_parameters
from master.scheduling.round import RoundState, decide_round, keep_non_preemptible
from master.scheduling.throughput import MEASURED_RATE_MAX, MEASURED_RATE_MIN, ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot
from protos.bounds import (
    BATCH_SIZE_MAX,
    GPU_MEMORY_MAX_BYTES,
    ITERATIONS_MAX,
    NUM_GPUS_MAX,
    PRIORITY_MAX,
    PRIORITY_MIN,
)
from tests.unit.policies.builders import model

NOW = 1_790_000_000.0
ROUND_S = 360.0
GPU_TYPES = ("v100", "p100", "k80")
JOB_TYPES = ("vision", "speech", "text", "unprofiled")
PRIORITIES = (PRIORITY_MIN * MIN_FACTOR, PRIORITY_MIN, 1.0, PRIORITY_MAX)
ITERATIONS = (1.0, 7.0, 36_000.0, 1e9, float(ITERATIONS_MAX))


def params(name: str) -> dict[str, object]:
    return {"seed": 5} if "seed" in policy_parameters(name) else {}


@st.composite
def throughputs(draw: st.DrawFn) -> ThroughputModel:
    """The builders' profile, sometimes with measurements at the ends of what the model
    takes from workers."""
    base = model()
    for _ in range(draw(st.integers(0, 4))):
        base = base.observe(
            draw(st.sampled_from(JOB_TYPES)),
            draw(st.sampled_from(GPU_TYPES)),
            draw(st.sampled_from((1, 2, 4))),
            draw(st.sampled_from((MEASURED_RATE_MIN, 1e-3, 1e4, MEASURED_RATE_MAX))),
        )
    return base


@st.composite
def cases(draw: st.DrawFn) -> Snapshot:
    counts = {t: draw(st.integers(0, 8)) for t in GPU_TYPES}
    if not any(counts.values()):
        counts[draw(st.sampled_from(GPU_TYPES))] = 1
    memory = draw(st.sampled_from((0, 16 * GIB)))
    cluster = ClusterView.from_counts(
        counts, gpus_per_server=draw(st.sampled_from((1, 2, 4, 8))), memory_bytes=memory
    )
    total = cluster.num_gpus
    free = {t: [g.slot for g in gpus] for t, gpus in cluster.gpus_by_type().items()}
    jobs: list[JobView] = []
    for job_id in range(1, draw(st.integers(1, 40)) + 1):
        num_gpus = draw(st.sampled_from((1, 1, 2, 3, 4, 8, total, NUM_GPUS_MAX)))
        iterations = draw(st.sampled_from(ITERATIONS))
        allowed: frozenset[str] = frozenset()
        if draw(st.booleans()):
            allowed = frozenset(
                draw(st.lists(st.sampled_from((*GPU_TYPES, "a100-80gb")), min_size=1))
            )
        batch = draw(st.sampled_from((1, num_gpus, 64, BATCH_SIZE_MAX)))
        preemptible = draw(st.sampled_from((True, True, False)))
        memory_per_gpu = draw(st.sampled_from((0, 0, 1, 16 * GIB, GPU_MEMORY_MAX_BYTES)))
        current: Allocation | None = None
        if draw(st.booleans()):
            # Running already, on GPUs of one type it may use that nobody else holds.
            fitting = [
                t
                for t, slots in free.items()
                if len(slots) >= num_gpus
                and (not allowed or t in allowed)
                and fits(memory_per_gpu, cluster.memory_by_type[t])
            ]
            if fitting:
                slots = free[draw(st.sampled_from(fitting))]
                current = Allocation.on(tuple(slots[:num_gpus]), batch)
                del slots[:num_gpus]
        jobs.append(
            JobView(
                id=job_id,
                job_type=draw(st.sampled_from(JOB_TYPES)),
                num_gpus=num_gpus,
                total_iterations=iterations,
                iterations_done=iterations * draw(st.sampled_from((0.0, 0.0, 0.5, 0.999999))),
                batch_size=batch,
                priority=draw(st.sampled_from(PRIORITIES)),
                allowed_gpu_types=allowed,
                preemptible=preemptible,
                migratable=preemptible,
                shareable=draw(st.booleans()),
                forkable=preemptible and draw(st.booleans()),
                memory_bytes_per_gpu=memory_per_gpu,
                arrival_time=NOW - draw(st.sampled_from((0.0, 1.0, 3600.0, 3e7))),
                attained_service=draw(st.sampled_from((0.0, 10.0, 1e12))),
                current=current,
                user=draw(st.sampled_from(("ann", "bob", "cy"))),
                restart_s=draw(st.sampled_from((0.0, 30.0, 1e4))),
            )
        )
    return Snapshot(cluster, tuple(jobs), 0, ROUND_S, draw(throughputs()))


def planned(policy: Policy, snapshot: Snapshot, now: float) -> Plan:
    """The policy's plan as the round takes it (pinned jobs kept where they run), which
    must be valid."""
    current = {j.id: j.current for j in snapshot.jobs if j.current is not None}
    plan = keep_non_preemptible(snapshot, current, policy.plan(snapshot, now))
    assert plan.violations(snapshot) == []
    return plan


def advanced(snapshot: Snapshot, plan: Plan) -> Snapshot:
    """The next round's snapshot: each job holds what the plan gave it and progressed."""
    jobs = tuple(
        replace(
            job,
            current=plan.get(job.id),
            iterations_done=min(job.total_iterations * 0.999, job.iterations_done + 100.0)
            if job.id in plan
            else job.iterations_done,
        )
        for job in snapshot.jobs
    )
    return replace(snapshot, jobs=jobs, round_number=snapshot.round_number + 1)


@pytest.mark.parametrize("name", available_policies())
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(snapshot=cases())
def test_no_policy_raises_or_plans_what_cannot_run_at_the_ends_of_valid_specs(
    name: str, snapshot: Snapshot
) -> None:
    """Two rounds, each planned without raising and valid as the round takes it."""
    policy = make_policy(name, **params(name))
    first = planned(policy, snapshot, NOW)
    planned(policy, advanced(snapshot, first), NOW + ROUND_S)


@pytest.mark.parametrize("name", available_policies())
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=cases(), usage=st.sampled_from((0.0, 1.0, 1e12)))
def test_every_policy_plans_every_round_under_fair_share_at_the_ends(
    name: str, snapshot: Snapshot, usage: float
) -> None:
    """With fair share scaling priorities (down to the smallest factor for a user who used
    everything), rounds neither fall back nor leave a job out for the policy's failure."""
    policy = make_policy(name, **params(name))
    config = FairShareConfig(user_shares={"ann": 1000.0, "bob": 1.0}, max_gpus_per_user=6)
    state = RoundState(
        snapshot, NOW, fair_share=config, usage={"ann": usage, "bob": 0.0, "cy": 1.0}
    )
    decision = decide_round(state, policy)
    assert decision.fallback == "" and decision.isolated == {}, decision.fallback


@pytest.mark.parametrize("name", available_policies())
def test_every_policy_can_be_copied_to_find_the_jobs_it_fails_on(name: str) -> None:
    """A round that isolates jobs tries copies of the policy: a copy taken after a round
    plans the next round as the policy itself does."""
    jobs = tuple(
        JobView(id=i, job_type="vision", num_gpus=1 + i % 2, total_iterations=1e4, batch_size=64)
        for i in range(6)
    )
    snapshot = Snapshot(ClusterView.from_counts({"v100": 4, "k80": 4}), jobs, 0, ROUND_S, model())
    policy = make_policy(name, **params(name))
    nxt = advanced(snapshot, policy.plan(snapshot, NOW))
    twin = copy.deepcopy(policy)
    assert twin.plan(nxt, NOW + ROUND_S) == policy.plan(nxt, NOW + ROUND_S)


def test_the_cases_reach_the_ends() -> None:
    """The strategy does produce the extremes it is meant to (not only middling values)."""
    seen: dict[str, set[object]] = {"priority": set(), "gpus": set(), "running": set()}

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(snapshot=cases())
    def collect(snapshot: Snapshot) -> None:
        for job in snapshot.jobs:
            seen["priority"].add(job.priority)
            seen["gpus"].add(job.num_gpus)
            seen["running"].add(job.current is not None)

    collect()
    assert {PRIORITY_MIN * MIN_FACTOR, PRIORITY_MAX} <= seen["priority"]
    assert {1, NUM_GPUS_MAX} <= seen["gpus"]
    assert seen["running"] == {True, False}
