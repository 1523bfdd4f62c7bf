"""Accounting commands: usage (GPU-hours, like sreport) and history (ended jobs, like sacct)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from clients.cli import format as fmt
from clients.cli.command import CliError, Command, Context, ExitCode
from clients.cli.completion import offer
from clients.cli.jobs import now_utc, parse_states, styled_state
from clients.types import (
    TERMINAL_JOB_STATES,
    FairShareReport,
    JobRecord,
    JobState,
    UsageGrouping,
    UsageReport,
)
from protos.numbers import INT64_MAX, int_type

if TYPE_CHECKING:
    # rich loads when a command prints, not when `hctl` builds its parser.
    from rich.table import Table


TERMINAL_NAMES = tuple(s.value for s in JobState if s in TERMINAL_JOB_STATES)
USAGE_HEADINGS = {
    UsageGrouping.USER: "USER",
    UsageGrouping.GPU_TYPE: "GPU TYPE",
    UsageGrouping.DAY: "DAY (UTC)",
}


def since_argument(text: str) -> str:
    """argparse check of --since/--until (the value is resolved against one `now` later)."""
    try:
        fmt.parse_since(text, now_utc())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# -- usage ------------------------------------------------------------------------------------


def _configure_usage(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group()
    who.add_argument("-u", "--user", help="only this user's usage (default: everyone's)")
    who.add_argument("--me", action="store_true", help="only my usage")
    parser.add_argument(
        "--since",
        type=since_argument,
        default="30d",
        metavar="WHEN",
        help="start of the period: an age (30d, 12h) or a date/time (2026-11-01) (default 30d)",
    )
    parser.add_argument(
        "--until", type=since_argument, metavar="WHEN", help="end of the period (default: now)"
    )
    parser.add_argument(
        "--by",
        choices=[g.value for g in UsageGrouping],
        default=UsageGrouping.USER.value,
        help="one row per user, GPU type or UTC day (default user)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")


def usage_table(report: UsageReport) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    table.add_column(USAGE_HEADINGS[report.grouping], no_wrap=True)
    for column in ("GPU-HOURS", "SHARE", "JOBS", "ATTEMPTS"):
        table.add_column(column, justify="right", no_wrap=True)
    total = report.total_gpu_seconds
    for row in report.rows:
        share = row.gpu_seconds / total if total > 0 else 0.0
        table.add_row(
            row.key, f"{row.gpu_hours:.2f}", f"{share:.1%}", str(row.jobs), str(row.attempts)
        )
    table.add_row("total", f"{report.total_gpu_hours:.2f}", "", "", "")
    return table


def period_line(report: UsageReport) -> str:
    return (
        f"GPU usage from {fmt.format_timestamp(report.since)} "
        f"to {fmt.format_timestamp(report.until)}"
    )


def _run_usage(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    now = now_utc()
    user = client.whoami().user if args.me else args.user
    since = fmt.parse_since(args.since, now)
    until = fmt.parse_since(args.until, now) if args.until else None
    if until is not None and since >= until:
        raise CliError("--since must be before --until", ExitCode.USAGE)
    report = client.usage(user=user, since=since, until=until, by=UsageGrouping(args.by))
    if args.json:
        ctx.json({"usage": report})
        return ExitCode.OK
    ctx.say(period_line(report))
    if not report.rows:
        ctx.note("no GPU time used in this period" + (f" by {user}" if user else ""))
        return ExitCode.OK
    ctx.show(usage_table(report))
    return ExitCode.OK


# -- fair share -------------------------------------------------------------------------------


def _configure_fairshare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")


def fair_share_table(report: FairShareReport) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    table.add_column("USER", no_wrap=True)
    table.add_column("GROUP", no_wrap=True)
    for column in ("RAW SHARE", "SHARE", "USAGE GPU-H", "USAGE", "FACTOR", "GPUS", "QUOTA"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in report.rows:
        table.add_row(
            row.user,
            row.group or "-",
            f"{row.raw_share:g}",
            f"{row.share:.1%}",
            f"{row.usage_gpu_seconds / 3600.0:.2f}",
            f"{row.usage:.1%}",
            f"{row.factor:.3f}",
            str(row.gpus),
            str(row.quota) if row.quota else "-",
        )
    return table


def _run_fairshare(args: argparse.Namespace, ctx: Context) -> int:
    report = ctx.client().fair_share()
    if args.json:
        ctx.json({"fairshare": report})
        return ExitCode.OK
    state = "on" if report.enabled else "off (quotas still hold)"
    ctx.say(f"fair share {state}; usage half-life {fmt.format_duration(report.half_life_s)}")
    if not report.rows:
        ctx.note("no user has unfinished jobs or recent usage")
        return ExitCode.OK
    ctx.show(fair_share_table(report))
    return ExitCode.OK


# -- history ----------------------------------------------------------------------------------


def _configure_history(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group()
    who.add_argument("-u", "--user", help="only this user's jobs (default: mine)")
    who.add_argument(
        "-a", "--all-users", action="store_true", help="every user's jobs (default: mine)"
    )
    parser.add_argument(
        "--since",
        type=since_argument,
        default="7d",
        metavar="WHEN",
        help="only jobs that ended after this: an age (7d, 12h) or a date/time (default 7d)",
    )
    offer(
        parser.add_argument(
            "-t",
            "--state",
            action="append",
            metavar="STATE",
            help="only these end states (completed, failed, cancelled, timeout, or "
            "CD/F/CA/TO); repeat or comma-separate",
        ),
        TERMINAL_NAMES,
    )
    parser.add_argument(
        "-n",
        "--limit",
        type=int_type(1, INT64_MAX),
        metavar="N",
        help="at most N jobs, the newest (default: all)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")


def history_table(records: Sequence[JobRecord], now: datetime) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    columns = ("ID", "NAME", "USER", "STATE", "EXIT", "START", "END", "RAN", "GPUS", "TYPES")
    for column in (*columns, "GPU-HOURS", "REASON"):
        table.add_column(column, no_wrap=column != "REASON")
    for record in records:
        job = record.job
        table.add_row(
            str(job.id),
            job.spec.name,
            job.user,
            styled_state(job.state),
            "-" if job.exit_code is None else str(job.exit_code),
            fmt.format_timestamp(job.started_at),
            fmt.format_timestamp(job.finished_at),
            fmt.format_duration(record.run_seconds),
            str(job.spec.num_gpus),
            ",".join(record.gpu_types) or "-",
            f"{record.gpu_hours:.2f}",
            job.reason,
        )
    return table


def _run_history(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    now = now_utc()
    states = parse_states(args.state)
    for state in states:
        if not state.terminal:
            raise CliError(
                f"{state.value} is not a state a job ends in",
                ExitCode.USAGE,
                f"use one of {', '.join(TERMINAL_NAMES)}; `hctl queue` lists active jobs",
            )
    user: str | None = args.user
    if not user and not args.all_users:
        user = client.whoami().user
    records = client.job_history(
        user=user, since=fmt.parse_since(args.since, now), states=states, limit=args.limit
    )
    if args.json:
        ctx.json({"jobs": records})
        return ExitCode.OK
    if not records:
        who = f" of {user}" if user else ""
        ctx.note(f"no jobs{who} ended since {args.since}; try --since 30d or --all-users")
        return ExitCode.OK
    ctx.show(history_table(records, now))
    return ExitCode.OK


COMMANDS = [
    Command(
        "usage",
        "GPU-hours used, per user, GPU type or day (like sreport)",
        _configure_usage,
        _run_usage,
        description="GPU-hours used in a period by every attempt of every job (running ones up "
        "to now), one row per user, GPU type or UTC day, like Slurm's sreport. A job's "
        "GPU time is its run time times the GPUs it held, on whatever GPU type it ran.",
        epilog="examples:\n"
        "  hctl usage\n"
        "  hctl usage --me --since 7d --by type\n"
        "  hctl usage --by day --since 2026-11-01 --until 2026-12-01 --json",
    ),
    Command(
        "fairshare",
        "Each user's share, decayed usage and fair-share factor (like sshare)",
        _configure_fairshare,
        _run_fairshare,
        description="Fair share as the master's rounds see it, like Slurm's sshare: per "
        "user with unfinished jobs or recent usage, the configured share, the fraction of "
        "the cluster it gives among active users (groups applied), GPU-hours used decayed "
        "by the half-life, that usage's fraction, the factor 2^(-usage/share) that scales "
        "the user's priorities, GPUs held now and the GPU quota.",
        epilog="examples:\n  hctl fairshare\n  hctl fairshare --json | jq '.fairshare.rows[]'",
    ),
    Command(
        "history",
        "Jobs that ended, with exit codes and GPU-hours (like sacct)",
        _configure_history,
        _run_history,
        description="Jobs that ended (completed, failed, cancelled, timeout), newest first, "
        "with their exit code, start and end, run time summed over attempts, GPU types and "
        "GPU-hours, like Slurm's sacct. Your own jobs unless -u or -a says otherwise.",
        epilog="examples:\n"
        "  hctl history\n"
        "  hctl history -a --since 30d -t failed,timeout\n"
        "  hctl history --json | jq '.jobs[] | {id: .job.id, gpu_seconds}'",
    ),
]
