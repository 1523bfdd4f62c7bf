"""What one forecast of start times costs at a large queue, and what it does to other threads.

Builds the views a round reads at ``--nodes`` nodes of 4-8 GPUs (v100, p100, k80) and
``--jobs`` queued jobs of mixed specs (1-8 GPUs, four job types with the bundled Gavel
throughputs, 10k-500k iterations, priorities, some limited to GPU types, some not
preemptible, shareable or elastic), as ``bench/bench_round.py`` fills its store. A first
round, decided by the round function, places what fits and those jobs run a random part of
their work; then :func:`master.scheduling.forecast.forecast` runs the policy forward from
there with the daemon's limits (``forecast_horizon_s``, ``forecast_max_rounds``,
``forecast_budget_s``, early rounds), yielding the interpreter between simulated rounds as
the daemon's forecaster does.

Meanwhile a thread stands for the RPC threads: every 5 ms it wakes and does a little Python
work; its lateness (how long after it was due it ran) is what the forecast's share of the
interpreter lock costs a call.

It prints, per policy: the wall and CPU seconds of the forecast, the rounds decided (and
ms per round), how many waiting jobs got an estimate, how far simulated time got, and the
ticking thread's median, p99 and maximum lateness.

    .venv/bin/python bench/bench_forecast.py [--jobs 1000,5000] [--nodes 200]
        [--policy fifo,hadare] [--max-rounds N] [--horizon-days D] [--budget-s S]
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from master.scheduling.forecast import ForecastLimits, forecast  # noqa: E402
from master.scheduling.policy import make_policy  # noqa: E402
from master.scheduling.round import RoundRules, RoundState, decide_round  # noqa: E402
from master.scheduling.throughput import ThroughputModel  # noqa: E402
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot  # noqa: E402
from master.settings import Settings  # noqa: E402
from master.sim.data import THROUGHPUTS  # noqa: E402

GPU_TYPES = ("v100", "p100", "k80")
JOB_TYPES = (
    "ResNet-18 (batch size 64)",
    "ResNet-50 (batch size 64)",
    "Transformer (batch size 64)",
    "LM (batch size 20)",
)
USERS = ("alice", "bob", "carol", "dave", "erin", "frank")
NOW = 1_800_000_000.0


def cluster(rng: random.Random, nodes: int) -> ClusterView:
    out = []
    for n in range(nodes):
        name = f"node-{n:03d}"
        gpu_type = GPU_TYPES[n % len(GPU_TYPES)]
        gpus = tuple(GpuView(name, i, gpu_type, 16 << 30) for i in range(rng.randrange(4, 9)))
        out.append(NodeView(name, gpus))
    return ClusterView(tuple(out))


def jobs(rng: random.Random, count: int) -> list[JobView]:
    out = []
    for index in range(count):
        out.append(
            JobView(
                id=index + 1,
                job_type=rng.choice(JOB_TYPES),
                num_gpus=rng.choice((1, 1, 1, 2, 2, 4, 8)),
                total_iterations=float(rng.randrange(10_000, 500_000)),
                batch_size=64,
                priority=rng.choice((1.0, 1.0, 1.0, 2.0, 0.5)),
                allowed_gpu_types=frozenset(rng.choice(((), (), ("v100",), ("v100", "p100")))),
                preemptible=rng.random() > 0.1,
                shareable=rng.random() > 0.5,
                forkable=rng.random() > 0.8,
                arrival_time=NOW - 86_400 + index,
                user=rng.choice(USERS),
                time_limit_s=0.0,
            )
        )
    return out


def running_state(
    rng: random.Random,
    view: ClusterView,
    queue: list[JobView],
    model: ThroughputModel,
    policy_name: str,
) -> tuple[RoundState, int]:
    """The state after a first round: what it placed runs, part of its work done."""
    settings = Settings()
    first = Snapshot(view, tuple(queue), 1, settings.round_seconds, model)
    decision = decide_round(RoundState(first, NOW - 600), make_policy(policy_name))
    placed = decision.placements
    views = []
    for job in first.jobs:
        alloc = placed.get(job.id)
        if alloc is None:
            views.append(job)
            continue
        done = job.total_iterations * rng.uniform(0.0, 0.9)
        views.append(replace(job, current=alloc, iterations_done=done, run_seconds=600.0))
    snapshot = Snapshot(view, tuple(views), 2, settings.round_seconds, model)
    return RoundState(snapshot, NOW), len(placed)


class Ticker:
    """A thread due every 5 ms doing a little Python work; records how late it ran."""

    def __init__(self) -> None:
        self.lateness: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        period = 0.005
        due = time.perf_counter() + period
        while not self._stop.is_set():
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            self.lateness.append(max(0.0, time.perf_counter() - due))
            sum(i * i for i in range(200))  # a call's own bit of Python
            due = max(due + period, time.perf_counter())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1000,5000", help="queue sizes, comma-separated")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--policy", default="fifo,hadare", help="policies, comma-separated")
    parser.add_argument("--max-rounds", type=int, default=None, help="default: the daemon's")
    parser.add_argument("--horizon-days", type=float, default=None, help="default: the daemon's")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds one forecast may compute (default: the daemon's; 0: no budget)",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    settings = Settings()
    if args.budget_s is None:
        args.budget_s = settings.forecast_budget_s
    limits = ForecastLimits(
        horizon_s=(
            args.horizon_days * 86_400 if args.horizon_days else settings.forecast_horizon_s
        ),
        max_rounds=args.max_rounds or settings.forecast_max_rounds,
        early_rounds=settings.early_rounds,
        early_round_delay_s=settings.early_round_delay_s,
    )
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    print(
        f"horizon {limits.horizon_s / 86_400:g} days, at most {limits.max_rounds} rounds, "
        f"rounds of {settings.round_seconds:g} s, "
        + (f"a budget of {args.budget_s:g} s" if args.budget_s else "no budget")
    )
    print(
        "policy  jobs  running  waiting  estimates  rounds  ms/round  reached_h  wall_s  cpu_s"
        "  tick_p50_ms  tick_p99_ms  tick_max_ms"
    )
    for policy_name in args.policy.split(","):
        for count in (int(c) for c in args.jobs.split(",")):
            rng = random.Random(args.seed)
            view = cluster(rng, args.nodes)
            state, running = running_state(rng, view, jobs(rng, count), model, policy_name)
            policy = copy.deepcopy(make_policy(policy_name))
            rules = RoundRules(settings.min_migration_gain)
            with Ticker() as ticker:
                wall, cpu = time.perf_counter(), time.process_time()
                deadline = wall + (args.budget_s or float("inf"))

                def between_rounds(deadline: float = deadline) -> bool:
                    time.sleep(0)
                    return time.perf_counter() < deadline

                result = forecast(state, policy, rules, limits, between_rounds=between_rounds)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            ticks = sorted(ticker.lateness) or [0.0]
            p99 = ticks[min(len(ticks) - 1, int(0.99 * len(ticks)))]
            waiting = count - running
            print(
                f"{policy_name:<7} {count:>5} {running:>8} {waiting:>8} {len(result.starts):>10} "
                f"{result.rounds:>7} {1000 * wall / max(1, result.rounds):>9.1f} "
                f"{(result.reached - state.now) / 3600:>10.1f} {wall:>7.1f} {cpu:>6.1f} "
                f"{1000 * statistics.median(ticks):>12.2f} {1000 * p99:>12.2f} "
                f"{1000 * ticks[-1]:>12.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
