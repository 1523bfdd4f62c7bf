"""Small clusters, throughput models and snapshots for the research-policy tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot

#: Iterations/s of each job type on one GPU of each type; n GPUs run n x 0.9 that.
SPEEDS: Mapping[str, Mapping[str, float]] = {
    "vision": {"v100": 10.0, "p100": 5.0, "k80": 1.0},
    "speech": {"v100": 4.0, "p100": 3.0, "k80": 2.0},
    "text": {"v100": 6.0, "p100": 3.0, "k80": 1.5},
}


def model(
    pairs: Mapping[tuple[str, str, str, int], tuple[float, float]] | None = None,
) -> ThroughputModel:
    profile: dict[tuple[str, str, int, bool], float] = {}
    for job_type, per_gpu in SPEEDS.items():
        for gpu_type, speed in per_gpu.items():
            for n in (1, 2, 4, 8):
                scale = 1.0 if n == 1 else 0.9
                profile[(job_type, gpu_type, n, True)] = speed * n * scale
                profile[(job_type, gpu_type, n, False)] = speed * n * scale * 0.8
    return ThroughputModel(profile, pairs)


def job(job_id: int, **fields: Any) -> JobView:
    values: dict[str, Any] = {
        "id": job_id,
        "job_type": "vision",
        "num_gpus": 1,
        "total_iterations": 36_000.0,
        "batch_size": 64,
    }
    values.update(fields)
    return JobView(**values)


def snapshot(
    counts: Mapping[str, int],
    jobs: Sequence[JobView],
    *,
    gpus_per_server: int = 4,
    throughput: ThroughputModel | None = None,
    round_seconds: float = 360.0,
    round_number: int = 0,
    memory_bytes: int = 0,
) -> Snapshot:
    return Snapshot(
        cluster=ClusterView.from_counts(
            counts, gpus_per_server=gpus_per_server, memory_bytes=memory_bytes
        ),
        jobs=tuple(jobs),
        round_number=round_number,
        round_seconds=round_seconds,
        throughput=throughput or model(),
    )
