"""Side by side with Gavel's own simulator: average JCT per trace and policy.

Runs ``hctl simulate`` (as ``python -m master.sim``) on Gavel's two evaluation traces and
on the ten traces in ``bench/gavel_traces`` (made with Gavel's generator and converted to
Hadar's CSV; docs/results.md gives the command), in the Gavel-compatible mode and, with
``--default-mode``, in the default mode, and prints a Markdown section next to Gavel's
figures read from its logs (``--write``: into docs/results.md between its markers, which
``bench/results.py`` keeps)::

    python -m bench.bench_gavel_fidelity --gavel-logs DIR [--default-mode] [--write F]

``DIR`` holds one log of Gavel's driver per run, named ``TAG__POLICY.log`` (TAG as in
:data:`CASES`, POLICY Gavel's policy name). A run Gavel did not finish shows as failed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.markdown import write_section

TRACES = Path(__file__).parent / "gavel_traces"
BIG = "v100:36,p100:36,k80:36"
SMALL = "v100:8,p100:16,k80:24"

#: (tag, trace, cluster): Gavel's two evaluation traces, then 3 loads x 2 seeds on each
#: cluster (mean inter-arrival time in seconds in the name).
CASES: list[tuple[str, str, str]] = [
    ("artifact", "artifact_evaluation", "v100:2,p100:0,k80:4"),
    ("mmf96", "max_min_fairness", SMALL),
] + [
    (f"c{size}_l{lam}_s{seed}", str(TRACES / f"gen_l{lam}_s{seed}.csv"), cluster)
    for seed in (0, 1)
    for size, cluster, loads in ((108, BIG, (900, 450, 300)), (48, SMALL, (1800, 1200, 900)))
    for lam in loads
]

#: Gavel's policy -> (our policy, extra --param), as --gavel-compat maps them.
POLICIES: dict[str, tuple[str, str | None]] = {
    "fifo": ("fifo", None),
    "max_min_fairness": ("las", None),
    "max_min_fairness_perf": ("gavel", None),
    "finish_time_fairness_perf": ("gavel", "gavel.objective=finish_time_fairness"),
    "finish_time_fairness": ("las", "las.objective=finish_time_fairness"),
}
_AVG = re.compile(r"Average job completion time: ([\d.]+) seconds")


def gavel_avg_h(logs: Path, tag: str, policy: str) -> float | None:
    path = logs / f"{tag}__{policy}.log"
    if not path.exists():
        return None
    match = _AVG.search(path.read_text(errors="replace"))
    return float(match.group(1)) / 3600.0 if match else None


def ours_avg_h(trace: str, cluster: str, policy: str, param: str | None, compat: bool) -> float:
    command = [sys.executable, "-m", "master.sim", "--trace", trace, "--cluster", cluster]
    command += ["--policy", policy, "--json"]
    if param is not None:
        command += ["--param", param]
    if compat:
        command.append("--gavel-compat")
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return float(json.loads(out)["results"][0]["avg_jct_s"]) / 3600.0


BEGIN = "<!-- gavel-fidelity: written by bench/bench_gavel_fidelity.py -->"
END = "<!-- /gavel-fidelity -->"
GAVEL_COMMAND = (
    "python scripts/drivers/simulate_scheduler_with_trace.py -t TRACE -p POLICY "
    "-c V100:P100:K80 --seed 0"
)


def _pct(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None:
        return ""
    return f"{(ours / theirs - 1) * 100:+.1f}%"


def _h(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def section(figures: dict[tuple[str, str, bool], float], logs: Path) -> list[str]:
    """The docs/results.md section: the fidelity table and the default mode's."""
    lines = [
        BEGIN,
        "## Fidelity against Gavel's own simulator",
        "",
        "Average JCT in hours of Gavel's simulator (stanford-futuredata/gavel, run "
        "unmodified in its own virtualenv, ECOS solver, seed 0, its driver's default of one "
        "GPU per server) and of `hctl simulate` on the same trace: in the Gavel-compatible "
        "mode (`--gavel-compat`, docs/simulator.md) and in the default mode (the daemon's "
        "round: 4 GPUs per server, hysteresis, Hadar's own policies). The default mode has "
        "no finish-time fair policies. Written by `.venv/bin/python -m "
        "bench.bench_gavel_fidelity --gavel-logs DIR --default-mode --write "
        "docs/results.md`.",
        "",
        "Traces: Gavel's two evaluation traces (`artifact` = artifact_evaluation.trace on "
        "v100:2,k80:4; `mmf96` = max_min_fairness.trace on v100:8,p100:16,k80:24), and ten "
        "of 160 jobs made with Gavel's generator (`scripts/utils/generate_trace.py "
        "--num_jobs 160 -l LAM --seed S -m`: Poisson arrivals every LAM s on average, its "
        "job mix with multi-GPU jobs, 1-4 h on a V100), converted to Hadar's CSV in "
        "`bench/gavel_traces/gen_lLAM_sS.csv`. `c108_lLAM_sS` runs one on "
        "v100:36,p100:36,k80:36, `c48_lLAM_sS` on v100:8,p100:16,k80:24.",
        "",
        "Commands, per trace and policy:",
        "",
        f"- Gavel (in `scheduler/`): `{GAVEL_COMMAND}`, POLICY one of "
        + ", ".join(f"`{p}`" for p in POLICIES)
        + "; the log is saved as `DIR/TAG__POLICY.log`.",
        "- Hadar, compat: `hctl simulate --trace TRACE --cluster v100:V,p100:P,k80:K "
        "--policy fifo,las,gavel --gavel-compat` (Gavel's fifo, max_min_fairness and "
        "max_min_fairness_perf), and `--policy gavel --param "
        "gavel.objective=finish_time_fairness --gavel-compat` (finish_time_fairness_perf), "
        "`--policy las --param las.objective=finish_time_fairness --gavel-compat` "
        "(finish_time_fairness).",
        "- Hadar, default: the same without `--gavel-compat`.",
        "",
        "| trace | Gavel's policy | Gavel | compat | compat vs Gavel | default "
        "| default vs Gavel |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for tag, _, _ in CASES:
        for gavel in POLICIES:
            theirs = gavel_avg_h(logs, tag, gavel)
            compat = figures.get((tag, gavel, True))
            default = figures.get((tag, gavel, False))
            if theirs is not None and compat is not None:
                worst = max(worst, abs(compat / theirs - 1))
            cells = [
                tag,
                gavel,
                "Gavel failed" if theirs is None else _h(theirs),
                _h(compat),
                _pct(compat, theirs),
                _h(default) or "-",
                _pct(default, theirs),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Largest difference in the compat mode: {worst * 100:.1f}%. What each mechanism "
        "of the compat mode changes, and the differences that remain, are in "
        'docs/simulator.md ("Gavel-compatible mode").',
        END,
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gavel-logs", type=Path, required=True)
    parser.add_argument("--default-mode", action="store_true", help="also the default mode")
    parser.add_argument("--jobs", type=int, default=2, help="simulations in parallel (2)")
    parser.add_argument("--write", type=Path, default=None, help="write the section here")
    args = parser.parse_args(argv)
    runs = [
        (tag, trace, cluster, gavel, compat)
        for tag, trace, cluster in CASES
        for gavel in POLICIES
        for compat in ((True, False) if args.default_mode else (True,))
        # The default mode has no finish-time fair policy.
        if compat or POLICIES[gavel][1] is None
    ]

    def one(run: tuple[str, str, str, str, bool]) -> float:
        _, trace, cluster, gavel, compat = run
        ours, param = POLICIES[gavel]
        return ours_avg_h(trace, cluster, ours, param, compat)

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = dict(zip(runs, pool.map(one, runs), strict=True))
    figures = {(run[0], run[3], run[4]): value for run, value in done.items()}
    lines = section(figures, args.gavel_logs)
    if args.write is not None:
        write_section(args.write, BEGIN, END, lines)
        print(f"wrote {args.write}")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
