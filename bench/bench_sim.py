"""Simulator and policy speed.

1. Gavel's 96-job trace (max_min_fairness.trace) on v100:8,p100:16,k80:24 under fifo,
   srtf, las and gavel: total wall time (target < 5 s).
2. A generated 10,000-job trace on 1,024 GPUs (256 each of v100, p100, k80, a100-40gb)
   under las: wall time (target < 60 s), rounds, planning time per round.
3. gavel's planning time per round with 1,000 active jobs on 512 GPUs of 4 types.

    .venv/bin/python bench/bench_sim.py [--gavel-data DIR] [--skip-large]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from master.scheduling.plan import Allocation  # noqa: E402
from master.scheduling.policy import make_policy  # noqa: E402
from master.scheduling.throughput import ThroughputModel  # noqa: E402
from master.scheduling.views import ClusterView, JobView, Snapshot  # noqa: E402
from master.sim.cluster_spec import build_cluster  # noqa: E402
from master.sim.data import GAVEL_DIR  # noqa: E402
from master.sim.engine import SimConfig, simulate  # noqa: E402
from master.sim.generate import generate_trace  # noqa: E402
from master.sim.metrics import summarize  # noqa: E402
from master.sim.trace import read_gavel_trace  # noqa: E402

DEFAULT_DATA = GAVEL_DIR
FOUR_TYPES = ("v100", "p100", "k80", "a100-40gb")


def bench_gavel_trace(data: Path, model: ThroughputModel) -> None:
    jobs = read_gavel_trace(data / "traces" / "max_min_fairness.trace")
    cluster = build_cluster("v100:8,p100:16,k80:24")
    total = 0.0
    print("1. max_min_fairness.trace (96 jobs), v100:8,p100:16,k80:24, 360 s rounds")
    for name in ("fifo", "srtf", "las", "gavel"):
        started = time.perf_counter()
        result = simulate(make_policy(name), jobs, cluster, model, SimConfig())
        elapsed = time.perf_counter() - started
        total += elapsed
        s = summarize(result)
        print(
            f"   {name:6s} {elapsed:6.2f} s  rounds {s.rounds:4d}"
            f"  avg JCT {s.avg_jct_s / 3600:5.2f} h"
            f"  plan {s.plan_ms_mean:6.2f} ms mean / {s.plan_ms_max:6.1f} ms max"
        )
    print(f"   total: {total:.2f} s (target < 5 s)")


def bench_large_las(model: ThroughputModel) -> None:
    counts = dict.fromkeys(FOUR_TYPES, 256)
    cluster = ClusterView.from_counts(counts, gpus_per_server=8)
    # Offered load about 80 %: the trace's work in V100 GPU-seconds over its arrival span
    # times the cluster's capacity in V100 equivalents (mean speed ratio per type).
    jobs = generate_trace(10_000, model, mean_interarrival_s=120.0, seed=1)
    print("2. generated 10,000 jobs on 1,024 GPUs (4 types x 256, 8 per server), las")
    started = time.perf_counter()
    result = simulate(make_policy("las"), jobs, cluster, model, SimConfig())
    elapsed = time.perf_counter() - started
    s = summarize(result)
    print(
        f"   {elapsed:.1f} s wall (target < 60 s); {s.rounds} rounds; utilization "
        f"{s.utilization:.1%}; avg JCT {s.avg_jct_s / 3600:.2f} h; "
        f"plan {s.plan_ms_mean:.2f} ms mean / {s.plan_ms_max:.1f} ms max"
    )


def bench_gavel_planning(model: ThroughputModel) -> None:
    counts = dict.fromkeys(FOUR_TYPES, 128)
    cluster = ClusterView.from_counts(counts, gpus_per_server=8)
    trace = generate_trace(1000, model, mean_interarrival_s=0.0, seed=2)
    jobs = tuple(
        JobView(
            id=j.id,
            job_type=j.job_type,
            num_gpus=j.num_gpus,
            total_iterations=j.iterations or 1.0,
            batch_size=j.batch_size,
        )
        for j in trace
    )
    policy = make_policy("gavel")
    times: list[float] = []
    current: dict[int, Allocation] = {}
    for round_number in range(6):
        # Departures and arrivals every round force a fresh LP solve, the expensive case.
        live = tuple(
            JobView(
                id=j.id + 1000 * (round_number if j.id % 10 == 0 else 0),
                job_type=j.job_type,
                num_gpus=j.num_gpus,
                total_iterations=j.total_iterations,
                batch_size=j.batch_size,
                current=current.get(j.id),
            )
            for j in jobs
        )
        snapshot = Snapshot(cluster, live, round_number, 360.0, model)
        started = time.perf_counter()
        plan = policy.plan(snapshot, 360.0 * round_number)
        times.append(time.perf_counter() - started)
        current = {job_id: alloc for job_id, alloc in plan.allocations.items() if job_id < 1000}
    print(
        "3. gavel planning, 1,000 active jobs on 512 GPUs (4 types x 128), LP re-solved each round"
    )
    print(
        f"   per round: {statistics.fmean(times) * 1000:.0f} ms mean, "
        f"{max(times) * 1000:.0f} ms max over {len(times)} rounds"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gavel-data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--skip-large", action="store_true", help="skip the 10,000-job run")
    args = parser.parse_args()
    model = ThroughputModel.from_gavel_json(args.gavel_data / "simulation_throughputs.json")
    bench_gavel_trace(args.gavel_data, model)
    if not args.skip_large:
        bench_large_las(model)
    bench_gavel_planning(model)


if __name__ == "__main__":
    main()
