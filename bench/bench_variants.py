"""Each research policy's paper variant next to its default and the paper's own baseline.

    .venv/bin/python bench/bench_variants.py [--policy a-srpt,...] [--poisson N]
        [--interarrival S] [--estimates] [--workers K]

Runs, on every bundled Gavel trace (the clusters and settings of ``bench/results.py``:
360 s rounds, Gavel's round model, no restart overhead, every job shareable) and, with
``--poisson N``, on a generated trace of N jobs (an arrival every ``--interarrival``
seconds on average, 2400 by default, on v100:36,p100:36,k80:36), the policy with
``variant="default"``, with ``variant="paper"``, and the baseline the paper compares
itself with; prints one markdown table per policy (average JCT and makespan, hours) for
docs/policies.md. ``--estimates`` runs the generated trace once more with users'
estimates of the iterations off by habit and noise (``master.sim.generate.with_estimates``),
which only ``a-srpt``'s predictor reads.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.results import (  # noqa: E402
    POISSON_CLUSTER,
    POISSON_INTERARRIVAL_S,
    ROUND_S,
    Case,
    cases,
    shareable,
)
from master.scheduling.policy import make_policy  # noqa: E402
from master.scheduling.throughput import ThroughputModel  # noqa: E402
from master.sim.cluster_spec import build_cluster  # noqa: E402
from master.sim.data import GAVEL_DIR  # noqa: E402
from master.sim.engine import SimConfig, simulate  # noqa: E402
from master.sim.generate import generate_trace, with_estimates  # noqa: E402
from master.sim.metrics import summarize  # noqa: E402

#: The baseline each paper measures its policy against, as a policy here. Liu et al.
#: measure their sampled categories against the full set (the paper variant) and against
#: heterogeneity-aware schedulers, `gavel` here; HadarE measures itself against Hadar and
#: Gavel.
BASELINES: dict[str, str] = {
    "a-srpt": "las",
    "sjf-bsbf": "las",
    "hadar": "gavel",
    "hadare": "gavel",
    "hare": "las",
    "liu": "gavel",
}
#: Column label, policy name and its parameters.
Run = tuple[str, str, dict[str, Any]]


def runs_for(policy: str) -> list[Run]:
    return [
        ("default", policy, {}),
        ("paper variant", policy, {"variant": "paper"}),
        (BASELINES[policy], BASELINES[policy], {}),
    ]


def _run(args: tuple[Run, Case, str]) -> tuple[str, str, float, float, float]:
    (label, policy, params), case, throughputs = args
    model = ThroughputModel.from_gavel_json(throughputs)
    started = time.perf_counter()
    result = simulate(
        make_policy(policy, **params),
        case.trace,
        build_cluster(case.cluster),
        model,
        SimConfig(round_s=ROUND_S, early_rounds=case.early_rounds),
    )
    summary = summarize(result)
    return (
        case.name,
        label,
        summary.avg_jct_s,
        summary.makespan_s,
        time.perf_counter() - started,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--policy", default=",".join(BASELINES))
    parser.add_argument("--poisson", type=int, default=0, metavar="N")
    parser.add_argument("--interarrival", type=float, default=POISSON_INTERARRIVAL_S)
    parser.add_argument("--estimates", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    throughputs = str(GAVEL_DIR / "simulation_throughputs.json")
    model = ThroughputModel.from_gavel_json(throughputs)
    plain = [
        case
        for case in cases(GAVEL_DIR, model, 0, poisson=False)
        if not case.early_rounds and not case.fork_all
    ]
    if args.poisson > 0:
        jobs = shareable(generate_trace(args.poisson, model, mean_interarrival_s=args.interarrival))
        name = f"poisson-{args.poisson}"
        if args.interarrival != POISSON_INTERARRIVAL_S:
            name += f" (every {args.interarrival:g} s)"
        plain.append(Case(name, POISSON_CLUSTER, jobs))
        if args.estimates:
            plain.append(Case(name + " (estimates)", POISSON_CLUSTER, tuple(with_estimates(jobs))))
    for policy in [p.strip() for p in args.policy.split(",") if p.strip()]:
        if policy not in BASELINES:
            parser.error(f"no paper variant for {policy!r}; one of {', '.join(BASELINES)}")
        runs = runs_for(policy)
        work = [(run, case, throughputs) for case in plain for run in runs]
        figures: dict[tuple[str, str], tuple[float, float]] = {}
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            for name, label, avg, makespan, wall in pool.map(_run, work):
                figures[(name, label)] = (avg, makespan)
                print(f"{policy} {name} {label}: {avg / 3600:.2f} h ({wall:.1f} s)", flush=True)
        labels = [label for label, _, _ in runs]
        print(f"\n`{policy}`, average JCT / makespan (hours):\n")
        print("| trace | " + " | ".join(labels) + " |")
        print("|---|" + "---|" * len(labels))
        for case in plain:
            cells = [
                f"{figures[(case.name, label)][0] / 3600:.2f} / "
                f"{figures[(case.name, label)][1] / 3600:.2f}"
                for label in labels
            ]
            print(f"| {case.name} | " + " | ".join(cells) + " |")
        print(flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
