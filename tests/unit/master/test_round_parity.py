"""The simulator and the daemon decide rounds alike: the same scripted arrivals and
completions, run through the simulator and through the daemon's round decision
(``master.rounds.planner.decide``: its settings, its completion notices rebuilt from stored jobs),
give the same decisions round by round (placements, starts, stops, migrations, resizes,
waiting reasons) for every registered policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from master.rounds.planner import decide
from master.rounds.snapshot import RoundInput, job_view
from master.scheduling.diff import ActionKind
from master.scheduling.policy import Policy, available_policies, make_policy, policy_parameters
from master.scheduling.round import CompletedJob, RoundDecision, RoundState
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import JobView
from master.settings import Settings
from master.sim.cluster_spec import build_cluster
from master.sim.data import THROUGHPUTS
from master.sim.engine import SimConfig, Simulator
from master.sim.trace import TraceJob
from store.domain import Job, JobSpec
from store.states import JobState, ProgramKind

# Unix time of the first arrival: the daemon's clock, in whole seconds.
EPOCH = 1_790_000_000.0
TYPES = (
    "ResNet-18 (batch size 64)",
    "ResNet-50 (batch size 64)",
    "Transformer (batch size 64)",
    "LM (batch size 20)",
)


def trace() -> list[TraceJob]:
    """Twelve jobs arriving over 22 minutes, 1 or 2 GPUs, two users, two that may not be
    preempted, several shareable: enough to fill and churn a six-GPU cluster."""
    jobs = []
    for i in range(12):
        jobs.append(
            TraceJob(
                id=i + 1,
                arrival_s=EPOCH + 120.0 * i,
                job_type=TYPES[i % len(TYPES)],
                num_gpus=(1, 2, 1, 2)[i % 4],
                iterations=float(20_000 + 15_000 * (i % 5)),
                user=("alice", "bob")[i % 2],
                batch_size=64 if i % 4 != 3 else 20,
                preemptible=i not in (2, 7),
                shareable=i % 3 == 0,
            )
        )
    return jobs


def stored_job(view: JobView, state: JobState, iterations_done: float) -> Job:
    """The job as the daemon's store would hold it."""
    at = datetime.fromtimestamp(view.arrival_time, UTC)
    return Job(
        id=view.id,
        user=view.user,
        spec=JobSpec(
            name=f"job-{view.id}",
            num_gpus=view.num_gpus,
            iterations=int(view.total_iterations),
            program_kind=ProgramKind.WORKLOAD,
            workload="resnet",
            batch_size=view.batch_size,
            priority=view.priority,
            allowed_gpu_types=tuple(sorted(view.allowed_gpu_types)),
            preemptible=view.preemptible,
            shareable=view.shareable,
            forkable=view.forkable,
            job_type=view.job_type,
            time_limit_s=int(view.time_limit_s),
        ),
        state=state,
        reason="",
        iterations_done=int(iterations_done),
        checkpoint_iterations=0,
        attained_service=view.attained_service,
        retries=0,
        exit_code=None,
        preemptions=0,
        migrations=0,
        submitted_at=at,
        started_at=None,
        finished_at=None,
        version=1,
    )


@dataclass
class DaemonSide:
    """The daemon's round decision fed the simulated cluster's state round by round."""

    policy: Policy
    settings: Settings
    decisions: list[RoundDecision] = field(default_factory=list)

    def round(self, state: RoundState) -> RoundDecision:
        jobs = {
            view.id: stored_job(
                view,
                JobState.RUNNING if view.current is not None else JobState.PENDING,
                view.iterations_done,
            )
            for view in state.snapshot.jobs
        }
        # The completions as the daemon tells them: rebuilt from the stored, completed job.
        completed = tuple(
            CompletedJob(
                job_view(stored_job(done.job, JobState.COMPLETED, done.iterations), None),
                float(int(done.iterations)),
                done.at,
            )
            for done in state.completed
        )
        inp = RoundInput(
            snapshot=state.snapshot,
            jobs=jobs,
            current={j.id: j.current for j in state.snapshot.jobs if j.current is not None},
            tasks={},
            nodes={},
            completed=completed,
        )
        decision = decide(inp, self.policy, self.settings, state.now)
        self.decisions.append(decision)
        return decision


def params(name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"seed": 3} if "seed" in policy_parameters(name) else {}
    if name == "a-srpt":
        out.update(min_history=2, refit_every=1)  # learns within the scripted run
    return out


def summary(decision: RoundDecision) -> tuple[Any, ...]:
    return (
        tuple((a.kind, a.job_id, a.allocation) for a in decision.actions),
        dict(decision.placements),
        dict(decision.waiting),
        decision.fallback,
        decision.learned,
    )


@pytest.mark.parametrize("name", available_policies())
def test_the_simulator_and_the_daemon_decide_every_round_alike(name: str) -> None:
    """Every round the simulator decided, the daemon's round decides the same way from the
    same state and the same completions, with its default settings (hysteresis included)."""
    daemon = DaemonSide(make_policy(name, **params(name)), Settings())
    sim_decisions: list[RoundDecision] = []

    def both(state: RoundState, decision: RoundDecision) -> None:
        sim_decisions.append(decision)
        assert summary(daemon.round(state)) == summary(decision), (
            f"round {state.snapshot.round_number} at t={state.now - EPOCH:.0f}s"
        )

    config = SimConfig(
        round_s=600.0,
        early_rounds=True,
        min_migration_gain=Settings().min_migration_gain,
        validate_plans=True,
    )
    result = Simulator(
        make_policy(name, **params(name)),
        trace(),
        build_cluster("v100:2,p100:2,k80:2", 2),
        ThroughputModel.from_gavel_json(THROUGHPUTS),
        config,
        on_round=both,
    ).run()
    assert len(result.jobs) == 12
    assert len(daemon.decisions) == len(sim_decisions) >= 6
    kinds = {a.kind for d in sim_decisions for a in d.actions}
    assert {ActionKind.START, ActionKind.EXTEND} <= kinds
    assert sum(len(d.waiting) for d in sim_decisions) > 0, "no job ever waited"
    if name == "a-srpt":
        assert sum(d.learned for d in daemon.decisions) == 11  # the last one is never told


def recorder(into: list[RoundDecision]) -> Callable[[RoundState, RoundDecision], None]:
    def record(_state: RoundState, decision: RoundDecision) -> None:
        into.append(decision)

    return record


def test_the_scripted_run_moves_stops_and_holds_back_jobs() -> None:
    """The scenario above is not a quiet one: over the policies, jobs are migrated and
    stopped, and some planned moves are held back by hysteresis (the daemon's rule the
    simulator used to skip), so the comparison covers those decisions too."""
    kinds: set[ActionKind] = set()
    held_back = 0
    for name in available_policies():
        decisions: list[RoundDecision] = []
        Simulator(
            make_policy(name, **params(name)),
            trace(),
            build_cluster("v100:2,p100:2,k80:2", 2),
            ThroughputModel.from_gavel_json(THROUGHPUTS),
            SimConfig(round_s=600.0, early_rounds=True),
            on_round=recorder(decisions),
        ).run()
        kinds |= {a.kind for d in decisions for a in d.actions}
        held_back += sum(
            1 for d in decisions for j, a in d.plan.allocations.items() if d.placements[j] != a
        )
    assert {ActionKind.MIGRATE, ActionKind.STOP} <= kinds
    assert held_back > 0
