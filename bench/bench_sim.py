"""Simulator and policy speed.

1. Gavel's 96-job trace (max_min_fairness.trace) on v100:8,p100:16,k80:24 under fifo,
   srtf, las and gavel: total wall time (target < 5 s).
2. A generated 10,000-job trace on 1,024 GPUs (256 each of v100, p100, k80, a100-40gb)
   under las: wall time (target < 60 s), rounds, planning time per round.
3. gavel's planning time per round with 1,000 active jobs on 512 GPUs of 4 types.
4. ``--scale``: the scale benchmark, every policy (or ``--policies``) on a generated
   10,000-job trace (Gavel's job mix, Poisson arrivals every :data:`SCALE_INTERARRIVAL_S`
   seconds on average, every job shareable) on 1,024 GPUs in thirds (:data:`SCALE_CLUSTER`,
   8 per server), 360 s rounds: per policy wall and CPU seconds against its target
   (:data:`SCALE_TARGETS_S`), rounds, preemptions, migrations and planning time. Each
   policy runs in its own process, ``--workers`` at a time, stopped after ``--cpu-limit``
   CPU seconds; ``--write`` puts the table into docs/benchmarks.md. A name may carry one
   parameter, e.g. ``gavel.warm_from=0``.

    .venv/bin/python bench/bench_sim.py [--gavel-data DIR] [--skip-large]
    .venv/bin/python bench/bench_sim.py --scale [--policies a,b] [--workers K]
                                        [--cpu-limit S] [--write]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.markdown import write_section  # noqa: E402
from master.scheduling.plan import Allocation  # noqa: E402
from master.scheduling.policy import available_policies, make_policy  # noqa: E402
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

SCALE_JOBS = 10_000
#: 1,024 GPUs as near to thirds as whole 8-GPU servers allow.
SCALE_CLUSTER = {"v100": 344, "p100": 344, "k80": 336}
#: About 80 % offered load on SCALE_CLUSTER: a job of the generator's mix needs about
#: 115,000 V100 GPU-seconds on average, and the cluster holds about 856 V100 equivalents
#: (P100s run Gavel's job types 1.06x, K80s 0.44x as fast as a V100, on average).
SCALE_INTERARRIVAL_S = 170.0
SCALE_SEED = 1
HEURISTICS = ("fifo", "las", "slurm", "srtf")
#: Wall-time targets on the 2-core development machine.
SCALE_TARGETS_S = {"gavel": 40.0, **dict.fromkeys(HEURISTICS, 30.0)}
RESEARCH_TARGET_S = 120.0
BEGIN = "<!-- sim-scale: written by bench/bench_sim.py --scale --write -->"
END = "<!-- /sim-scale -->"


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
        started = time.process_time()
        plan = policy.plan(snapshot, 360.0 * round_number)
        times.append(time.process_time() - started)
        current = {job_id: alloc for job_id, alloc in plan.allocations.items() if job_id < 1000}
    print(
        "3. gavel planning, 1,000 active jobs on 512 GPUs (4 types x 128), 100 leaving and "
        "100 arriving each round: LP solved cold in the first round, warm-started after"
    )
    print(
        f"   CPU per round: first {times[0] * 1000:.0f} ms; then "
        f"{statistics.fmean(times[1:]) * 1000:.0f} ms mean, {max(times[1:]) * 1000:.0f} ms max "
        f"over {len(times) - 1} rounds"
    )


def scale_one(name: str, data: Path) -> dict[str, Any]:
    """One policy over the scale trace, in this process: its figures as a dict."""
    model = ThroughputModel.from_gavel_json(data / "simulation_throughputs.json")
    cluster = ClusterView.from_counts(SCALE_CLUSTER, gpus_per_server=8)
    jobs = [
        dataclasses.replace(job, shareable=True)
        for job in generate_trace(
            SCALE_JOBS, model, mean_interarrival_s=SCALE_INTERARRIVAL_S, seed=SCALE_SEED
        )
    ]
    policy_name, _, setting = name.partition(".")
    params: dict[str, Any] = {}
    if setting:
        # POLICY.PARAM=NUMBER, e.g. gavel.warm_from=0
        key, _, value = setting.partition("=")
        params[key] = float(value) if "." in value else int(value)
    policy = make_policy(policy_name, **params)
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate(policy, jobs, cluster, model, SimConfig())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    s = summarize(result)
    return {
        "policy": name,
        "wall_s": wall,
        "cpu_s": cpu,
        "rounds": s.rounds,
        "max_active": max(r.active_jobs for r in result.rounds),
        "preemptions": s.preemptions,
        "migrations": s.migrations,
        "planning_s": s.planning_s,
        "plan_ms_mean": s.plan_ms_mean,
        "plan_ms_p99": s.plan_ms_p99,
        "avg_jct_h": s.avg_jct_s / 3600.0,
    }


def target_s(name: str) -> float:
    return SCALE_TARGETS_S.get(name.partition(".")[0], RESEARCH_TARGET_S)


def run_scale(names: list[str], data: Path, workers: int, cpu_limit: int) -> list[dict[str, Any]]:
    """Each policy in its own process, ``workers`` at a time; one that uses more than
    ``cpu_limit`` CPU seconds is stopped and reported as such. The limit is on CPU time,
    not wall time, so that other work on a shared machine does not stop a run early.
    Each row is printed to stderr as it comes."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit + 5))

    def one(name: str) -> dict[str, Any]:
        command = [sys.executable, __file__, "--scale-one", name, "--gavel-data", str(data)]
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, preexec_fn=limit
        )
        row: dict[str, Any]
        if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            row = {"policy": name, "timed_out": cpu_limit}
        elif done.returncode != 0:
            row = {"policy": name, "error": done.stderr.strip().splitlines()[-1:]}
        else:
            row = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(row), file=sys.stderr, flush=True)
        return row

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, names))


def scale_lines(rows: list[dict[str, Any]], load: str) -> list[str]:
    lines = [
        BEGIN,
        "",
        f"{SCALE_JOBS:,} generated jobs (seed {SCALE_SEED}, Poisson arrivals every "
        f"{SCALE_INTERARRIVAL_S:.0f} s on average, every job shareable) on "
        + ", ".join(f"{t}:{c}" for t, c in SCALE_CLUSTER.items())
        + f" (8 GPUs per server), 360 s rounds; {load}:",
        "",
        "| policy | wall s | CPU s | target s | rounds | max active | preemptions | "
        "migrations | planning s | plan ms mean / p99 | avg JCT h |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name = row["policy"]
        if "timed_out" in row:
            lines.append(
                f"| {name} | | > {row['timed_out']:.0f} (stopped) | {target_s(name):.0f} "
                "| | | | | | | |"
            )
            continue
        if "error" in row:
            lines.append(f"| {name} | failed: {' '.join(row['error'])} | | | | | | | | | |")
            continue
        lines.append(
            f"| {name} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | {target_s(name):.0f} "
            f"| {row['rounds']:,} | {row['max_active']:,} | {row['preemptions']:,} "
            f"| {row['migrations']:,} | {row['planning_s']:.1f} "
            f"| {row['plan_ms_mean']:.2f} / {row['plan_ms_p99']:.1f} | {row['avg_jct_h']:.2f} |"
        )
    lines += ["", END]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gavel-data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--skip-large", action="store_true", help="skip the 10,000-job run")
    parser.add_argument("--scale", action="store_true", help="the 10,000-job scale benchmark")
    parser.add_argument("--scale-one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--policies", default=None, help="comma-separated (default: all)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cpu-limit", type=int, default=600, help="CPU seconds per policy")
    parser.add_argument("--write", action="store_true", help="write into docs/benchmarks.md")
    args = parser.parse_args()
    if args.scale_one is not None:
        print(json.dumps(scale_one(args.scale_one, args.gavel_data)))
        return
    if args.scale:
        names = args.policies.split(",") if args.policies else available_policies()
        started = os.getloadavg()[0]
        rows = run_scale(names, args.gavel_data, args.workers, args.cpu_limit)
        load = (
            f"load average {started:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
            f"({args.workers} at a time)"
        )
        lines = scale_lines(rows, load)
        print("\n".join(lines))
        if args.write:
            write_section(ROOT / "docs" / "benchmarks.md", BEGIN, END, lines)
        return
    model = ThroughputModel.from_gavel_json(args.gavel_data / "simulation_throughputs.json")
    bench_gavel_trace(args.gavel_data, model)
    if not args.skip_large:
        bench_large_las(model)
    bench_gavel_planning(model)


if __name__ == "__main__":
    main()
