"""Speed lookups the research policies share: kept between rounds, never stale."""

from __future__ import annotations

from dataclasses import replace

from master.scheduling.policies._speeds import best_rate
from master.scheduling.throughput import ThroughputModel
from tests.unit.policies.builders import job, snapshot


def test_best_rate_follows_the_job_its_allowed_types_the_cluster_and_the_model() -> None:
    """The fastest speed is the job's own on each cluster and model, whatever was asked
    before: per GPU count, per allow-list, per cluster capacity and per model."""
    vision = job(1, num_gpus=2)
    both = snapshot({"v100": 4, "k80": 4}, [vision])
    assert best_rate(both, vision) == 10.0 * 2 * 0.9
    assert best_rate(both, replace(vision, id=2, num_gpus=1)) == 10.0
    assert (
        best_rate(both, replace(vision, id=3, allowed_gpu_types=frozenset({"k80"})))
        == 1.0 * 2 * 0.9
    )
    # A cluster whose V100s cannot hold the job: its best is the K80s'.
    small = snapshot({"v100": 1, "k80": 4}, [vision])
    assert best_rate(small, vision) == 1.0 * 2 * 0.9
    slower = ThroughputModel({("vision", "v100", 2, True): 5.0}, None)
    assert best_rate(snapshot({"v100": 4}, [vision], throughput=slower), vision) == 5.0
    assert best_rate(both, vision) == 10.0 * 2 * 0.9
