"""Every policy on every Gavel trace and a generated Poisson trace; writes docs/results.md.

    .venv/bin/python bench/results.py [--gavel-data DIR] [--jobs N] [--workers K]
                                      [--skip-poisson] [--out docs]

Traces (360 s rounds, no restart overhead, as Gavel's reference figures):

- each ``*.trace`` under ``<gavel-data>/traces`` on the cluster in :data:`CLUSTERS`
  (``max_min_fairness.trace`` on v100:8,p100:16,k80:24, ``artifact_evaluation.trace``
  on v100:2,k80:4, the small test traces on small clusters that can hold their jobs);
- a generated trace of ``--jobs`` (default 1,000) jobs with Poisson arrivals, one every
  :data:`POISSON_INTERARRIVAL_S` seconds on average, on v100:36,p100:36,k80:36
  (``master.sim.generate``: Gavel's job mix and duration distribution).

Every job is marked shareable (a lab's managed jobs are), which ``sjf-bsbf`` and ``hadare``
use. No job is marked forkable (Gavel's traces mark none), so ``hadare`` forks no job into
copies there; the target traces run once more with every job forkable, labelled
:data:`ALL_FORKABLE`, under ``gavel`` and ``hadare`` only.
The report lists, per trace, average / median / p99 JCT, makespan, utilization and
planning time per policy, compares the best research policy with ``gavel``, and every
policy with ``slurm`` (priority order with EASY backfill, time limits drawn as
``SimConfig().limit_overestimate`` says), headed by the master's default policy against it.
``slurm`` never forks, so the all-forkable cases reuse its figures from the same trace.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from master.scheduling.policy import available_policies, make_policy  # noqa: E402
from master.scheduling.throughput import ThroughputModel  # noqa: E402
from master.settings import Settings  # noqa: E402
from master.sim.cluster_spec import build_cluster  # noqa: E402
from master.sim.data import GAVEL_DIR  # noqa: E402
from master.sim.engine import SimConfig, SimResult, simulate  # noqa: E402
from master.sim.generate import generate_trace  # noqa: E402
from master.sim.metrics import Summary, percentile, summarize  # noqa: E402
from master.sim.trace import TraceJob, read_trace  # noqa: E402

DEFAULT_DATA = GAVEL_DIR

#: Cluster (v100:p100:k80) per Gavel trace; unknown traces get DEFAULT_CLUSTER.
CLUSTERS: dict[str, str] = {
    "max_min_fairness.trace": "v100:8,p100:16,k80:24",
    "artifact_evaluation.trace": "v100:2,k80:4",
    "debug.trace": "v100:2,p100:2,k80:2",
    "highmem_test.trace": "v100:2,p100:2,k80:2",
    "medium_test.trace": "v100:4,p100:4,k80:4",
    "small_test.trace": "v100:4,p100:4,k80:4",
}
DEFAULT_CLUSTER = "v100:4,p100:4,k80:4"
POISSON_CLUSTER = "v100:36,p100:36,k80:36"
#: One arrival every 40 minutes on average (1.5 jobs per hour).
POISSON_INTERARRIVAL_S = 2400.0
POISSON_NAME = "poisson-1000"
ROUND_S = 360.0
BASELINES = ("fifo", "srtf", "las", "gavel", "slurm")
#: The Slurm-style baseline every policy is compared with, and the policy the master runs
#: unless told otherwise (the headline).
SLURM = "slurm"
DEFAULT_POLICY = Settings().policy
#: The case of the headline: the generated lab-like trace under the daemon's round model.
HEADLINE = "poisson-1000 (early rounds)"
#: Suffix of a case run with the daemon's round model (re-plan when a job exits).
EARLY = " (early rounds)"
#: Suffix of a case in which every job may run as averaged copies (hadare's forking).
ALL_FORKABLE = " (all jobs forkable)"
#: Policies run on the all-forkable cases: the one that forks, and the reference.
FORKING_POLICIES = ("gavel", "hadare")
_PLAIN_TARGETS = (
    "max_min_fairness.trace",
    POISSON_NAME,
    "max_min_fairness.trace" + EARLY,
    POISSON_NAME + EARLY,
)
#: The traces the targets are stated on, under each round model, without and with forking.
TARGETS = _PLAIN_TARGETS + tuple(name + ALL_FORKABLE for name in _PLAIN_TARGETS)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    cluster: str
    trace: tuple[TraceJob, ...]
    early_rounds: bool = False
    fork_all: bool = False


def shareable(jobs: Sequence[TraceJob]) -> tuple[TraceJob, ...]:
    return tuple(dataclasses.replace(job, shareable=True) for job in jobs)


def poisson_trace(model: ThroughputModel, num_jobs: int, seed: int = 0) -> tuple[TraceJob, ...]:
    return shareable(
        generate_trace(num_jobs, model, mean_interarrival_s=POISSON_INTERARRIVAL_S, seed=seed)
    )


def cases(data: Path, model: ThroughputModel, num_jobs: int, poisson: bool) -> list[Case]:
    out = [
        Case(path.name, CLUSTERS.get(path.name, DEFAULT_CLUSTER), shareable(read_trace(path)))
        for path in sorted((data / "traces").glob("*.trace"))
    ]
    if poisson:
        name = POISSON_NAME if num_jobs == 1000 else f"poisson-{num_jobs}"
        out.append(Case(name, POISSON_CLUSTER, poisson_trace(model, num_jobs)))
    # The target traces again under the daemon's round model.
    out += [
        dataclasses.replace(case, name=case.name + EARLY, early_rounds=True)
        for case in out
        if case.name + EARLY in TARGETS
    ]
    out += [
        dataclasses.replace(case, name=case.name + ALL_FORKABLE, fork_all=True)
        for case in out
        if case.name + ALL_FORKABLE in TARGETS
    ]
    return out


def _run(args: tuple[str, Case, str]) -> tuple[str, str, dict[str, Any], float]:
    policy, case, throughputs = args
    model = ThroughputModel.from_gavel_json(throughputs)
    started = time.perf_counter()
    result = simulate(
        make_policy(policy),
        case.trace,
        build_cluster(case.cluster),
        model,
        SimConfig(round_s=ROUND_S, early_rounds=case.early_rounds, fork_all=case.fork_all),
    )
    wall = time.perf_counter() - started
    return case.name, policy, _figures(result), wall


def _figures(result: SimResult) -> dict[str, Any]:
    summary: Summary = summarize(result)
    jcts = sorted(job.jct_s for job in result.jobs)
    figures = dataclasses.asdict(summary)
    figures["jcts_s"] = jcts
    figures["p90_jct_s"] = percentile(jcts, 90)
    figures["copies_jobs"] = sum(1 for job in result.jobs if job.used_copies)
    return figures


def run_all(
    data: Path, num_jobs: int, workers: int, poisson: bool
) -> dict[str, dict[str, dict[str, Any]]]:
    throughputs = str(data / "simulation_throughputs.json")
    model = ThroughputModel.from_gavel_json(throughputs)
    work = [
        (policy, case, throughputs)
        for case in cases(data, model, num_jobs, poisson)
        for policy in (FORKING_POLICIES if case.fork_all else available_policies())
    ]
    # Longest first so the pool does not end on one long run.
    work.sort(key=lambda w: -len(w[1].trace))
    results: dict[str, dict[str, dict[str, Any]]] = {}
    clusters = {w[1].name: w[1].cluster for w in work}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for name, policy, figures, wall in pool.map(_run, work):
            figures["cluster"] = clusters[name]
            figures["wall_s"] = wall
            results.setdefault(name, {})[policy] = figures
            print(
                f"{name:28s} {policy:9s} avg JCT {figures['avg_jct_s'] / 3600:7.2f} h  "
                f"p99 {figures['p99_jct_s'] / 3600:7.2f} h  "
                f"makespan {figures['makespan_s'] / 3600:7.2f} h  ({wall:.1f} s)",
                flush=True,
            )
    for name, per_policy in results.items():
        base = results.get(name.removesuffix(ALL_FORKABLE), {})
        if name.endswith(ALL_FORKABLE) and SLURM in base:
            per_policy.setdefault(SLURM, base[SLURM])
    return results


# ---------------------------------------------------------------------------- report
def _stem(trace: str) -> str:
    stem = trace.replace(".trace", "").replace(EARLY, "-early").replace(ALL_FORKABLE, "-forkable")
    stem = stem.replace("_", "-")
    return stem.replace(" ", "-")


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"


def best_research(per_policy: dict[str, dict[str, Any]]) -> str:
    """The research policy with the lowest average JCT among those whose p99 is not
    worse than gavel's (any research policy if none qualifies)."""
    research = [p for p in per_policy if p not in BASELINES]
    gavel_p99 = per_policy["gavel"]["p99_jct_s"] if "gavel" in per_policy else float("inf")
    ok = [p for p in research if per_policy[p]["p99_jct_s"] <= gavel_p99 * (1 + 1e-9)]
    pool = ok or research
    return min(pool, key=lambda p: per_policy[p]["avg_jct_s"])


def write_plots(results: dict[str, dict[str, dict[str, Any]]], img: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    for trace, per_policy in results.items():
        stem = _stem(trace)
        policies = sorted(per_policy, key=lambda p: per_policy[p]["avg_jct_s"])
        fig, ax = plt.subplots(figsize=(8, 3.6))
        avg = [per_policy[p]["avg_jct_s"] / 3600 for p in policies]
        p99 = [per_policy[p]["p99_jct_s"] / 3600 for p in policies]
        x = range(len(policies))
        ax.bar([i - 0.2 for i in x], avg, width=0.4, label="average JCT")
        ax.bar([i + 0.2 for i in x], p99, width=0.4, label="p99 JCT")
        ax.set_xticks(list(x))
        ax.set_xticklabels(policies, rotation=30, ha="right")
        ax.set_ylabel("hours")
        ax.set_title(f"{trace} on {per_policy[policies[0]]['cluster']}")
        ax.legend()
        fig.tight_layout()
        name = f"results-{stem}-jct.png"
        fig.savefig(img / name, dpi=110)
        plt.close(fig)
        names.append(name)
        if trace in TARGETS:
            fig, ax = plt.subplots(figsize=(7, 4))
            for p in policies:
                jcts = [j / 3600 for j in per_policy[p]["jcts_s"]]
                ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
                ax.step(jcts, ys, where="post", label=p)
            ax.set_xscale("log")
            ax.set_xlabel("JCT (hours, log scale)")
            ax.set_ylabel("fraction of jobs")
            ax.set_title(f"JCT distribution, {trace}")
            ax.legend(fontsize=7)
            fig.tight_layout()
            name = f"results-{stem}-cdf.png"
            fig.savefig(img / name, dpi=110)
            plt.close(fig)
            names.append(name)
    return names


def write_markdown(
    results: dict[str, dict[str, dict[str, Any]]], out: Path, plots: list[str], command: str
) -> None:
    lines = [
        "# Results: every policy on every trace",
        "",
        "Generated by `" + command + "`; do not edit by hand.",
        "",
        f"Rounds of {ROUND_S:.0f} s, no restart overhead (as Gavel's reference figures), "
        "HadarE copy efficiency 0.9 (the simulator's default). Times in hours. "
        "Utilization is GPU-time held over cluster GPU-time from first arrival to last "
        "finish. `plan ms` is the time to decide each round (the policy's plan, then "
        "checking it and the diff against what runs; mean / max). "
        "All jobs are marked shareable; `sjf-bsbf` and `hadare` may share GPUs.",
        "",
        "Every round is decided by the daemon's own round function "
        "(`master.scheduling.round.decide_round`): the daemon's migration hysteresis "
        "applies (a running job moves to other GPUs of the same count only for at least "
        f"{SimConfig().min_migration_gain:.0%} more throughput, `min_migration_gain`; "
        "`hctl simulate --min-migration-gain`), non-preemptible jobs keep their GPUs, and "
        "`a-srpt` learns from each completed job before the next round, as in the daemon.",
        "",
        "Forking is opt-in: only a job marked forkable (`hctl submit --elastic`) may run as "
        "averaged copies, since averaging copies changes how a model trains. Gavel's traces "
        "and the generated trace mark no job forkable, so `hadare` forks nothing in the "
        "plain cases. The target traces run once more with every job forkable (names ending "
        "in" + ALL_FORKABLE + "; `hctl simulate --forkable all`), under `gavel` and `hadare` "
        "only: that is the setting of the HadarE paper and of the 1.5x target.",
        "",
        "Two round models. Gavel's (the trace names alone): a plan holds until the round "
        "ends, so GPUs a job frees mid-round idle until then; Gavel's reference figures "
        "are of this model. The daemon's (names ending in" + EARLY + "): a job's exit "
        "while jobs wait triggers a round 1 s later (`Settings.early_rounds`, on by "
        "default; `hctl simulate --early-rounds`), so freed GPUs are re-planned at once. "
        "The target traces are run under both.",
        "",
        f"The generated trace `{POISSON_NAME}`: 1,000 jobs from `master.sim.generate` "
        f"(Gavel's job mix, seed 0), Poisson arrivals every {POISSON_INTERARRIVAL_S:.0f} s "
        f"on average, on {POISSON_CLUSTER}.",
        "",
        "## Against Slurm",
        "",
        "`slurm` is Slurm's default scheduler as labs run it: jobs in priority order "
        "(fair share, then age; submit time here), EASY backfill by the users' time limits, "
        "typed GPUs, packing, no preemption or migration (docs/policies.md). Gavel's traces "
        "have no time limits, so every job's limit is drawn as users overestimate theirs: "
        "its run time on its slowest allowed GPU type times a factor drawn per job from "
        f"{SimConfig().limit_overestimate} (seed {SimConfig().limit_overestimate.seed}; "
        "`hctl simulate --limit-overestimate`, docs/simulator.md). `slurm` never forks, so "
        "its figures in the all-forkable cases are those of the same trace without forking.",
        "",
    ]
    headline = results.get(HEADLINE, {})
    if DEFAULT_POLICY in headline and SLURM in headline:
        ratio = headline[SLURM]["avg_jct_s"] / headline[DEFAULT_POLICY]["avg_jct_s"]
        lines += [
            f"**`{DEFAULT_POLICY}` (the master's default policy), avg JCT vs Slurm-style "
            f"FIFO+backfill: {ratio:.2f}x** on {HEADLINE} "
            f"({_h(headline[DEFAULT_POLICY]['avg_jct_s'])} h against "
            f"{_h(headline[SLURM]['avg_jct_s'])} h; no job forkable).",
            "",
        ]
    policies = sorted({p for of_trace in results.values() for p in of_trace} - {SLURM})
    lines += [
        "Average JCT under `slurm` divided by each policy's (above 1: jobs finish sooner "
        "than under Slurm):",
        "",
        "| trace | slurm avg JCT | " + " | ".join(f"`{p}`" for p in policies) + " |",
        "|---|---|" + "---|" * len(policies),
    ]
    for trace, of_trace in results.items():
        if SLURM not in of_trace:
            continue
        ref = of_trace[SLURM]["avg_jct_s"]
        cells = [
            f"{ref / of_trace[p]['avg_jct_s']:.2f}x" if p in of_trace else "-" for p in policies
        ]
        lines.append(f"| {trace} | {_h(ref)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Targets",
        "",
        "The best research policy (lowest average JCT among those whose p99 JCT is not "
        "worse than `gavel`'s) against `gavel`:",
        "",
        "| trace | best | avg JCT | gavel avg JCT | speed-up | p99 JCT | gavel p99 JCT | "
        "target (1.5x, p99 not worse) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for trace in TARGETS:
        per_policy = results.get(trace)
        if not per_policy or "gavel" not in per_policy:
            continue
        best = best_research(per_policy)
        b, g = per_policy[best], per_policy["gavel"]
        ratio = g["avg_jct_s"] / b["avg_jct_s"]
        met = ratio >= 1.5 and b["p99_jct_s"] <= g["p99_jct_s"] * (1 + 1e-9)
        if met:
            verdict = "met"
        elif ratio < 1.5:
            needed = g["avg_jct_s"] / 1.5
            verdict = (
                f"not met: {ratio:.2f}x, {1.5 / ratio - 1:.0%} short "
                f"(needs avg JCT <= {_h(needed)})"
            )
        else:
            verdict = "not met: p99 worse than gavel's"
        lines.append(
            f"| {trace} | `{best}` | {_h(b['avg_jct_s'])} | {_h(g['avg_jct_s'])} | "
            f"{ratio:.2f}x | {_h(b['p99_jct_s'])} | {_h(g['p99_jct_s'])} | {verdict} |"
        )
    lines += [
        "",
        "## Where a research policy does not beat `gavel`",
        "",
        "Per trace, the research policies whose average or p99 JCT is worse than `gavel`'s:",
        "",
    ]
    for trace, per_policy in results.items():
        ref = per_policy.get("gavel")
        if ref is None:
            continue
        notes = []
        for policy in sorted(p for p in per_policy if p not in BASELINES):
            f = per_policy[policy]
            worse = []
            if f["avg_jct_s"] > ref["avg_jct_s"] * (1 + 1e-9):
                worse.append(f"avg {_h(f['avg_jct_s'])} vs {_h(ref['avg_jct_s'])}")
            if f["p99_jct_s"] > ref["p99_jct_s"] * (1 + 1e-9):
                worse.append(f"p99 {_h(f['p99_jct_s'])} vs {_h(ref['p99_jct_s'])}")
            if worse:
                notes.append(f"`{policy}` ({', '.join(worse)})")
        lines.append(f"- {trace}: " + ("; ".join(notes) if notes else "none") + ".")
    lines.append("")
    for trace, per_policy in results.items():
        cluster = next(iter(per_policy.values()))["cluster"]
        n_jobs = next(iter(per_policy.values()))["jobs"]
        gavel_avg = per_policy.get("gavel", {}).get("avg_jct_s")
        slurm_avg = per_policy.get(SLURM, {}).get("avg_jct_s")
        lines += [
            f"## {trace} ({n_jobs} jobs, {cluster})",
            "",
            "| policy | avg JCT | median | p99 | makespan | vs gavel avg | vs slurm avg | "
            "util. | jobs forked | plan ms |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for policy in sorted(per_policy, key=lambda p: per_policy[p]["avg_jct_s"]):
            f = per_policy[policy]
            versus = f"{gavel_avg / f['avg_jct_s']:.2f}x" if gavel_avg else "-"
            against = f"{slurm_avg / f['avg_jct_s']:.2f}x" if slurm_avg else "-"
            lines.append(
                f"| `{policy}` | {_h(f['avg_jct_s'])} | {_h(f['median_jct_s'])} | "
                f"{_h(f['p99_jct_s'])} | {_h(f['makespan_s'])} | {versus} | {against} | "
                f"{f['utilization']:.0%} | {f['copies_jobs']} | "
                f"{f['plan_ms_mean']:.1f} / {f['plan_ms_max']:.0f} |"
            )
        stem = _stem(trace)
        lines.append("")
        for name in plots:
            if name in (f"results-{stem}-jct.png", f"results-{stem}-cdf.png"):
                lines.append(f"![{trace}](img/{name})")
        lines.append("")
    # The fair-share and Gavel-fidelity sections are written by their own benchmarks
    # (bench/bench_fair_share.py, bench/bench_gavel_fidelity.py); keep them.
    kept = "\n\n".join(
        part
        for part in (kept_fair_share(out / "results.md"), kept_gavel_fidelity(out / "results.md"))
        if part
    )
    (out / "results.md").write_text("\n".join(lines) + (f"\n{kept}\n" if kept else ""))


def kept_fair_share(markdown: Path) -> str:
    from bench.bench_fair_share import BEGIN, END

    text = markdown.read_text() if markdown.exists() else ""
    start, end = text.find(BEGIN), text.find(END)
    return text[start : end + len(END)] if 0 <= start < end else ""


def kept_gavel_fidelity(markdown: Path) -> str:
    from bench.bench_gavel_fidelity import BEGIN, END

    text = markdown.read_text() if markdown.exists() else ""
    start, end = text.find(BEGIN), text.find(END)
    return text[start : end + len(END)] if 0 <= start < end else ""


def rewrite_markdown(raw: Path, out: Path) -> None:
    """Rewrite results.md and the plots from figures saved with ``--json``."""
    results = json.loads(raw.read_text())
    plots = write_plots(results, out / "img")
    write_markdown(results, out, plots, ".venv/bin/python bench/results.py")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gavel-data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--jobs", type=int, default=1000, help="jobs in the Poisson trace")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--skip-poisson", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--json", type=Path, default=None, help="also write raw figures here")
    args = parser.parse_args(argv)
    results = run_all(args.gavel_data, args.jobs, args.workers, not args.skip_poisson)
    ordered = dict(sorted(results.items(), key=lambda kv: (kv[0] not in TARGETS, kv[0])))
    args.out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(ordered, args.out / "img")
    command = ".venv/bin/python bench/results.py" + (
        f" --jobs {args.jobs}" if args.jobs != 1000 else ""
    )
    write_markdown(ordered, args.out, plots, command)
    if args.json is not None:
        args.json.write_text(json.dumps(ordered, indent=1))
    for trace in TARGETS:
        per_policy = ordered.get(trace)
        if per_policy and "gavel" in per_policy:
            best = best_research(per_policy)
            ratio = per_policy["gavel"]["avg_jct_s"] / per_policy[best]["avg_jct_s"]
            print(f"{trace}: best research policy {best}, {ratio:.2f}x gavel's average JCT")
    print(f"wrote {args.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
