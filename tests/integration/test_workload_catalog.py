"""The master's copy of the built-in workload catalog matches the worker's own registry."""

from __future__ import annotations

from master.jobs.workloads import CATALOG
from worker.workloads.registry import WORKLOADS


def test_master_and_worker_agree_on_every_builtin_workload() -> None:
    """Same names, default batch sizes and throughput-model keys on both sides, so a job's
    default job type is the one its measurements are recorded under."""
    assert sorted(CATALOG) == sorted(WORKLOADS)
    for name, workload in WORKLOADS.items():
        info = CATALOG[name]
        assert info.default_batch_size == workload.default_batch_size, name
        assert info.job_type() == workload.job_type(), name
        assert info.job_type(64) == workload.job_type(64), name
