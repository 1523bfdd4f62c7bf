"""Gavel-compatible mode: the simulator's rounds and speeds, Gavel's round mechanism over
an allocation, and Gavel's allocations, on traces small enough to work out by hand."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._gavel_fifo import GavelFifo
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot
from master.sim.command import main
from master.sim.engine import SimConfig, simulate
from master.sim.gavel_allocations import finish_time_fair_fractions, max_min_fractions
from master.sim.gavel_compat import (
    MAX_FAILED_LEASES,
    GavelRounds,
    compat_policy,
    lease_fails,
    max_min_allocator,
    round_iterations,
)
from master.sim.metrics import summarize
from master.sim.trace import TraceJob

COMPAT = SimConfig(gavel_compat=True)


def model() -> ThroughputModel:
    return ThroughputModel(
        {
            ("a", "v100", 1, True): 10.0,
            ("a", "k80", 1, True): 2.0,
            ("a", "v100", 2, True): 16.0,
            ("a", "v100", 2, False): 8.0,
        }
    )


def servers(v100: int = 4, k80: int = 4) -> ClusterView:
    """Gavel's server model: one GPU per server."""
    return ClusterView.from_counts({"v100": v100, "k80": k80}, gpus_per_server=1)


def v(i: int) -> GpuSlot:
    return GpuSlot(f"v100-{i:03d}", 0)


def k(i: int) -> GpuSlot:
    return GpuSlot(f"k80-{i:03d}", 0)


def job(job_id: int, iters: float, arrival: float = 0.0, gpus: int = 1) -> TraceJob:
    return TraceJob(
        id=job_id, arrival_s=arrival, job_type="a", num_gpus=gpus, iterations=iters, batch_size=32
    )


class Scripted:
    """Places jobs by (round number, snapshot); records when it was asked."""

    name = "scripted"

    def __init__(self, decide: Callable[[int, Snapshot], dict[int, list[GpuSlot]]]) -> None:
        self._decide = decide
        self.calls: list[float] = []

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self.calls.append(now)
        chosen = self._decide(snapshot.round_number, snapshot)
        return Plan({j: Allocation.on(slots, 32) for j, slots in chosen.items()})


# ---------------------------------------------------------------- simulator side


def test_lease_runs_whole_iterations_and_the_round_ends_with_the_last_lease() -> None:
    """At 2 it/s on a K80 a 360.25 s round holds floor(720.5) = 720 iterations, done at
    t=360.0, so the next round starts then; the default mode runs the full 360.25 s."""
    policy = Scripted(lambda r, s: {0: [k(0)]})
    config = SimConfig(gavel_compat=True, round_s=360.25, record_segments=True)
    result = simulate(policy, [job(0, 1000.0)], servers(), model(), config)
    first = result.segments[0]
    assert first.iterations == 720.0
    assert first.end_s == pytest.approx(360.0)
    assert policy.calls[1] == pytest.approx(360.0)
    # 280 iterations left at 2 it/s: 140 s more.
    assert result.jobs[0].finish_s == pytest.approx(500.0)

    default = Scripted(lambda r, s: {0: [k(0)]})
    simulate(default, [job(0, 1000.0)], servers(), model(), SimConfig(round_s=360.25))
    assert default.calls[1] == pytest.approx(360.25)


def test_a_job_runs_at_its_consolidated_speed_whatever_its_servers() -> None:
    """A 2-GPU job on two one-GPU servers runs at the table's 16 it/s in compat mode (Gavel
    never reads the unconsolidated figure), at 8 it/s by default."""
    trace = [job(0, 1600.0, gpus=2)]
    both = Scripted(lambda r, s: {0: [v(0), v(1)]})
    assert simulate(both, trace, servers(), model(), COMPAT).jobs[0].jct_s == pytest.approx(100.0)
    spread = Scripted(lambda r, s: {0: [v(0), v(1)]})
    assert simulate(spread, trace, servers(), model()).jobs[0].jct_s == pytest.approx(200.0)


def test_with_nothing_placed_the_clock_jumps_to_the_next_arrival() -> None:
    """A round that places nothing is followed by one at the next arrival (t=1000), not
    one round length later."""
    policy = Scripted(lambda r, s: {} if r == 0 else {j.id: [v(j.id)] for j in s.jobs})
    simulate(policy, [job(0, 100.0), job(1, 100.0, arrival=1000.0)], servers(), model(), COMPAT)
    assert policy.calls[:2] == [0.0, 1000.0]


def test_every_planned_move_is_made_even_to_a_slower_type() -> None:
    """Moving a running job from a V100 to a K80 is carried out in compat mode (Gavel has
    no hysteresis); by default the daemon's hysteresis keeps it on the V100."""
    policy = Scripted(lambda r, s: {0: [v(0)] if r == 0 else [k(0)]})
    moved = simulate(policy, [job(0, 7200.0)], servers(), model(), COMPAT).jobs[0]
    assert moved.migrations == 1 and moved.gpu_seconds.get("k80", 0.0) > 0
    kept = simulate(
        Scripted(lambda r, s: {0: [v(0)] if r == 0 else [k(0)]}),
        [job(0, 7200.0)],
        servers(),
        model(),
    ).jobs[0]
    assert kept.migrations == 0 and "k80" not in kept.gpu_seconds


def test_a_lease_that_leaves_a_gpu_without_an_iteration_fails_and_the_job_is_dropped() -> None:
    """A 2-GPU job at 16 it/s with 5,761 iterations runs 5,760 in round 0; the last one
    cannot be split over 2 GPUs, so each later lease fails, and after five the job is
    dropped: its JCT is left out of the average, as in Gavel's figures."""
    assert lease_fails(1.0, 2) and not lease_fails(2.0, 2) and lease_fails(0.0, 1)
    trace = [job(0, 5761.0, gpus=2), job(1, 3600.0)]
    policy = Scripted(lambda r, s: {j.id: ([v(0), v(1)] if j.id == 0 else [v(2)]) for j in s.jobs})
    result = simulate(policy, trace, servers(), model(), COMPAT)
    dropped, other = result.jobs
    assert dropped.failed and dropped.iterations == 5760.0
    assert not other.failed and other.jct_s == pytest.approx(360.0)
    # One 360 s round, then MAX_FAILED_LEASES leases of one iteration (1/16 s) each.
    assert dropped.finish_s == pytest.approx(360.0 + MAX_FAILED_LEASES / 16.0)
    assert summarize(result).avg_jct_s == pytest.approx(360.0)


def test_round_iterations_are_whole_and_capped_by_what_is_left() -> None:
    """floor(rate x round), never more than the iterations left, 0 at rate 0."""
    assert round_iterations(2.0, 1000.0, 360.25) == 720.0
    assert round_iterations(2.0, 10.0, 360.0) == 10.0
    assert round_iterations(0.0, 10.0, 360.0) == 0.0


# ---------------------------------------------------------------- Gavel's rounds


def _gavel_rounds(reset_s: float = 1920.0) -> GavelRounds:
    return GavelRounds(
        "gavel", max_min_allocator(agnostic=False), shuffle_types=False, reset_interval_s=reset_s
    )


def test_a_job_arriving_after_the_recompute_waits_for_the_next_one_with_gpus_free() -> None:
    """The allocation is recomputed at t=10 (first arrival); job 1 arrives at t=100 and
    has no allocation until the first round 1920 s after that recompute (t=2170), though
    three V100s idle meanwhile. Recomputing at every change starts it at t=370."""
    trace = [job(0, 36000.0, arrival=10.0), job(1, 3600.0, arrival=100.0)]
    cluster = servers(v100=4, k80=0)
    slow = simulate(_gavel_rounds(), trace, cluster, model(), COMPAT)
    assert slow.jobs[1].start_s == pytest.approx(2170.0)
    eager = simulate(_gavel_rounds(reset_s=0.0), trace, cluster, model(), COMPAT)
    assert eager.jobs[1].start_s == pytest.approx(370.0)


def test_two_jobs_on_one_gpu_alternate_by_their_received_fraction() -> None:
    """Two equal jobs on one V100 each get half of it; the job that ran last round has the
    larger fraction and so the lower priority: they alternate, each needing two rounds,
    and finish at 1,080 s and 1,440 s."""
    trace = [job(0, 7200.0), job(1, 7200.0)]
    config = SimConfig(gavel_compat=True, record_segments=True)
    result = simulate(_gavel_rounds(), trace, servers(v100=1, k80=0), model(), config)
    order = [seg.job_id for seg in result.segments]
    assert order in ([0, 1, 0, 1], [1, 0, 1, 0])
    assert sorted(j.finish_s for j in result.jobs) == pytest.approx([1080.0, 1440.0])


def test_compat_policy_maps_names_and_refuses_unknown_parameters() -> None:
    """fifo, las and gavel become Gavel's rounds; other policies run as they are; a
    parameter the compat mode does not take, or an unknown objective, is refused by name."""
    assert isinstance(compat_policy("las", {}, seed=0), GavelRounds)
    assert not isinstance(compat_policy("srtf", {}, seed=0), GavelRounds)
    with pytest.raises(ValueError, match="efficiency_weight"):
        compat_policy("gavel", {"efficiency_weight": 0.1}, seed=0)
    assert isinstance(
        compat_policy("las", {"objective": "finish_time_fairness"}, seed=0), GavelRounds
    )
    with pytest.raises(ValueError, match="objective"):
        compat_policy("gavel", {"objective": "makespan"}, seed=0)
    with pytest.raises(ValueError, match="objective"):
        compat_policy("fifo", {"objective": "finish_time_fairness"}, seed=0)


# ---------------------------------------------------------------- Gavel's allocations


def _view(job_id: int, gpus: int = 1) -> JobView:
    return JobView(id=job_id, job_type="a", num_gpus=gpus, total_iterations=1000.0)


def test_agnostic_max_min_spreads_a_job_over_equal_types() -> None:
    """With every throughput 1 any split is optimal; the interior-point optimum Gavel gets
    splits a lone job's time evenly over three equal types."""
    capacity = {"v100": 4, "p100": 4, "k80": 4}
    thr = {(0, t): 1.0 for t in capacity}
    x = max_min_fractions([_view(0)], capacity, thr)[0]
    assert [x[t] for t in sorted(x)] == pytest.approx([1 / 3] * 3, abs=1e-4)


def test_heterogeneity_aware_max_min_puts_a_lone_job_on_its_fast_type() -> None:
    """A job 5x faster on a V100 than on a K80 gets all its time on the V100."""
    x = max_min_fractions([_view(0)], {"v100": 1, "k80": 1}, {(0, "v100"): 10.0, (0, "k80"): 2.0})
    assert x[0].get("v100", 0.0) == pytest.approx(1.0, abs=1e-4)
    assert x[0].get("k80", 0.0) == pytest.approx(0.0, abs=1e-4)


def test_finish_time_fairness_halves_one_gpu_between_equal_jobs() -> None:
    """Two identical jobs with the same history split one GPU evenly."""
    jobs = [_view(0), _view(1)]
    x = finish_time_fair_fractions(
        jobs,
        {"v100": 1},
        {(0, "v100"): 10.0, (1, "v100"): 10.0},
        since_arrival={0: 0.0, 1: 0.0},
        remaining={0: 1000.0, 1: 1000.0},
        isolated_s={0: 200.0, 1: 200.0},
    )
    assert x[0]["v100"] == pytest.approx(0.5, abs=1e-4)
    assert x[1]["v100"] == pytest.approx(0.5, abs=1e-4)


# ---------------------------------------------------------------- end to end


def test_compat_mode_reproduces_gavels_figures_on_its_artifact_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On Gavel's 15-job artifact trace (v100:2,k80:4) the compat mode gives Gavel's own
    average JCTs within 2%: fifo 2.106 h, max_min_fairness 1.675 h,
    max_min_fairness_perf 1.201 h (Gavel's simulator, seed 0)."""
    code = main(
        [
            "--trace",
            "artifact_evaluation",
            "--cluster",
            "v100:2,p100:0,k80:4",
            "--policy",
            "fifo,las,gavel",
            "--gavel-compat",
            "--json",
        ]
    )
    assert code == 0
    results = {
        r["policy"]: r["avg_jct_s"] / 3600 for r in json.loads(capsys.readouterr().out)["results"]
    }
    assert results["fifo"] == pytest.approx(2.106, rel=0.02)
    assert results["las"] == pytest.approx(1.675, rel=0.02)
    assert results["gavel"] == pytest.approx(1.201, rel=0.02)


def test_compat_mode_and_early_rounds_exclude_each_other(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--gavel-compat with --early-rounds is a usage error naming both."""
    code = main(
        ["--trace", "small_test", "--cluster", "v100:4", "--gavel-compat", "--early-rounds"]
    )
    assert code == 2
    assert "--gavel-compat and --early-rounds" in capsys.readouterr().err


def test_fifo_keeps_the_head_of_the_queue_when_a_freed_type_is_too_small() -> None:
    """Job 0 (1 GPU) finishes on the only V100; the head of the queue, job 1, needs 2 GPUs
    and does not fit there. As in Gavel it stays at the head and is admitted in the same
    recompute (on the alphabetically last type with a GPU left, Gavel's choice), and job
    2 after it; it is not skipped until the next recompute."""
    cluster = ClusterView.from_counts({"v100": 1, "k80": 2}, gpus_per_server=1)

    def snapshot(*jobs: JobView) -> Snapshot:
        return Snapshot(cluster, jobs, 0, 360.0, model())

    core = GavelFifo(random.Random(0), 0.0)
    assert core.assign_types(snapshot(_view(0))) == {0: "v100"}
    assigned = core.assign_types(snapshot(_view(1, gpus=2), _view(2)))
    assert set(assigned) == {1, 2}
    assert assigned[1] == "v100"
