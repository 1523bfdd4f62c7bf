"""Summary metrics: percentiles, utilization, queueing, ratios to the lower bound."""

from __future__ import annotations

import pytest

from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, Snapshot
from master.sim.engine import simulate
from master.sim.metrics import percentile, summarize
from master.sim.trace import TraceJob


def test_percentile_interpolates() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.0], 99) == 5.0
    assert percentile(list(range(101)), 95) == pytest.approx(95.0)


class OneAtATime:
    """Runs the lowest-id job on the first GPU; the second GPU stays idle."""

    name = "one-at-a-time"

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        first = min(j.id for j in snapshot.jobs)
        return Plan({first: Allocation.on([GpuSlot("v100-000", 0)], 1)})


def test_summary_of_a_serial_schedule() -> None:
    """Two 100 s jobs run back to back on one of two GPUs: exact JCTs, queue, utilization."""
    model = ThroughputModel({("a", "v100", 1, True): 10.0})
    cluster = ClusterView.from_counts({"v100": 2})
    trace = [TraceJob(i, 0.0, "a", 1, 1000.0) for i in range(2)]
    s = summarize(simulate(OneAtATime(), trace, cluster, model))
    assert s.avg_jct_s == pytest.approx(150.0)
    assert s.makespan_s == pytest.approx(200.0)
    assert s.avg_queue_s == pytest.approx(50.0)
    assert s.utilization == pytest.approx(0.5)
    assert s.lower_bound_avg_jct_s == pytest.approx(100.0)
    assert s.jct_ratio == pytest.approx(1.5)
    assert s.preemptions == 0 and s.migrations == 0
    # Demand 2 jobs on 2 GPUs is not contention: the second job's rho is 200/100.
    assert s.rho_max == pytest.approx(2.0)
