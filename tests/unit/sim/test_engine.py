"""Simulator mechanics: exact finish times, overhead, preemption and migration counts,
sharing, copies, mixed-type batches, arrivals between rounds, invalid plans, stalls."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import pytest

from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies.fifo import FifoPolicy
from master.scheduling.policies.las import LasPolicy
from master.scheduling.policy import (
    Policy,
    make_policy,
    stable_after_departures,
    stable_when_settled,
)
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot
from master.sim.engine import RoundRecord, SimConfig, SimulationError, Simulator, simulate
from master.sim.generate import generate_trace
from master.sim.metrics import summarize
from master.sim.trace import TraceJob
from tests.unit.sim.gavel_data import THROUGHPUTS

V = [GpuSlot("v100-000", i) for i in range(4)]
K = [GpuSlot("k80-000", i) for i in range(4)]


class ScriptedPolicy:
    """A policy whose decisions are a function of (round number, snapshot)."""

    name = "scripted"

    def __init__(self, decide: Callable[[int, Snapshot], dict[int, Allocation]]) -> None:
        self._decide = decide
        self.calls: list[tuple[int, float, tuple[int, ...]]] = []

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self.calls.append((snapshot.round_number, now, tuple(j.id for j in snapshot.jobs)))
        return Plan(self._decide(snapshot.round_number, snapshot))


def model() -> ThroughputModel:
    return ThroughputModel(
        {
            ("a", "v100", 1, True): 10.0,
            ("a", "k80", 1, True): 2.0,
            ("a", "v100", 2, True): 16.0,
            ("a", "k80", 2, True): 3.0,
            ("a", "v100", 2, False): 16.0,
            ("a", "k80", 2, False): 3.0,
            ("b", "v100", 1, True): 5.0,
        },
        {("a", "b", "v100", 1): (6.0, 4.0)},
    )


def cluster() -> ClusterView:
    return ClusterView.from_counts({"v100": 4, "k80": 4})


def job(job_id: int, iters: float, arrival: float = 0.0, **kw: object) -> TraceJob:
    fields: dict[str, object] = {"job_type": "a", "num_gpus": 1, "batch_size": 32}
    fields.update(kw)
    return TraceJob(id=job_id, arrival_s=arrival, iterations=iters, **fields)  # type: ignore[arg-type]


def on(slots: list[GpuSlot], **kw: object) -> Allocation:
    return Allocation.on(slots, 32, **kw)  # type: ignore[arg-type]


def test_job_finishes_mid_round_at_the_exact_time() -> None:
    """5,000 iterations at 10 it/s finish 500 s after arrival, not at a round end."""
    policy = ScriptedPolicy(lambda r, s: {0: on([V[0]])} if s.jobs else {})
    result = simulate(policy, [job(0, 5000.0, arrival=100.0)], cluster(), model())
    assert result.jobs[0].finish_s == pytest.approx(600.0)
    assert result.jobs[0].jct_s == pytest.approx(500.0)
    assert len(policy.calls) == 2  # rounds at 100 s and 460 s


def test_restart_overhead_is_charged_on_start_and_on_migration() -> None:
    """With 30 s overhead, first start and a migration each cost 30 s of progress."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        return {0: on([V[0]] if r == 0 else [V[1]])}

    config = SimConfig(overhead_s=30.0, min_migration_gain=0.0, pay_restart=False)
    result = simulate(ScriptedPolicy(decide), [job(0, 7200.0)], cluster(), model(), config)
    # 330 s in round 0, then 30 s overhead in round 1 and 390 s more: 3300 + 3900 = 7200.
    assert result.jobs[0].finish_s == pytest.approx(360.0 + 30.0 + 390.0)
    assert result.jobs[0].migrations == 1


def test_a_move_without_gain_is_not_made_as_in_the_daemon() -> None:
    """With the daemon's hysteresis (the default min_migration_gain), a plan that moves a
    running job to an equally fast GPU leaves it where it is: no migration, no overhead; a
    move to a GPU 5x faster is made."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        return {0: on([V[0]] if r == 0 else [V[1]])}

    config = SimConfig(overhead_s=30.0)
    result = simulate(ScriptedPolicy(decide), [job(0, 7200.0)], cluster(), model(), config)
    # 330 s in round 0, then 390 s more without a second overhead: 3300 + 3900 = 7200.
    assert result.jobs[0].finish_s == pytest.approx(360.0 + 390.0)
    assert result.jobs[0].migrations == 0

    def faster(r: int, s: Snapshot) -> dict[int, Allocation]:
        return {0: on([K[0]] if r == 0 else [V[1]])}

    moved = simulate(ScriptedPolicy(faster), [job(0, 7200.0)], cluster(), model(), config)
    assert moved.jobs[0].migrations == 1


def test_preemption_and_resume_are_counted() -> None:
    """A job stopped for a round counts one preemption and resumes where it left off."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        return {} if r == 1 else {0: on([V[0]])}

    result = simulate(ScriptedPolicy(decide), [job(0, 5400.0)], cluster(), model())
    done = result.jobs[0]
    assert done.preemptions == 1 and done.migrations == 0
    assert done.finish_s == pytest.approx(720.0 + 180.0)
    assert summarize(result).preemptions == 1


def test_arrivals_wait_for_the_next_round_and_idle_time_is_skipped() -> None:
    """A job arriving mid-round starts at the next round; an idle cluster jumps to arrivals."""
    policy = ScriptedPolicy(lambda r, s: {j.id: on([V[j.id]]) for j in s.jobs})
    trace = [job(0, 36000.0), job(1, 100.0, arrival=50.0), job(2, 100.0, arrival=100_000.0)]
    result = simulate(policy, trace, cluster(), model())
    by_id = {j.id: j for j in result.jobs}
    assert by_id[1].start_s == pytest.approx(360.0)
    assert by_id[1].queue_s == pytest.approx(310.0)
    assert by_id[2].start_s == pytest.approx(100_000.0)
    assert by_id[2].jct_s == pytest.approx(10.0)


def test_early_round_end_when_every_running_job_finished() -> None:
    """When all running jobs finish before the round ends, waiting jobs start right away."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        first = min(j.id for j in s.jobs)
        return {first: on([V[0]])}

    trace = [job(0, 1000.0), job(1, 1000.0)]
    result = simulate(ScriptedPolicy(decide), trace, cluster(), model())
    assert [j.finish_s for j in result.jobs] == pytest.approx([100.0, 200.0])
    fixed = simulate(
        ScriptedPolicy(decide), trace, cluster(), model(), SimConfig(early_round_end=False)
    )
    assert [j.finish_s for j in fixed.jobs] == pytest.approx([100.0, 460.0])


def test_early_rounds_replan_when_a_job_exits_while_others_wait() -> None:
    """With early rounds a job's exit ends the round (after the delay) when jobs wait, so
    the waiting job takes the freed GPU then, not at the round's nominal end; the running
    job keeps its progress across the cut."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        ids = sorted(j.id for j in s.jobs)
        return {j: on([V[k]]) for k, j in enumerate(ids[:2])}

    # One GPU in use per job; jobs 0 and 1 fill the two slots the policy hands out.
    trace = [job(0, 1000.0), job(1, 20_000.0), job(2, 1000.0)]
    fixed = simulate(ScriptedPolicy(decide), trace, cluster(), model())
    assert [j.finish_s for j in fixed.jobs] == pytest.approx([100.0, 2000.0, 460.0])
    early = simulate(
        ScriptedPolicy(decide),
        trace,
        cluster(),
        model(),
        SimConfig(early_rounds=True, early_round_delay_s=1.0),
    )
    by_id = {j.id: j for j in early.jobs}
    assert by_id[2].start_s == pytest.approx(101.0)
    assert by_id[2].finish_s == pytest.approx(201.0)
    assert by_id[1].finish_s == pytest.approx(2000.0)
    assert early.rounds[0].end_s == pytest.approx(101.0)


def test_early_rounds_do_not_cut_rounds_when_nobody_waits() -> None:
    """Without waiting jobs a finish does not end the round: nothing could use the GPUs."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        return {j.id: on([V[j.id]]) for j in s.jobs}

    trace = [job(0, 1000.0), job(1, 20_000.0)]
    result = simulate(
        ScriptedPolicy(decide), trace, cluster(), model(), SimConfig(early_rounds=True)
    )
    assert [r.end_s for r in result.rounds[:2]] == pytest.approx([360.0, 720.0])


def test_shared_gpus_progress_at_colocation_throughputs() -> None:
    """Jobs a and b sharing one v100 progress at 6 and 4 it/s (the profile's pair figures)."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        ids = {j.id for j in s.jobs}
        if ids == {0, 1}:
            return {
                0: on([V[0]], shared_with=1, accumulation_steps=2),
                1: on([V[0]], shared_with=0),
            }
        return {i: on([V[0]]) for i in ids}

    trace = [job(0, 600.0, shareable=True), job(1, 2000.0, job_type="b", shareable=True)]
    result = simulate(ScriptedPolicy(decide), trace, cluster(), model())
    by_id = {j.id: j for j in result.jobs}
    assert by_id[0].finish_s == pytest.approx(100.0)
    # b: 400 iterations shared in 100 s, then 1600 alone at 5 it/s.
    assert by_id[1].finish_s == pytest.approx(100.0 + 1600.0 / 5.0)
    summary = summarize(result)
    assert summary.utilization == pytest.approx(1.0 / 8.0)


def test_sharing_without_both_sides_agreeing_is_rejected() -> None:
    """A plan that puts two jobs on one GPU without mutual shared_with is set aside as the
    daemon sets it aside (nothing runs that round, the round is counted); with
    validate_plans it fails the simulation, naming the policy."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        if r == 0:
            return {0: on([V[0]]), 1: on([V[0]])}
        return {j.id: on([V[j.id]]) for j in s.jobs}

    trace = [job(0, 100.0), job(1, 100.0)]
    result = simulate(ScriptedPolicy(decide), trace, cluster(), model())
    assert result.fallback_rounds == 1
    assert [j.start_s for j in result.jobs] == [360.0, 360.0]
    policy = ScriptedPolicy(decide)
    with pytest.raises(SimulationError, match=r"'scripted', round 0.*without sharing"):
        simulate(policy, trace, cluster(), model(), SimConfig(validate_plans=True))


def test_jobs_a_policy_fails_on_wait_while_the_others_run_as_in_the_daemon() -> None:
    """A policy that raises on job 1 in the first round: job 0 still starts then (the round
    is not a fallback), job 1 in the next round, which the policy plans; the round is
    counted and job 1 named. With validate_plans the simulation fails instead, naming the
    job."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        if r == 0 and any(j.id == 1 for j in s.jobs):
            raise ValueError("priority too small")
        return {j.id: on([V[j.id]]) for j in s.jobs}

    trace = [job(0, 100.0), job(1, 100.0)]
    result = simulate(ScriptedPolicy(decide), trace, cluster(), model())
    assert (result.isolated_rounds, result.isolated_jobs, result.fallback_rounds) == (1, (1,), 0)
    assert result.jobs[0].start_s == 0.0 and result.jobs[1].start_s > 0.0
    with pytest.raises(SimulationError, match=r"failed on job 1 in round 0.*priority too small"):
        simulate(ScriptedPolicy(decide), trace, cluster(), model(), SimConfig(validate_plans=True))


def test_hadare_copies_add_progress_times_efficiency() -> None:
    """Two 1-GPU copies on two nodes progress at (10 + 10) x 0.9 it/s."""
    two_nodes = ClusterView.from_counts({"v100": 2}, gpus_per_server=1)
    slots = [GpuSlot("v100-000", 0), GpuSlot("v100-001", 0)]
    policy = ScriptedPolicy(lambda r, s: {0: Allocation.copies_on([[slots[0]], [slots[1]]], 32)})
    result = simulate(
        policy, [job(0, 1800.0)], two_nodes, model(), SimConfig(copy_efficiency=0.9, fork_all=True)
    )
    assert result.jobs[0].finish_s == pytest.approx(100.0)
    assert result.jobs[0].used_copies
    assert result.jobs[0].jct_s >= result.jobs[0].copies_bound_s


def test_mixed_types_run_at_the_slowest_gpu_unless_the_batch_follows_speed() -> None:
    """v100+k80 with an even batch split runs at the k80 pace (3 it/s for 2 GPUs). (One GPU
    per server, so no server could hold the job whole instead.)"""
    one_each = ClusterView.from_counts({"v100": 1, "k80": 1})
    policy = ScriptedPolicy(lambda r, s: {0: on([V[0], K[0]])})
    result = simulate(policy, [job(0, 300.0, num_gpus=2)], one_each, model())
    assert result.jobs[0].finish_s == pytest.approx(100.0)
    weighted = ScriptedPolicy(
        lambda r, s: {0: Allocation.on([V[0], K[0]], 19000, weights=[16.0, 3.0])}
    )
    faster = simulate(weighted, [job(0, 300.0, num_gpus=2)], one_each, model())
    assert faster.jobs[0].finish_s == pytest.approx(300.0 / 9.5, rel=1e-3)


def test_a_policy_that_never_runs_a_job_is_reported() -> None:
    """With nothing running and no arrivals left, the simulator stops with the plan's reasons."""

    class Idle:
        name = "idle"

        def plan(self, snapshot: Snapshot, now: float) -> Plan:
            return Plan({}, {j.id: "waiting: never" for j in snapshot.jobs})

    with pytest.raises(SimulationError, match=r"made no progress.*waiting: never"):
        simulate(Idle(), [job(0, 10.0)], cluster(), model(), SimConfig(stall_rounds=3))


def test_duration_traces_convert_at_the_fastest_type() -> None:
    """duration_s is the time alone on the fastest allowed type: 100 s on v100 = 1000 it."""
    spec = TraceJob(
        id=0, arrival_s=0.0, job_type="a", num_gpus=1, iterations=None, duration_s=100.0
    )
    policy = ScriptedPolicy(lambda r, s: {0: on([V[0]])})
    result = simulate(policy, [spec], cluster(), model())
    assert result.jobs[0].iterations == pytest.approx(1000.0)
    assert result.jobs[0].jct_s == pytest.approx(100.0)


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="round length"):
        SimConfig(round_s=0)
    with pytest.raises(ValueError, match="overhead"):
        SimConfig(overhead_s=-1)
    with pytest.raises(ValueError, match="early round delay"):
        SimConfig(early_round_delay_s=-1)


def test_a_failing_policy_is_named() -> None:
    """With validate_plans, an exception inside a policy becomes a SimulationError naming
    policy and round; without, the simulation stalls and says why."""

    def decide(r: int, s: Snapshot) -> dict[int, Allocation]:
        raise ZeroDivisionError("oops")

    with pytest.raises(SimulationError, match=r"'scripted' failed in round 0 .*oops"):
        simulate(
            ScriptedPolicy(decide),
            [job(0, 10.0)],
            cluster(),
            model(),
            SimConfig(validate_plans=True),
        )
    # Without validate_plans the rounds keep every job where it is, as the daemon's do,
    # and the stall names the failure.
    with pytest.raises(SimulationError, match=r"made no progress.*'scripted' failed.*oops"):
        simulate(
            ScriptedPolicy(decide), [job(0, 10.0)], cluster(), model(), SimConfig(stall_rounds=3)
        )


class _CountingLas(LasPolicy):
    """LAS that counts the rounds it is asked to plan."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self.calls += 1
        return super().plan(snapshot, now)


def test_settled_rounds_are_carried_over_with_the_same_results() -> None:
    """A policy that declares its plan stable when settled is not asked to plan rounds in
    which every job runs and none came or went; the results are those of a run that
    decides every round (an on_round observer turns carrying off)."""
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    cluster = ClusterView.from_counts({"v100": 8, "p100": 8, "k80": 8}, gpus_per_server=4)
    trace = generate_trace(60, model, mean_interarrival_s=900.0, seed=5)
    carried, decided = _CountingLas(), _CountingLas()
    assert stable_when_settled(carried)
    fast = Simulator(carried, trace, cluster, model).run()
    slow = Simulator(decided, trace, cluster, model, on_round=lambda s, d: None).run()
    assert decided.calls == len(slow.rounds)
    assert carried.calls < len(fast.rounds) / 2
    assert [(j.id, j.start_s, j.finish_s, j.preemptions, j.migrations) for j in fast.jobs] == [
        (j.id, j.start_s, j.finish_s, j.preemptions, j.migrations) for j in slow.jobs
    ]
    assert len(fast.rounds) == len(slow.rounds)
    # Starvation promotion records when jobs ran: that LAS is always asked.
    assert not stable_when_settled(LasPolicy(starvation_s=3600.0))


class _StretchCounting(Simulator):
    """A simulator that counts the carried rounds it ran as stretches."""

    stretched = 0

    def _carry_stretch(self, *args: object, **kwargs: object) -> list[RoundRecord]:
        records = super()._carry_stretch(*args, **kwargs)  # type: ignore[arg-type]
        self.stretched += len(records)
        return records


@pytest.mark.parametrize("name", ["fifo", "las", "srtf", "slurm"])
@pytest.mark.parametrize("overhead_s", [0.0, 45.0])
def test_carried_stretches_give_the_results_of_rounds_one_at_a_time(
    name: str, overhead_s: float
) -> None:
    """Carried rounds run as stretches (on a trace with long quiet spells, a good part
    of its rounds)
    give every job and every round record to the last bit what running each round on its
    own gives (recording segments runs them one at a time), planning times aside."""
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    cluster = ClusterView.from_counts({"v100": 8, "p100": 8, "k80": 8}, gpus_per_server=4)
    trace = generate_trace(80, model, mean_interarrival_s=1800.0, seed=7)
    fast_sim = _StretchCounting(
        make_policy(name), trace, cluster, model, SimConfig(overhead_s=overhead_s)
    )
    fast = fast_sim.run()
    slow = Simulator(
        make_policy(name),
        trace,
        cluster,
        model,
        SimConfig(overhead_s=overhead_s, record_segments=True),
    ).run()
    assert fast_sim.stretched > len(fast.rounds) / 4
    assert fast.jobs == slow.jobs
    assert [replace(r, plan_ms=0.0) for r in fast.rounds] == [
        replace(r, plan_ms=0.0) for r in slow.rounds
    ]


class _Declaring:
    """A policy's plans under declarations set by the test, counting the plans asked for."""

    def __init__(self, inner: Policy, *, after_departures: bool) -> None:
        self.inner = inner
        self.name = inner.name
        self.stable_when_settled = True
        self.stable_after_departures = after_departures
        self.calls = 0

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self.calls += 1
        return self.inner.plan(snapshot, now)


@pytest.mark.parametrize("name", ["fifo", "las", "srtf", "slurm"])
def test_rounds_after_departures_are_carried_with_the_results_of_asking(name: str) -> None:
    """A policy that declares its plan stable after departures is not asked in rounds in
    which every job runs and jobs completed but none arrived; every job's results and
    every round record are those of asking it every round."""
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    cluster = ClusterView.from_counts({"v100": 8, "p100": 8, "k80": 8}, gpus_per_server=4)
    trace = generate_trace(80, model, mean_interarrival_s=700.0, seed=13)
    assert stable_after_departures(make_policy(name))
    after = _Declaring(make_policy(name), after_departures=True)
    settled_only = _Declaring(make_policy(name), after_departures=False)
    fast = Simulator(after, trace, cluster, model).run()
    slower = Simulator(settled_only, trace, cluster, model).run()
    slow = Simulator(make_policy(name), trace, cluster, model, on_round=lambda s, d: None).run()
    assert after.calls < settled_only.calls
    for other in (slower, slow):
        assert fast.jobs == other.jobs
        assert [replace(r, plan_ms=0.0) for r in fast.rounds] == [
            replace(r, plan_ms=0.0) for r in other.rounds
        ]


def test_departures_carry_needs_the_declaration_and_a_settled_one() -> None:
    """Admission by time (fifo's min_recompute_s) or starvation promotion (las) record a
    departure; a policy not stable when settled is not asked about departures."""
    assert not stable_after_departures(make_policy("fifo", min_recompute_s=1920.0))
    assert not stable_after_departures(LasPolicy(starvation_s=3600.0))
    declaring = _Declaring(make_policy("fifo"), after_departures=True)
    declaring.stable_when_settled = False
    assert not stable_after_departures(declaring)


class _CountingFifo(FifoPolicy):
    """FIFO that counts the plans asked for and the rounds it said it starts nobody."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.blocked = 0

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self.calls += 1
        return super().plan(snapshot, now)

    def starts_none(self, waiting: Sequence[JobView], free_by_type: Mapping[str, int]) -> bool:
        answer = super().starts_none(waiting, free_by_type)
        self.blocked += answer
        return answer


@pytest.mark.parametrize("config", [SimConfig(), SimConfig(overhead_s=30.0, early_rounds=True)])
def test_rounds_fifo_starts_nobody_in_are_carried_with_the_results_of_asking(
    config: SimConfig,
) -> None:
    """Rounds in which FIFO's head of the queue does not fit are carried over without
    asking it (StartsNone); every job's results and every round record are those of
    asking it every round, and it is asked again once the head fits."""
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    cluster = ClusterView.from_counts({"v100": 8, "p100": 8, "k80": 8}, gpus_per_server=4)
    trace = generate_trace(120, model, mean_interarrival_s=250.0, seed=17)
    counting = _CountingFifo()
    fast = Simulator(counting, trace, cluster, model, config).run()
    slow = Simulator(make_policy("fifo"), trace, cluster, model, config, on_round=lambda s, d: None)
    slow_result = slow.run()
    assert counting.blocked > 10
    assert counting.calls + counting.blocked <= len(fast.rounds)
    assert fast.jobs == slow_result.jobs
    assert [replace(r, plan_ms=0.0) for r in fast.rounds] == [
        replace(r, plan_ms=0.0) for r in slow_result.rounds
    ]


def test_fifo_starts_none_only_when_its_head_does_not_fit() -> None:
    """The head is the earliest arrival; it starts when an allowed type has room; modes
    that backfill, admit by time or re-draw types never claim it."""
    fifo = FifoPolicy()
    head = JobView(id=2, job_type="ResNet-18", num_gpus=4, total_iterations=10.0, arrival_time=1.0)
    later = JobView(id=1, job_type="ResNet-18", num_gpus=1, total_iterations=10.0, arrival_time=5.0)
    assert fifo.starts_none([later, head], {"v100": 3, "k80": 1})
    assert not fifo.starts_none([later, head], {"v100": 3, "k80": 4})
    picky = replace(head, allowed_gpu_types=frozenset({"v100"}))
    assert fifo.starts_none([later, picky], {"v100": 3, "k80": 4})
    assert not fifo.starts_none([], {"v100": 3})
    for other in (
        FifoPolicy(backfill=True),
        FifoPolicy(min_recompute_s=1920.0),
        FifoPolicy(gavel_compat=True),
    ):
        assert not other.starts_none([later, head], {"v100": 3, "k80": 1})


@pytest.mark.parametrize("name", ["slurm", "srtf", "fifo"])
def test_policies_declared_stable_plan_as_asked_in_settled_rounds(name: str) -> None:
    """For each policy that declares its plan stable when settled, carrying settled rounds
    over gives every job the results of asking the policy every round (an on_round
    observer turns carrying off)."""
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    cluster = ClusterView.from_counts({"v100": 8, "p100": 8, "k80": 8}, gpus_per_server=4)
    trace = generate_trace(60, model, mean_interarrival_s=600.0, seed=11)
    assert stable_when_settled(make_policy(name))
    fast = Simulator(make_policy(name), trace, cluster, model).run()
    slow = Simulator(make_policy(name), trace, cluster, model, on_round=lambda s, d: None).run()
    assert fast.jobs == slow.jobs
    assert len(fast.rounds) == len(slow.rounds)
