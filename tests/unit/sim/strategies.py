"""Hypothesis strategies: small random clusters, throughput models and traces."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView
from master.sim.trace import TraceJob

GPU_TYPES = ("v100", "p100", "k80")
JOB_TYPES = ("alpha", "beta", "gamma")


@dataclass(frozen=True)
class Case:
    cluster: ClusterView
    model: ThroughputModel
    trace: tuple[TraceJob, ...]
    round_s: float
    overhead_s: float
    early_rounds: bool = False


@st.composite
def models(draw: st.DrawFn) -> ThroughputModel:
    profile: dict[tuple[str, str, int, bool], float] = {}
    pairs: dict[tuple[str, str, str, int], tuple[float, float]] = {}
    for job in JOB_TYPES:
        for gpu in GPU_TYPES:
            base = draw(st.floats(2.0, 20.0))
            for n in (1, 2, 4):
                scale = draw(st.floats(0.6, 1.0))
                profile[(job, gpu, n, True)] = base * n * scale
                profile[(job, gpu, n, False)] = base * n * scale * draw(st.floats(0.5, 1.0))
    for a in JOB_TYPES:
        for b in JOB_TYPES:
            for gpu in GPU_TYPES:
                for n in (1, 2, 4):
                    if draw(st.booleans()):
                        fa, fb = draw(st.floats(0.2, 1.0)), draw(st.floats(0.2, 1.0))
                        pairs[(a, b, gpu, n)] = (
                            profile[(a, gpu, n, True)] * fa,
                            profile[(b, gpu, n, True)] * fb,
                        )
    return ThroughputModel(profile, pairs)


@st.composite
def cases(draw: st.DrawFn, max_jobs: int = 8) -> Case:
    counts = {t: draw(st.integers(0, 6)) for t in GPU_TYPES}
    if sum(counts.values()) == 0:
        counts["v100"] = 1
    per_server = draw(st.integers(1, 4))
    cluster = ClusterView.from_counts(counts, gpus_per_server=per_server)
    biggest = max(counts.values())
    sizes = [n for n in (1, 2, 4) if n <= biggest]
    n_jobs = draw(st.integers(1, max_jobs))
    jobs = []
    for i in range(n_jobs):
        num_gpus = draw(st.sampled_from(sizes))
        fitting = [t for t in GPU_TYPES if counts[t] >= num_gpus]
        allowed: frozenset[str] = frozenset()
        if draw(st.booleans()):
            allowed = frozenset(
                draw(st.lists(st.sampled_from(fitting), min_size=1, max_size=len(fitting)))
            )
        jobs.append(
            TraceJob(
                id=i,
                arrival_s=draw(st.sampled_from([0.0, 10.0, 100.0, 500.0, 2000.0, 7000.0])),
                job_type=draw(st.sampled_from(JOB_TYPES)),
                num_gpus=num_gpus,
                iterations=draw(st.floats(100.0, 20_000.0)),
                user=draw(st.sampled_from(["ann", "bob", "cy"])),
                priority=draw(st.sampled_from([1.0, 1.0, 2.0])),
                batch_size=draw(st.sampled_from([16, 32, 64])),
                allowed_gpu_types=allowed,
                preemptible=draw(st.sampled_from([True, True, True, False])),
                shareable=draw(st.booleans()),
            )
        )
    return Case(
        cluster=cluster,
        model=draw(models()),
        trace=tuple(jobs),
        round_s=draw(st.sampled_from([120.0, 360.0])),
        overhead_s=draw(st.sampled_from([0.0, 0.0, 20.0])),
        early_rounds=draw(st.booleans()),
    )
