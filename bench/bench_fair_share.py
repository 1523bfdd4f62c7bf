"""Fair share between two users in the simulator; writes a section of docs/results.md and
docs/img/fair-share-two-users.png.

bob submits 200 jobs at once, alice 20 from two hours later (ten times fewer), on
v100:8,p100:8,k80:8 with shares alice=2, bob=1 and a usage half-life of one day. Each
policy runs with and without fair share; the figures are each user's fraction of the
GPU-seconds held over the rounds in which both had jobs waiting, and the plot shows the
fractions round by round. The same run from the command line, for one policy:

    .venv/bin/python bench/bench_fair_share.py --trace-only /tmp/two_users.csv
    .venv/bin/hctl simulate --trace /tmp/two_users.csv --cluster v100:8,p100:8,k80:8 \
        --policy las --shares alice=2,bob=1 --fair-share-half-life 1d --out /tmp/fs

(``users_las.csv`` there holds each user's GPU-seconds and waiting jobs per round.)

    .venv/bin/python bench/bench_fair_share.py
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.markdown import write_section
from master.scheduling.fairshare import FairShareConfig
from master.scheduling.policy import make_policy, policy_parameters
from master.scheduling.throughput import ThroughputModel
from master.sim.cluster_spec import build_cluster, parse_cluster_spec
from master.sim.data import THROUGHPUTS
from master.sim.engine import SimConfig, SimResult, simulate
from master.sim.trace import TraceJob, write_csv_trace

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "v100:8,p100:8,k80:8"
SHARES = {"alice": 2.0, "bob": 1.0}
HALF_LIFE_S = 86400.0
POLICIES = ("fifo", "las", "srtf", "gavel", "hadar")
PLOTTED = "las"
JOB_TYPES = (
    "ResNet-18 (batch size 64)",
    "ResNet-50 (batch size 64)",
    "LM (batch size 20)",
    "Transformer (batch size 64)",
)
BEGIN = "<!-- fair-share: written by bench/bench_fair_share.py -->"
END = "<!-- /fair-share -->"


def two_user_trace(seed: int = 0) -> list[TraceJob]:
    """bob: 200 jobs at t=0, 1-3 h alone on a V100; alice: 20 jobs, one every 10 min from
    t=2 h, 4-8 h each; one job in five asks for 2 GPUs."""
    rng = random.Random(seed)
    jobs = []
    for i in range(200):
        jobs.append(
            TraceJob(
                id=i,
                arrival_s=0.0,
                job_type=rng.choice(JOB_TYPES),
                num_gpus=2 if rng.random() < 0.2 else 1,
                iterations=None,
                duration_s=rng.uniform(3600.0, 3 * 3600.0),
                user="bob",
            )
        )
    for k in range(20):
        jobs.append(
            TraceJob(
                id=200 + k,
                arrival_s=7200.0 + 600.0 * k,
                job_type=rng.choice(JOB_TYPES),
                num_gpus=2 if rng.random() < 0.2 else 1,
                iterations=None,
                duration_s=rng.uniform(4 * 3600.0, 8 * 3600.0),
                user="alice",
            )
        )
    return jobs


def run(policy: str, trace: Sequence[TraceJob], fair: bool) -> SimResult:
    cluster = build_cluster(parse_cluster_spec(CLUSTER), 4)
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    params = {"seed": 0} if "seed" in policy_parameters(policy) else {}
    config = SimConfig(
        fair_share=FairShareConfig(user_shares=SHARES, half_life_s=HALF_LIFE_S) if fair else None
    )
    return simulate(make_policy(policy, **params), trace, cluster, model, config)


def contended(result: SimResult) -> tuple[float, float]:
    """(alice's fraction of the GPU-seconds, hours) over the rounds where both waited."""
    used = {"alice": 0.0, "bob": 0.0}
    length = 0.0
    for record in result.rounds:
        if sum(1 for n in record.waiting_by_user.values() if n > 0) < 2:
            continue
        length += record.end_s - record.start_s
        for user, seconds in record.gpu_seconds_by_user.items():
            used[user] += seconds
    total = sum(used.values())
    return (used["alice"] / total if total else 0.0), length / 3600.0


def plot(with_fs: SimResult, without: SimResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for result, style, label in ((with_fs, "-", "fair share"), (without, ":", "no fair share")):
        for user, color in (("alice", "tab:blue"), ("bob", "tab:orange")):
            xs, ys = [], []
            for record in result.rounds:
                total = sum(record.gpu_seconds_by_user.values())
                if total <= 0:
                    continue
                xs.append(record.start_s / 3600.0)
                ys.append(record.gpu_seconds_by_user.get(user, 0.0) / total)
            ax.plot(xs, ys, style, color=color, label=f"{user}, {label}")
    share = SHARES["alice"] / sum(SHARES.values())
    ax.axhline(share, color="tab:blue", alpha=0.3, linewidth=4, label="alice's share (2/3)")
    ax.axhline(1 - share, color="tab:orange", alpha=0.3, linewidth=4, label="bob's share (1/3)")
    ax.set_xlabel("hours")
    ax.set_ylabel("fraction of the GPU-seconds held")
    ax.set_title(f"{PLOTTED}: bob submits 200 jobs at 0 h, alice 20 from 2 h")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(0, 48)
    ax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def section(rows: list[tuple[str, float, float, float, float]]) -> list[str]:
    share = SHARES["alice"] / sum(SHARES.values())
    lines = [
        BEGIN,
        "## Fair share: two users, one submitting ten times more jobs",
        "",
        "Generated by `.venv/bin/python bench/bench_fair_share.py` (see its docstring for "
        "the same run with `hctl simulate --shares`). bob submits 200 jobs at 0 h (1-3 h "
        "each), alice 20 from 2 h (4-8 h each), on "
        f"{CLUSTER}; shares alice=2, bob=1 (alice's fraction {share:.1%}), usage half-life "
        "1 day, rounds of 360 s. Figures: alice's fraction of the GPU-seconds held over the "
        "rounds in which both users had jobs waiting, and those rounds' total length.",
        "",
        "| policy | alice, fair share | hours both waiting | alice, no fair share | "
        "hours both waiting |",
        "|---|---|---|---|---|",
    ]
    for policy, fs, fs_h, plain, plain_h in rows:
        lines.append(f"| `{policy}` | {fs:.1%} | {fs_h:.1f} | {plain:.1%} | {plain_h:.1f} |")
    lines += [
        "",
        f"![each user's fraction of the GPUs over time under {PLOTTED}]"
        "(img/fair-share-two-users.png)",
        END,
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--trace-only", type=Path, default=None, help="write the trace CSV")
    args = parser.parse_args(argv)
    trace = two_user_trace()
    if args.trace_only is not None:
        write_csv_trace(args.trace_only, trace)
        print(f"wrote {args.trace_only}")
        return 0
    rows = []
    plotted: tuple[SimResult, SimResult] | None = None
    for policy in POLICIES:
        with_fs, without = run(policy, trace, True), run(policy, trace, False)
        fs, fs_h = contended(with_fs)
        plain, plain_h = contended(without)
        rows.append((policy, fs, fs_h, plain, plain_h))
        print(f"{policy}: alice {fs:.1%} over {fs_h:.1f} h (no fair share: {plain:.1%})")
        if policy == PLOTTED:
            plotted = (with_fs, without)
    assert plotted is not None
    (args.out / "img").mkdir(parents=True, exist_ok=True)
    plot(*plotted, args.out / "img" / "fair-share-two-users.png")
    write_section(args.out / "results.md", BEGIN, END, section(rows))
    print(f"wrote {args.out / 'results.md'} and {args.out / 'img' / 'fair-share-two-users.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
