"""``hctl simulate``: run policies over a trace on a simulated cluster and compare them.

The hctl CLI plugs :func:`add_arguments` and :func:`run` in as its ``simulate``
subcommand; ``python -m master.sim`` runs the same thing stand-alone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from master.scheduling.fairshare import DEFAULT_HALF_LIFE_S, FairShareConfig
from master.scheduling.policy import (
    UnknownPolicyError,
    available_policies,
    make_policy,
    policy_parameters,
)
from master.scheduling.throughput import ThroughputModel
from master.sim.cluster_spec import build_cluster, parse_cluster_spec
from master.sim.data import THROUGHPUTS, bundled_traces, resolve_trace
from master.sim.engine import SimConfig, SimResult, SimulationError, Simulator
from master.sim.gavel_compat import compat_policy
from master.sim.limits import Overestimate
from master.sim.metrics import summarize
from master.sim.report import as_json, print_table, write_reports
from master.sim.trace import TraceError, read_trace
from protos.durations import parse_duration
from protos.numbers import (
    INT32_MAX,
    SECONDS_MAX,
    UINT32_MAX,
    float_type,
    int_type,
    seconds_type,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# `--throughputs none`: model speeds from relative GPU speeds alone.
NO_TABLE = "none"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``simulate`` options to ``parser``."""
    parser.add_argument(
        "--trace",
        required=True,
        help="trace: a Gavel .trace or .csv file, or a bundled trace's name "
        f"({', '.join(bundled_traces())})",
    )
    parser.add_argument(
        "--throughputs",
        default=None,
        help="throughput table (Gavel JSON); default: the bundled Gavel table; "
        f"'{NO_TABLE}': relative GPU speeds only",
    )
    parser.add_argument(
        "--cluster", required=True, help="GPUs per type, e.g. v100:36,p100:36,k80:36"
    )
    parser.add_argument(
        "--policy",
        default="fifo,las,gavel",
        help=f"comma-separated policies (known: {', '.join(available_policies())})",
    )
    parser.add_argument("--round", type=seconds_type(), default=360.0, help="round length, s (360)")
    parser.add_argument(
        "--overhead",
        type=float_type(0, SECONDS_MAX),
        default=0.0,
        help="restart overhead per (re)start, s (0)",
    )
    parser.add_argument(
        "--early-rounds",
        action="store_true",
        help="re-plan as soon as a job's exit frees GPUs while jobs wait, as the daemon "
        "does (default: only at round ends, as Gavel's simulator)",
    )
    parser.add_argument(
        "--forkable",
        choices=("trace", "all"),
        default="trace",
        help="which jobs may run as averaged copies (hadare): those the trace marks (a "
        "Gavel trace marks none; the default) or all of them",
    )
    parser.add_argument(
        "--gpus-per-server",
        type=int_type(1, INT32_MAX),
        default=None,
        help="GPUs per server (4; 1 with --gavel-compat)",
    )
    parser.add_argument(
        "--gavel-compat",
        action="store_true",
        help="reproduce Gavel's simulator: its server model, rounds, leases and allocation "
        "recompute cadence; fifo, las and gavel run as Gavel's fifo, max_min_fairness and "
        "max_min_fairness_perf (las|gavel.objective=finish_time_fairness: "
        "finish_time_fairness[_perf])",
    )
    parser.add_argument(
        "--seed",
        type=int_type(0, UINT32_MAX),
        default=0,
        help="seed for randomized policies, 0 to 4294967295 (0)",
    )
    parser.add_argument(
        "--min-migration-gain",
        type=float_type(0, None),
        default=SimConfig().min_migration_gain,
        help="a running job moves to other GPUs of the same count only for at least this "
        "relative throughput gain, as in the daemon (its setting of the same name; "
        f"{SimConfig().min_migration_gain}); 0 holds back only moves that make a job slower",
    )
    parser.add_argument(
        "--copy-efficiency",
        type=float_type(0, 1, above=True),
        default=0.9,
        help="progress factor of a job running as averaged copies, more than 0 up to 1 (0.9)",
    )
    parser.add_argument(
        "--limit-overestimate",
        default=str(Overestimate()),
        metavar="FACTOR|LOW-HIGH",
        help="time limits of jobs whose trace gives none: their run time on their slowest "
        "allowed GPU type times a factor drawn from LOW-HIGH per job (seeded by --seed), or "
        f"times FACTOR; at least 1 ({Overestimate()}); the slurm policy backfills by them",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="POLICY.KEY=VALUE",
        help="policy parameter, e.g. gavel.min_recompute_s=1920 (repeatable)",
    )
    parser.add_argument(
        "--shares",
        default=None,
        metavar="USER=SHARE[,...]",
        help="fair share between the trace's users, e.g. alice=2,bob=1 (unlisted: 1); "
        "every policy's rounds then follow the shares as the master's do",
    )
    parser.add_argument(
        "--fair-share-half-life",
        default=None,
        metavar="DURATION",
        help="half-life of the usage behind the fair-share factor, e.g. 1d or 12h (7d); "
        "turns fair share on",
    )
    parser.add_argument(
        "--max-gpus-per-user",
        type=int_type(0, INT32_MAX),
        default=0,
        metavar="N",
        help="GPUs one user may hold at once (0: no limit)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write CSVs and PNG plots here")
    parser.add_argument("--json", action="store_true", help="print results as JSON")


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if "," in text:
        return tuple(_parse_value(part) for part in text.split(","))
    return text


def parse_params(items: list[str], policies: list[str]) -> dict[str, dict[str, Any]]:
    params: dict[str, dict[str, Any]] = {name: {} for name in policies}
    for item in items:
        key, sep, value = item.partition("=")
        policy, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise ValueError(f"bad --param {item!r}; expected POLICY.KEY=VALUE")
        if policy not in params:
            raise ValueError(f"--param {item!r} names policy {policy!r}, which is not simulated")
        params[policy][name] = _parse_value(value)
    return params


def parse_shares(text: str) -> dict[str, float]:
    """`alice=2,bob=1` -> {"alice": 2.0, "bob": 1.0}."""
    out: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        user, sep, value = item.partition("=")
        user = user.strip()
        if not sep or not user:
            raise ValueError(f"--shares: {item.strip()!r} is not USER=SHARE")
        try:
            share = float(value)
        except ValueError:
            raise ValueError(f"--shares: share of {user!r} is not a number: {value!r}") from None
        if not math.isfinite(share) or share <= 0:
            raise ValueError(f"--shares: share of {user!r} must be > 0, got {value.strip()}")
        out[user] = share
    return out


def fair_share_config(args: argparse.Namespace) -> FairShareConfig | None:
    """The fair share and quota the flags ask for; None when they ask for neither."""
    enabled = args.shares is not None or args.fair_share_half_life is not None
    if args.max_gpus_per_user < 0:
        raise ValueError("--max-gpus-per-user must be >= 0")
    if not enabled and not args.max_gpus_per_user:
        return None
    half_life = DEFAULT_HALF_LIFE_S
    if args.fair_share_half_life is not None:
        half_life = float(parse_duration(args.fair_share_half_life))
    return FairShareConfig(
        enabled=enabled,
        user_shares=parse_shares(args.shares or ""),
        half_life_s=half_life,
        max_gpus_per_user=args.max_gpus_per_user,
    )


def _throughput_model(argument: str | None) -> ThroughputModel:
    if argument is None:
        return ThroughputModel.from_gavel_json(THROUGHPUTS)
    if argument.lower() == NO_TABLE:
        return ThroughputModel()
    return ThroughputModel.from_gavel_json(Path(argument))


def _progress_reporter(enabled: bool) -> tuple[Callable[[str], Callable[[float], None]], Any]:
    if not enabled:
        return (lambda _name: lambda _fraction: None), None
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}% of jobs done"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    )

    def for_policy(name: str) -> Callable[[float], None]:
        task = progress.add_task(name, total=1.0)
        return lambda fraction: progress.update(task, completed=fraction)

    return for_policy, progress


def run(args: argparse.Namespace) -> int:
    """Run the simulation described by ``args``; returns the process exit code."""
    try:
        policies = [p.strip() for p in str(args.policy).split(",") if p.strip()]
        if not policies:
            raise ValueError("--policy names no policy")
        if len(set(policies)) != len(policies):
            raise ValueError(f"--policy lists a policy twice: {args.policy}")
        known = available_policies()
        unknown = [p for p in policies if p not in known]
        if unknown:
            raise UnknownPolicyError(
                f"unknown policy {unknown[0]!r}; known policies: {', '.join(known)}"
            )
        params = parse_params(list(args.param), policies)
        for name in policies:
            if "seed" in policy_parameters(name):
                params[name].setdefault("seed", args.seed)
        gpus_per_server = args.gpus_per_server
        if gpus_per_server is None:
            gpus_per_server = 1 if args.gavel_compat else 4
        if gpus_per_server < 1:
            raise ValueError("--gpus-per-server must be >= 1")
        if args.gavel_compat and args.early_rounds:
            raise ValueError("--gavel-compat and --early-rounds exclude each other")
        if not math.isfinite(args.round) or args.round <= 0:
            raise ValueError("--round must be a positive number of seconds")
        config = SimConfig(
            round_s=args.round,
            overhead_s=args.overhead,
            copy_efficiency=args.copy_efficiency,
            early_rounds=args.early_rounds,
            fork_all=args.forkable == "all",
            min_migration_gain=args.min_migration_gain,
            fair_share=fair_share_config(args),
            limit_overestimate=Overestimate.parse(args.limit_overestimate, args.seed),
            gavel_compat=args.gavel_compat,
        )
        cluster = build_cluster(parse_cluster_spec(args.cluster), gpus_per_server)
        model = _throughput_model(args.throughputs)
        trace_path = resolve_trace(args.trace)
        trace = read_trace(trace_path)
        if not trace:
            raise ValueError(f"{trace_path}: the trace has no jobs")
        if args.gavel_compat:
            instances = [compat_policy(n, params[n], seed=args.seed) for n in policies]
        else:
            instances = [make_policy(name, **params[name]) for name in policies]
    except (ValueError, FileNotFoundError, TraceError) as exc:
        print(f"hctl simulate: {exc}", file=sys.stderr)
        return EXIT_USAGE

    for_policy, progress = _progress_reporter(sys.stderr.isatty())
    results: list[SimResult] = []
    try:
        if progress is not None:
            progress.start()
        for name, policy in zip(policies, instances, strict=True):
            simulator = Simulator(policy, trace, cluster, model, config, progress=for_policy(name))
            results.append(simulator.run())
    except (SimulationError, ValueError) as exc:
        print(f"hctl simulate: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if progress is not None:
            progress.stop()

    for result in results:
        if result.isolated_rounds:
            ids = ", ".join(str(i) for i in result.isolated_jobs[:10])
            more = (
                f" and {len(result.isolated_jobs) - 10} more"
                if len(result.isolated_jobs) > 10
                else ""
            )
            print(
                f"hctl simulate: {result.policy}: in {result.isolated_rounds} rounds the policy "
                f"failed on jobs {ids}{more}; they were left out of its plan then (running "
                "ones kept their GPUs) and the others planned",
                file=sys.stderr,
            )
        if result.fallback_rounds:
            print(
                f"hctl simulate: {result.policy}: in {result.fallback_rounds} rounds the policy "
                "failed or planned what the cluster cannot run; every job kept its GPUs then",
                file=sys.stderr,
            )
    if args.json:
        print(json.dumps(as_json(results), indent=2))
    else:
        print_table([summarize(r) for r in results], sys.stdout)
    if args.out is not None:
        try:
            written = write_reports(results, args.out)
        except OSError as exc:
            print(f"hctl simulate: cannot write reports to {args.out}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        if not args.json:
            print(f"reports: {', '.join(str(p) for p in written)}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hctl simulate", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
