"""The round decision (master.scheduling.round.decide_round), without threads, clocks or a
database: first rounds and rounds right after a completion, lost leases, non-preemptible
jobs, refused assignments, invalid plans and failing policies, hysteresis, and what the
policy is told and keeps."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from master.scheduling.diff import ActionKind
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policy import make_policy
from master.scheduling.round import (
    CompletedJob,
    LostLease,
    RoundRules,
    RoundState,
    TaskPlacement,
    decide_round,
    isolated_reason,
)
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC).timestamp()
# n1: two v100, n2: two k80.
CLUSTER = ClusterView(
    (
        NodeView("n1", (GpuView("n1", 0, "v100"), GpuView("n1", 1, "v100"))),
        NodeView("n2", (GpuView("n2", 0, "k80"), GpuView("n2", 1, "k80"))),
    )
)
V0, V1, K0, K1 = GpuSlot("n1", 0), GpuSlot("n1", 1), GpuSlot("n2", 0), GpuSlot("n2", 1)
MODEL = ThroughputModel({("a", "v100", 1, True): 10.0, ("a", "k80", 1, True): 2.0})


class Scripted:
    """A policy that plans what the test says and records what it was shown and told."""

    name = "scripted"

    def __init__(self, decide: Callable[[Snapshot], Mapping[int, Allocation] | Plan]) -> None:
        self._decide = decide
        self.shown: list[tuple[int, ...]] = []
        self.told: list[tuple[int, float, float]] = []

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self.shown.append(tuple(j.id for j in snapshot.jobs))
        out = self._decide(snapshot)
        return out if isinstance(out, Plan) else Plan(dict(out))

    def observe_completion(self, job: JobView, iterations: float, now: float) -> None:
        self.told.append((job.id, iterations, now))

    def export_memory(self) -> dict[str, Any]:
        return {"told": [job_id for job_id, _, _ in self.told]}

    def import_memory(self, memory: Mapping[str, Any]) -> None:
        raise AssertionError("not restored in these tests")


def job(job_id: int, *, current: Allocation | None = None, **kw: Any) -> JobView:
    fields: dict[str, Any] = {"job_type": "a", "num_gpus": 1, "total_iterations": 1000.0}
    fields.update(kw)
    return JobView(id=job_id, current=current, batch_size=32, **fields)


def on(*slots: GpuSlot) -> Allocation:
    return Allocation.on(slots, 32)


def state(*jobs: JobView, **kw: Any) -> RoundState:
    return RoundState(Snapshot(CLUSTER, jobs, 3, 60.0, MODEL), NOW, **kw)


def kinds(decision: Any) -> dict[int, ActionKind]:
    return {a.job_id: a.kind for a in decision.actions}


# -- first rounds and early rounds ------------------------------------------------------


def test_a_first_round_starts_what_fits_splits_tasks_and_says_why_the_rest_waits() -> None:
    """Every placed job starts, a placement over two nodes and GPU types (no server has
    two GPUs left) becomes one task per node and type with ranks counted across them, and
    the job that got nothing waits with the policy's reason."""
    policy = Scripted(
        lambda s: Plan({1: Allocation.on((V0, K0), 32), 3: on(V1, K1)}, {2: "waiting: full"})
    )
    decision = decide_round(
        state(job(1, num_gpus=2), job(2), job(3, num_gpus=2, current=on(V1, K1))), policy
    )
    assert kinds(decision) == {1: ActionKind.START, 3: ActionKind.EXTEND}
    assert decision.started() == (1,)
    assert decision.tasks[1] == (
        TaskPlacement(0, "n1", "v100", (0,), (16,), 0),
        TaskPlacement(0, "n2", "k80", (0,), (16,), 1),
    )
    assert decision.waiting == {2: "waiting: full"}
    assert decision.fallback == "" and decision.memory is None


def test_a_round_right_after_a_completion_tells_the_policy_first_then_fills_the_gpus() -> None:
    """The early round after job 1 completed: the policy is told (once, with the iterations
    it ran and when) before it plans, job 2 starts on the freed GPU in the same round, and
    the decision carries the policy's memory to keep."""
    done = CompletedJob(job(1, current=on(V0)), 640.0, NOW - 1.0)

    def decide(s: Snapshot) -> dict[int, Allocation]:
        assert policy.told == [(1, 640.0, NOW - 1.0)], "told after planning"
        return {2: on(V0)}

    policy = Scripted(decide)
    decision = decide_round(state(job(2), completed=(done,)), policy)
    assert policy.shown == [(2,)]
    assert kinds(decision) == {2: ActionKind.START}
    assert decision.learned == 1
    assert decision.memory == {"told": [1]}


def test_a_policy_that_learns_nothing_keeps_no_memory() -> None:
    """Completions told to a policy that does not learn leave nothing to keep."""
    done = CompletedJob(job(1), 1000.0, NOW)
    decision = decide_round(state(job(2), completed=(done,)), make_policy("fifo"))
    assert decision.learned == 0 and decision.memory is None


def test_a_srpt_learns_from_completions_and_exports_what_it_learned() -> None:
    """a-srpt told of three completions of alice's jobs that ran half their submitted
    iterations predicts half for her next one, and its exported memory restores a policy
    that predicts the same."""
    policy = make_policy("a-srpt", min_history=3, refit_every=1)
    done = tuple(
        CompletedJob(job(i, user="alice", total_iterations=1000.0), 500.0, NOW) for i in (1, 2, 3)
    )
    decision = decide_round(state(job(4, user="alice"), completed=done), policy)
    assert decision.learned == 3
    assert decision.memory is not None
    nxt = job(5, user="alice")
    predicted = policy.predictor.predict(nxt)  # type: ignore[attr-defined]
    assert predicted == pytest.approx(500.0, rel=0.05)
    restored = make_policy("a-srpt", min_history=3, refit_every=1)
    restored.import_memory(dict(decision.memory))  # type: ignore[attr-defined]
    assert restored.predictor.predict(nxt) == pytest.approx(predicted)  # type: ignore[attr-defined]


def test_a_policy_that_fails_to_learn_still_plans() -> None:
    """A policy that raises while told of a completion plans all the same; the error is
    handed back for the caller to report, and nothing learned is kept."""

    class Forgetful(Scripted):
        def observe_completion(self, job: JobView, iterations: float, now: float) -> None:
            raise RuntimeError("cannot learn")

    done = CompletedJob(job(1), 1000.0, NOW)
    decision = decide_round(state(job(2), completed=(done,)), Forgetful(lambda s: {2: on(V0)}))
    assert kinds(decision) == {2: ActionKind.START}
    assert decision.fallback == "" and decision.plan_error is None
    assert [str(e) for e in decision.learn_errors] == ["cannot learn"]
    assert decision.learned == 0 and decision.memory is None


# -- lost leases --------------------------------------------------------------------------


def lost(job_id: int, ends_in: float, *, stops_at_end: bool = True) -> dict[int, LostLease]:
    return {job_id: LostLease(job_id, "n9", 41, NOW + ends_in, stops_at_end)}


def test_a_job_whose_lease_may_still_run_on_a_lost_node_waits_until_it_ends() -> None:
    """The policy does not see the job while its lost lease may run; the job waits, saying
    which lease on which node ends when. Once the lease is over it is placed."""
    policy = Scripted(lambda s: {j.id: on(V0) for j in s.jobs})
    held = decide_round(state(job(1), lost=lost(1, 30.0)), policy)
    assert policy.shown == [()]
    assert held.actions == ()
    ends = datetime.fromtimestamp(NOW + 30.0, UTC)
    assert held.waiting == {1: f"waiting: lease 41 on n9 (lost) ends at {ends:%H:%M:%S} UTC"}

    over = decide_round(state(job(1), lost=lost(1, -1.0)), policy)
    assert kinds(over) == {1: ActionKind.START}


def test_an_opaque_command_on_a_lost_node_is_not_held() -> None:
    """A command runs to completion on its worker whatever the lease, so waiting would not
    make it safe: it is placed at once."""
    policy = Scripted(lambda s: {j.id: on(V0) for j in s.jobs})
    decision = decide_round(state(job(1), lost=lost(1, 30.0, stops_at_end=False)), policy)
    assert kinds(decision) == {1: ActionKind.START}


def test_a_lost_lease_does_not_hold_a_job_that_runs_elsewhere_now() -> None:
    """A job already placed again (it holds GPUs) follows the plan despite its old lease."""
    policy = Scripted(lambda s: {1: on(V0)})
    decision = decide_round(state(job(1, current=on(V0)), lost=lost(1, 30.0)), policy)
    assert kinds(decision) == {1: ActionKind.EXTEND}


# -- non-preemptible jobs -----------------------------------------------------------------


def test_a_running_non_preemptible_job_keeps_its_gpus_and_the_taker_waits() -> None:
    """A plan that moves a running job that may not be preempted (a plain script, an opaque
    command) to a faster GPU and gives its GPU to another job is overruled: it keeps its
    GPU, and the other job waits, saying why. Had it been preemptible, the plan stands."""
    pinned = job(1, current=on(K0), preemptible=False)
    policy = Scripted(lambda s: {1: on(V0), 2: on(K0)})
    decision = decide_round(state(pinned, job(2)), policy)
    assert decision.fallback == ""
    assert dict(decision.placements) == {1: on(K0)}
    assert kinds(decision) == {1: ActionKind.EXTEND}
    assert decision.waiting == {2: "waiting: GPUs held by job 1 (not preemptible)"}

    free = decide_round(state(job(1, current=on(K0)), job(2)), policy)
    assert kinds(free) == {1: ActionKind.MIGRATE, 2: ActionKind.START}


def test_a_running_non_preemptible_job_left_out_of_the_plan_keeps_running() -> None:
    """A policy that forgets a pinned job does not stop it."""
    decision = decide_round(
        state(job(1, current=on(K0), preemptible=False), job(2)), Scripted(lambda s: {2: on(V0)})
    )
    assert kinds(decision) == {1: ActionKind.EXTEND, 2: ActionKind.START}


# -- refused assignments ------------------------------------------------------------------


def test_a_job_whose_start_was_refused_is_started_again_with_new_tasks() -> None:
    """A refused START leaves the job holding nothing (its tasks written off), so the next
    round starts it afresh, with tasks, rather than extending or moving a placement that
    never ran."""
    policy = Scripted(lambda s: {1: on(V0, V1)})
    decision = decide_round(state(job(1, num_gpus=2)), policy)
    assert kinds(decision) == {1: ActionKind.START}
    assert decision.tasks[1] == (TaskPlacement(0, "n1", "v100", (0, 1), (16, 16), 0),)


def test_gpus_of_a_job_failed_by_refusals_go_to_the_next_job_and_teach_nothing() -> None:
    """A job failed by refusals (no Unix account) has left the round: its GPUs are free for
    the next job at once, and it is not told to the policy as a completion."""
    policy = Scripted(lambda s: {2: on(V0)})
    decision = decide_round(state(job(2)), policy)
    assert kinds(decision) == {2: ActionKind.START}
    assert policy.told == [] and decision.learned == 0


# -- plans the round does not carry out ---------------------------------------------------


def test_an_invalid_plan_keeps_every_job_where_it_is() -> None:
    """A plan that double-books a GPU is set aside: running jobs keep their GPUs (extended),
    the others wait naming the problem, and the decision says why."""
    policy = Scripted(lambda s: {1: on(V0), 2: on(V0)})
    decision = decide_round(state(job(1, current=on(K0)), job(2)), policy)
    assert kinds(decision) == {1: ActionKind.EXTEND}
    assert decision.problems and "n1/0" in decision.problems[0]
    assert decision.fallback.startswith("policy 'scripted' produced an invalid plan")
    assert decision.waiting[2] == f"waiting: {decision.fallback}"


def test_a_failing_policy_keeps_every_job_where_it_is() -> None:
    """A policy that raises changes nothing; the error is handed back for the caller."""

    def boom(s: Snapshot) -> dict[int, Allocation]:
        raise ZeroDivisionError("oops")

    decision = decide_round(state(job(1, current=on(K0)), job(2)), Scripted(boom))
    assert kinds(decision) == {1: ActionKind.EXTEND}
    assert isinstance(decision.plan_error, ZeroDivisionError)
    assert "oops" in decision.fallback and decision.problems == ()


# -- a policy that fails on some jobs ----------------------------------------------------


def first_fit(s: Snapshot) -> dict[int, Allocation]:
    """Each job in id order on the first usable GPUs no earlier job took."""
    free = [gpu.slot for gpu in s.cluster.usable_gpus()]
    out: dict[int, Allocation] = {}
    for j in s.jobs:
        if len(free) >= j.num_gpus:
            out[j.id] = Allocation.on(free[: j.num_gpus], 32)
            del free[: j.num_gpus]
    return out


def failing_on(*bad: int) -> Scripted:
    """A policy that raises, as gavel's LP did on a priority of 5e-324, whenever it is shown
    one of the jobs ``bad``, and plans first fit otherwise."""

    def decide(s: Snapshot) -> Mapping[int, Allocation]:
        shown = sorted(j.id for j in s.jobs if j.id in bad)
        if shown:
            raise ValueError(f"c must not contain values inf, nan (job {shown[0]})")
        return first_fit(s)

    return Scripted(decide)


def test_a_policy_failing_on_one_job_still_plans_the_others_and_says_why_it_waits() -> None:
    """Job 2 makes the policy raise: the round isolates it, the others start as the policy
    plans them without it, and job 2 waits naming the policy and its error. The round did
    not fall back, and the policy itself was shown only the whole queue and then the
    others (the jobs were found by trying copies of it)."""
    policy = failing_on(2)
    decision = decide_round(state(job(1), job(2), job(3)), policy)
    assert kinds(decision) == {1: ActionKind.START, 3: ActionKind.START}
    assert decision.waiting == {
        2: "not scheduled: policy scripted fails on this job: "
        "c must not contain values inf, nan (job 2)"
    }
    assert decision.fallback == "" and decision.plan_error is None
    assert list(decision.isolated) == [2]
    assert policy.shown == [(1, 2, 3), (1, 3)]


def test_a_running_job_the_policy_fails_on_keeps_its_gpus_and_nobody_is_put_on_them() -> None:
    """Job 1 runs on V0 and makes the policy raise: it is not preempted for the policy's
    failure (extended where it is), and the policy, not shown V0, places the others on the
    remaining GPUs."""
    decision = decide_round(state(job(1, current=on(V0)), job(2), job(3)), failing_on(1))
    assert kinds(decision) == {1: ActionKind.EXTEND, 2: ActionKind.START, 3: ActionKind.START}
    assert decision.placements[1] == on(V0)
    assert {decision.placements[2], decision.placements[3]} == {on(V1), on(K0)}
    assert decision.waiting == {} and list(decision.isolated) == [1]


def test_several_jobs_the_policy_fails_on_among_many_are_found_in_few_tries() -> None:
    """Two bad jobs among 64: both are isolated in at most 2 x 2 x log2(64) tries of a copy
    of the policy plus one without any job, and the round places what fits of the rest."""
    jobs = [job(i) for i in range(1, 65)]
    decision = decide_round(state(*jobs), failing_on(5, 40))
    assert sorted(decision.isolated) == [5, 40]
    assert decision.probes <= 2 * 2 * 6 + 1
    assert decision.started() == (1, 2, 3, 4)
    assert decision.waiting[40].startswith("not scheduled: policy scripted fails on this job")
    assert decision.waiting[6] == "waiting: not chosen by the policy this round"


def test_when_no_single_job_explains_the_failure_every_job_keeps_what_it_holds() -> None:
    """A policy that fails only when shown jobs 1 and 2 together, one that fails on too many
    jobs to find within the round's tries, and one that fails on the others too: the round
    falls back as before, saying why, and isolates nobody."""

    def both(s: Snapshot) -> dict[int, Allocation]:
        if {1, 2} <= {j.id for j in s.jobs}:
            raise ValueError("1 and 2")
        return first_fit(s)

    decision = decide_round(state(job(1, current=on(K0)), job(2), job(3)), Scripted(both))
    assert kinds(decision) == {1: ActionKind.EXTEND}
    assert decision.fallback.endswith("(it fails only on a combination of jobs)")
    assert decision.waiting[2] == f"waiting: {decision.fallback}"
    assert decision.isolated == {}

    many = decide_round(state(*[job(i) for i in range(1, 101)]), failing_on(*range(1, 101)))
    assert many.placements == {} and many.isolated == {}
    assert many.fallback.endswith("(the jobs it fails on were not found in 64 tries)")
    assert many.probes == 64

    calls = []

    def fails_on_the_second_try(s: Snapshot) -> dict[int, Allocation]:
        calls.append(s)
        if 2 in {j.id for j in s.jobs} or len(calls) > 4:
            raise ValueError("again")
        return first_fit(s)

    again = decide_round(state(job(1), job(2)), Scripted(fails_on_the_second_try))
    assert again.placements == {} and again.isolated == {}
    assert "the jobs it does not fail on alone: ValueError('again')" in again.fallback


def test_an_isolated_reason_is_one_bounded_line() -> None:
    """Newlines and control characters in the error become spaces, a long error is cut,
    and an error without a message is named by its type."""
    reason = isolated_reason("gavel", ValueError("bad\nvalue\0" + "x" * 1000))
    assert reason.startswith("not scheduled: policy gavel fails on this job: bad value x")
    assert "\n" not in reason and "\0" not in reason
    assert len(reason) < 400 and reason.endswith("...")
    assert isolated_reason("hadar", KeyError()) == (
        "not scheduled: policy hadar fails on this job: KeyError"
    )


def test_gavel_with_a_denormal_priority_plans_everyone_else() -> None:
    """A job stored with priority 5e-324 (accepted before priorities were bounded) made
    gavel's LP coefficients infinite every round, and no job was placed for anyone. Either
    gavel plans it, or it alone is isolated; the others are placed."""
    jobs = (job(1, priority=5e-324), job(2), job(3, num_gpus=2))
    decision = decide_round(state(*jobs), make_policy("gavel"))
    assert decision.fallback == ""
    assert {2, 3} <= set(decision.placements)
    assert set(decision.isolated) <= {1}


# -- hysteresis ---------------------------------------------------------------------------


def test_a_move_below_the_minimum_gain_is_not_made_a_faster_one_is() -> None:
    """Moving a running job to an equally fast GPU is not carried out (extended where it
    is); moving it from a k80 to a v100 (5x) is; with min_migration_gain 0 and restarts
    not charged, every move is."""
    same = decide_round(state(job(1, current=on(V0))), Scripted(lambda s: {1: on(V1)}))
    assert kinds(same) == {1: ActionKind.EXTEND}
    assert dict(same.placements) == {1: on(V0)}
    assert same.tasks == {}

    faster = decide_round(state(job(1, current=on(K0))), Scripted(lambda s: {1: on(V1)}))
    assert kinds(faster) == {1: ActionKind.MIGRATE}

    eager = decide_round(
        state(job(1, current=on(V0))),
        Scripted(lambda s: {1: on(V1)}),
        RoundRules(0.0, pay_restart=False),
    )
    assert kinds(eager) == {1: ActionKind.MIGRATE}


def test_a_move_is_not_held_back_when_that_would_double_book_a_gpu() -> None:
    """Job 5 runs alone on two v100s; the plan moves it to an equally fast pair and puts job
    0 beside it, sharing both. Holding 5 back would leave it alone on a GPU that job 0 now
    shares with it: the move is carried out as planned, and every GPU has one owner or
    two sharing partners."""
    node = NodeView("n", tuple(GpuView("n", i, "v100") for i in range(4)))
    cluster = ClusterView((node,))
    a, b, c = GpuSlot("n", 0), GpuSlot("n", 1), GpuSlot("n", 2)
    model = ThroughputModel({("a", "v100", 2, True): 10.0})
    jobs = (
        job(0, num_gpus=2, shareable=True),
        job(5, num_gpus=2, shareable=True, current=Allocation.on((a, b), 32)),
    )
    plan = Plan(
        {
            0: Allocation.on((a, c), 32, shared_with=5),
            5: Allocation.on((a, c), 32, shared_with=0),
        }
    )
    snapshot = Snapshot(cluster, jobs, 3, 60.0, model)
    decision = decide_round(RoundState(snapshot, NOW), Scripted(lambda s: plan))
    assert decision.fallback == ""
    assert Plan(decision.placements).violations(snapshot) == []
    assert kinds(decision) == {0: ActionKind.START, 5: ActionKind.MIGRATE}


def test_a_negative_minimum_gain_is_refused() -> None:
    with pytest.raises(ValueError, match="min_migration_gain"):
        RoundRules(-0.1)


def test_without_actions_a_round_places_the_same_jobs_in_the_same_order() -> None:
    """A round asked for no actions (the simulator's) places every job where the full
    round does, in the order of its actions (moves, starts, extensions), held-back moves
    and a plan carried out whole included, with no actions, tasks or waiting reasons."""
    cases: list[tuple[RoundState, Callable[[Snapshot], Mapping[int, Allocation] | Plan]]] = [
        # 1 extends, 3 migrates to a faster GPU, 4 is moved off the GPU 7 starts on, 2
        # waits, 9 stops.
        (
            state(
                job(1, current=on(V0)),
                job(2),
                job(3, current=on(K0)),
                job(4, current=on(K1)),
                job(7),
                job(9, current=on(V1)),
            ),
            lambda s: {1: on(V0), 3: on(V1), 4: on(K0), 7: on(K1)},
        ),
    ]
    node = NodeView("n", tuple(GpuView("n", i, "v100") for i in range(4)))
    a, b, c = GpuSlot("n", 0), GpuSlot("n", 1), GpuSlot("n", 2)
    shared = Plan(
        {
            0: Allocation.on((a, c), 32, shared_with=5),
            5: Allocation.on((a, c), 32, shared_with=0),
        }
    )
    cases.append(
        (
            RoundState(
                Snapshot(
                    ClusterView((node,)),
                    (
                        job(0, num_gpus=2, shareable=True),
                        job(5, num_gpus=2, shareable=True, current=Allocation.on((a, b), 32)),
                    ),
                    3,
                    60.0,
                    ThroughputModel({("a", "v100", 2, True): 10.0}),
                ),
                NOW,
            ),
            lambda s: shared,
        )
    )
    for round_state, decide in cases:
        full = decide_round(round_state, Scripted(decide))
        lean = decide_round(round_state, Scripted(decide), RoundRules(actions=False))
        assert full.actions and full.waiting is not None
        assert list(lean.placements.items()) == list(full.placements.items())
        assert lean.plan == full.plan and lean.fallback == full.fallback == ""
        assert lean.actions == () and lean.tasks == {} and lean.waiting == {}
    ordered = decide_round(cases[0][0], Scripted(cases[0][1]), RoundRules(actions=False))
    assert list(ordered.placements) == [3, 4, 7, 1]
    # A move to an equally fast GPU nobody else takes is held back: 4 stays on K1.
    held = decide_round(
        state(job(4, current=on(K1))), Scripted(lambda s: {4: on(K0)}), RoundRules(actions=False)
    )
    assert dict(held.placements) == {4: on(K1)}
