"""Reports of simulation runs: a comparison table, per-job CSVs and PNG plots."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from master.sim.engine import SimResult
from master.sim.metrics import Summary, job_bound, summarize

HOUR = 3600.0


def comparison_table(summaries: Sequence[Summary]) -> Any:
    """A rich Table comparing policies (hours for times)."""
    from rich.table import Table

    table = Table(title="Simulated policies", show_lines=False)
    for header in (
        "policy",
        "jobs",
        "avg JCT h",
        "p95 JCT h",
        "p99 JCT h",
        "makespan h",
        "util",
        "avg queue h",
        "rho mean",
        "rounds",
        "preempt",
        "migrate",
        "plan s",
        "plan ms mean/p99/max",
        "JCT / bound",
    ):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for s in summaries:
        table.add_row(
            s.policy,
            str(s.jobs),
            f"{s.avg_jct_s / HOUR:.2f}",
            f"{s.p95_jct_s / HOUR:.2f}",
            f"{s.p99_jct_s / HOUR:.2f}",
            f"{s.makespan_s / HOUR:.2f}",
            f"{s.utilization:.1%}",
            f"{s.avg_queue_s / HOUR:.2f}",
            f"{s.rho_mean:.2f}",
            str(s.rounds),
            str(s.preemptions),
            str(s.migrations),
            f"{s.planning_s:.2f}",
            f"{s.plan_ms_mean:.1f}/{s.plan_ms_p99:.1f}/{s.plan_ms_max:.1f}",
            f"{s.jct_ratio:.2f}",
        )
    return table


def print_table(summaries: Sequence[Summary], stream: IO[str]) -> None:
    from rich.console import Console

    console = Console(file=stream, width=160)
    console.print(comparison_table(summaries))
    if summaries:
        first = summaries[0]
        console.print(
            f"lower bound (each job alone on its fastest type): avg JCT "
            f"{first.lower_bound_avg_jct_s / HOUR:.2f} h, makespan "
            f"{first.lower_bound_makespan_s / HOUR:.2f} h"
        )


def as_json(results: Sequence[SimResult]) -> dict[str, Any]:
    """The ``--json`` document: per-policy figures and the lower bound."""
    summaries = [summarize(r) for r in results]
    lower = {"avg_jct_s": float("nan"), "makespan_s": float("nan")}
    if results:
        jobs = results[0].jobs
        first = min(j.arrival_s for j in jobs)
        lower = {
            "avg_jct_s": sum(j.lower_bound_s for j in jobs) / len(jobs),
            "makespan_s": max(j.arrival_s + j.lower_bound_s for j in jobs) - first,
        }
    return {"results": [s.as_json() for s in summaries], "lower_bound": lower}


def write_job_csv(result: SimResult, path: Path) -> None:
    types = sorted(result.capacity_by_type)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "job_id",
                "job_type",
                "num_gpus",
                "user",
                "priority",
                "arrival_s",
                "start_s",
                "finish_s",
                "jct_s",
                "queue_s",
                "preemptions",
                "migrations",
                *[f"gpu_s_{t}" for t in types],
                "lower_bound_s",
                "rho",
            ]
        )
        for i, job in enumerate(result.jobs):
            writer.writerow(
                [
                    job.id,
                    job.job_type,
                    job.num_gpus,
                    job.user,
                    job.priority,
                    f"{job.arrival_s:.3f}",
                    f"{job.start_s:.3f}",
                    f"{job.finish_s:.3f}",
                    f"{job.jct_s:.3f}",
                    f"{job.queue_s:.3f}",
                    job.preemptions,
                    job.migrations,
                    *[f"{job.gpu_seconds.get(t, 0.0):.1f}" for t in types],
                    f"{job_bound(result, i):.3f}",
                    f"{job.rho:.4f}",
                ]
            )


def write_user_csv(result: SimResult, path: Path) -> None:
    """Per round and user: the GPU-seconds their jobs held and how many of their jobs
    waited (what fair share is judged on)."""
    users = sorted({u for r in result.rounds for u in (*r.gpu_seconds_by_user, *r.waiting_by_user)})
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["round", "start_s", "end_s", "user", "gpu_seconds", "waiting_jobs"])
        for record in result.rounds:
            for user in users:
                writer.writerow(
                    [
                        record.index,
                        f"{record.start_s:.1f}",
                        f"{record.end_s:.1f}",
                        user,
                        f"{record.gpu_seconds_by_user.get(user, 0.0):.1f}",
                        record.waiting_by_user.get(user, 0),
                    ]
                )


def write_plots(results: Sequence[SimResult], out: Path) -> list[Path]:
    """JCT CDF per policy, utilization over time, occupancy by GPU type. Returns paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for result in results:
        jcts = sorted(job.jct_s / HOUR for job in result.jobs)
        ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
        ax.step(jcts, ys, where="post", label=result.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "jct_cdf.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for result in results:
        total = sum(result.capacity_by_type.values())
        xs = [r.start_s / HOUR for r in result.rounds]
        ys = [sum(r.busy_by_type.values()) / total for r in result.rounds]
        ax.step(xs, ys, where="post", label=result.policy, linewidth=1)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPUs busy at round start (fraction)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Utilization over time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "utilization.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(
        len(results), 1, figsize=(8, 2.6 * max(1, len(results))), squeeze=False, sharex=True
    )
    for ax, result in zip(axes[:, 0], results, strict=True):
        types = sorted(result.capacity_by_type)
        xs = [r.start_s / HOUR for r in result.rounds]
        stacks = [[r.busy_by_type.get(t, 0) for r in result.rounds] for t in types]
        if xs:
            ax.stackplot(xs, stacks, labels=types, step="post")
        ax.set_ylabel("busy GPUs")
        ax.set_title(f"{result.policy}: occupancy by GPU type")
        ax.legend(loc="upper right", fontsize="small")
    axes[-1, 0].set_xlabel("time (hours)")
    fig.tight_layout()
    paths.append(out / "occupancy.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def write_reports(results: Sequence[SimResult], out: Path, *, plots: bool = True) -> list[Path]:
    """Per-job CSVs, summary CSV/JSON and plots under ``out``. Returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for result in results:
        path = out / f"jobs_{result.policy}.csv"
        write_job_csv(result, path)
        written.append(path)
        if result.config.fair_share is not None:
            path = out / f"users_{result.policy}.csv"
            write_user_csv(result, path)
            written.append(path)
    doc = as_json(results)
    summary_json = out / "summary.json"
    summary_json.write_text(json.dumps(doc, indent=2) + "\n")
    written.append(summary_json)
    summary_csv = out / "summary.csv"
    rows = doc["results"]
    with summary_csv.open("w", newline="") as handle:
        if rows:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    written.append(summary_csv)
    if plots:
        written += write_plots(results, out)
    return written
