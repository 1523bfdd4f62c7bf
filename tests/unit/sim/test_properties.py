"""Properties every registered policy must keep in simulation, over random small cases.

The test iterates over ``available_policies()``, so a policy module added later is
covered without touching this file.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings

from master.scheduling.plan import GpuSlot
from master.scheduling.policy import Policy, available_policies, make_policy, policy_parameters
from master.sim.engine import Segment, SimConfig, SimResult, simulate
from master.sim.metrics import job_bound
from tests.unit.sim.strategies import Case, cases

REL = 1e-9


def run(case: Case, policy_name: str, seed: int = 7) -> SimResult:
    params = {"seed": seed} if "seed" in policy_parameters(policy_name) else {}
    return simulate_case(case, make_policy(policy_name, **params))


def simulate_case(case: Case, policy: Policy) -> SimResult:
    """The case simulated under `policy` with every plan checked and segments kept."""
    config = SimConfig(
        round_s=case.round_s,
        overhead_s=case.overhead_s,
        early_rounds=case.early_rounds,
        validate_plans=True,
        record_segments=True,
        stall_rounds=200,
    )
    return simulate(policy, case.trace, case.cluster, case.model, config)


def check_invariants(case: Case, result: SimResult) -> None:
    totals = {job.id: job.iterations for job in case.trace}
    sizes = {job.id: job.num_gpus for job in case.trace}
    done: dict[int, float] = defaultdict(float)
    per_round: dict[int, list[Segment]] = defaultdict(list)
    for seg in result.segments:
        done[seg.job_id] += seg.iterations
        per_round[seg.round_index].append(seg)
        # Never more GPUs than asked per copy (HadarE copies each hold at most the job's
        # count; a folded copy holds fewer).
        assert len(seg.slots) % seg.copies == 0
        assert len(seg.slots) // seg.copies <= sizes[seg.job_id]
        assert seg.start_s <= seg.end_s
    for round_segments in per_round.values():
        holders: dict[GpuSlot, list[Segment]] = defaultdict(list)
        for seg in round_segments:
            for slot in seg.slots:
                holders[slot].append(seg)
        for slot, segs in holders.items():
            if len(segs) > 1:
                # Only two jobs, and only when both plans say they share.
                assert len(segs) == 2, f"GPU {slot} held by {len(segs)} jobs"
                a, b = segs
                assert a.shared_with == b.job_id and b.shared_with == a.job_id, (
                    f"GPU {slot} given to jobs {a.job_id} and {b.job_id} without sharing"
                )
    for i, job in enumerate(result.jobs):
        # Every job finishes exactly its iterations, all of them accounted for by work done.
        assert job.iterations == totals[job.id]
        assert done[job.id] == pytest.approx(totals[job.id], rel=1e-7)
        # Nobody beats the job running alone on its fastest type from arrival.
        assert job.jct_s >= job_bound(result, i) * (1 - REL), (
            f"job {job.id}: JCT {job.jct_s} below its lower bound {job_bound(result, i)}"
        )
        assert job.start_s >= job.arrival_s


@pytest.mark.parametrize("policy_name", available_policies())
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def test_policy_invariants_hold_on_random_traces(policy_name: str, case: Case) -> None:
    """No double-booked GPU unless shared, exact GPU counts, exact iterations, bound respected."""
    check_invariants(case, run(case, policy_name))


@pytest.mark.parametrize("policy_name", available_policies())
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_jobs=6))
def test_same_input_and_seed_give_the_same_result(policy_name: str, case: Case) -> None:
    """Two runs with the same trace, cluster, model and seed produce identical results."""
    first, second = run(case, policy_name), run(case, policy_name)
    assert first.jobs == second.jobs
    assert [r.busy_by_type for r in first.rounds] == [r.busy_by_type for r in second.rounds]
