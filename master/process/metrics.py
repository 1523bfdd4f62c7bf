"""Prometheus metrics of one master. Each Master owns its registry, so several masters can
run in one process (tests) without clashing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

ROUND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


@dataclass(frozen=True, slots=True)
class ClusterGauges:
    """Values read from the store at scrape time."""

    jobs_by_state: dict[str, int]
    # (state, gpu type) -> count; state is busy, idle or unavailable.
    gpus: dict[tuple[str, str], int]
    # (user, gpu type) -> GPU-seconds of every attempt so far, running ones up to now.
    gpu_seconds: dict[tuple[str, str], float] = field(default_factory=dict)


class _StoreCollector(Collector):
    def __init__(self, read: Callable[[], ClusterGauges]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        gauges = self._read()
        jobs = GaugeMetricFamily("hadar_jobs", "Jobs by state", labels=["state"])
        for state, count in sorted(gauges.jobs_by_state.items()):
            jobs.add_metric([state.lower()], count)
        yield jobs
        gpus = GaugeMetricFamily("hadar_gpus", "GPUs by state and type", labels=["state", "type"])
        for (state, gpu_type), count in sorted(gauges.gpus.items()):
            gpus.add_metric([state, gpu_type], count)
        yield gpus
        # Read from the store's accounting, so it survives master restarts and only grows.
        used = CounterMetricFamily(
            "hadar_gpu_seconds",
            "GPU-seconds used by each user's jobs, per GPU type (running attempts up to now)",
            labels=["user", "gpu_type"],
        )
        for (user, gpu_type), seconds in sorted(gauges.gpu_seconds.items()):
            used.add_metric([user, gpu_type], seconds)
        yield used


class _LeadershipCollector(Collector):
    def __init__(self, read: Callable[[], tuple[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        role, epoch = self._read()
        roles = GaugeMetricFamily(
            "hadar_master_role",
            "1 for this master's role (active, standby, deposed)",
            labels=["role"],
        )
        for name in ("active", "standby", "deposed"):
            roles.add_metric([name], 1.0 if name == role else 0.0)
        yield roles
        yield GaugeMetricFamily(
            "hadar_master_epoch", "Epoch of this master's term (0 before it first led)", value=epoch
        )


class MasterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.round_duration = Histogram(
            "hadar_round_duration_seconds",
            "Duration of a scheduling round, planning to acknowledgements",
            buckets=ROUND_BUCKETS,
            registry=self.registry,
        )
        # Where a round's time goes: reading the store, planning, storing the decisions, and
        # handing the pushes over (and recording the round's end).
        self.round_phase = Histogram(
            "hadar_round_phase_seconds",
            "Time of one phase of a scheduling round (read, plan, persist, push)",
            labelnames=["phase"],
            buckets=ROUND_BUCKETS,
            registry=self.registry,
        )
        self.round_actions = Counter(
            "hadar_round_actions",
            "Start, stop, migrate and resize actions decided",
            registry=self.registry,
        )
        self.rpc_latency = Histogram(
            "hadar_rpc_duration_seconds",
            "Time to serve one RPC",
            labelnames=["method", "code"],
            buckets=RPC_BUCKETS,
            registry=self.registry,
        )
        self.dispatch_failures = Counter(
            "hadar_dispatch_failures",
            "Calls to workers that failed after their retries",
            registry=self.registry,
        )
        # stage: "round" (storing a job's part of a round), "dispatch" (recording the
        # workers' answers about it) or "policy" (the policy fails on the job; counted when
        # it is first left out of the plan).
        self.isolated_job_failures = Counter(
            "hadar_job_failures_isolated",
            "Jobs whose handling raised and was set aside so the rest went on",
            labelnames=["stage"],
            registry=self.registry,
        )
        # outcome: delivered, retrying (failed, tried again later) or gave_up (failed for
        # the last time, or refused by the cluster's settings).
        self.webhook_deliveries = Counter(
            "hadar_webhook_deliveries",
            "Webhook calls for jobs' ends, by outcome of the attempt",
            labelnames=["outcome"],
            registry=self.registry,
        )
        self.lost_nodes = Counter(
            "hadar_nodes_lost", "Nodes declared unreachable", registry=self.registry
        )
        # Expected start times (master/rounds/forecaster.py): what each forecast cost, and
        # how much of the queue the newest one reached.
        self.forecast_duration = Histogram(
            "hadar_forecast_duration_seconds",
            "Time to compute one forecast of start times",
            buckets=ROUND_BUCKETS,
            registry=self.registry,
        )
        self.forecast_jobs = Gauge(
            "hadar_forecast_jobs",
            "Waiting jobs in the newest forecast of start times, with an estimate or without",
            labelnames=["estimate"],
            registry=self.registry,
        )

    def watch_leadership(self, read: Callable[[], tuple[str, int]]) -> None:
        """`read` gives this master's role (active, standby, deposed) and epoch."""
        self.registry.register(_LeadershipCollector(read))

    def watch_store(self, read: Callable[[], ClusterGauges]) -> None:
        self.registry.register(_StoreCollector(read))
