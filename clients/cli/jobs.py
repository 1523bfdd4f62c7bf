"""Job commands: submit, queue, show, cancel, logs, wait."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clients.cli import format as fmt
from clients.cli.arrays import display_id, is_array, job_ref, queue_rows, resolve
from clients.cli.changes import ChangeLines
from clients.cli.command import CliError, Command, Context, ExitCode, split_list
from clients.cli.completion import offer
from clients.cli.grid import Grid
from clients.cli.jobfile import (
    SpecError,
    build_spec,
    load_job_file,
    normalize,
    parse_env_assignments,
    parse_gpu_memory,
    parse_time_limit,
    resolve_locally,
)
from clients.cli.printable import printable_line
from clients.errors import DeadlineExceeded, NotFound, PermissionDenied, Unavailable
from clients.types import (
    ACTIVE_JOB_STATES,
    WAITING_JOB_STATES,
    Delivery,
    Job,
    JobDescription,
    JobEvent,
    JobSpec,
    JobState,
    LogChunk,
    LogStream,
)
from protos.arrays import JobRef, dependency_text, parse_array, parse_dependency, parse_job_ids
from protos.bounds import (
    BATCH_SIZE_MAX,
    ITERATIONS_MAX,
    NUM_GPUS_MAX,
    PRIORITY_MAX,
    PRIORITY_MIN,
    PRIORITY_RANGE,
)
from protos.numbers import (
    MAX_RETRIES,
    UINT32_MAX,
    float_type,
    int_type,
    seconds_type,
)
from protos.warnsignal import format_signal, parse_signal

if TYPE_CHECKING:
    # rich and the client load when a command prints or calls the master, not when `hctl`
    # builds its parser.
    from rich.console import RenderableType
    from rich.text import Text

    from clients.client import HadarClient

STATE_STYLES: dict[JobState, str] = {
    JobState.PENDING: "yellow",
    JobState.RUNNING: "green",
    JobState.PREEMPTED: "magenta",
    JobState.COMPLETED: "blue",
    JobState.FAILED: "red",
    JobState.CANCELLED: "dim",
    JobState.TIMEOUT: "red",
}
# The same by the state's name, as a queue's cells hold it.
STATE_TEXT_STYLES: dict[str, str] = {state.value: style for state, style in STATE_STYLES.items()}
QUEUE_COLUMNS = (
    "ID",
    "NAME",
    "USER",
    "STATE",
    "GPUS",
    "NODE/REASON",
    "SUBMITTED",
    "ELAPSED",
    "PROGRESS",
)
STATE_NAMES = tuple(s.value for s in JobState if s is not JobState.UNSPECIFIED)


def checked_text(check: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse ``type=`` that keeps a value as written once `check` accepts it, so a
    bad value is a usage error naming its flag; job files and flags are then read alike."""

    def convert(text: str) -> str:
        try:
            check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    # argparse names the type in some messages; the default would be "convert".
    convert.__name__ = getattr(check, "__name__", "value")
    return convert


def parse_states(values: Sequence[str] | None) -> list[JobState]:
    states: list[JobState] = []
    for item in split_list(values):
        try:
            state = JobState.parse(item)
        except ValueError as exc:
            raise CliError(str(exc), ExitCode.USAGE, "see `hctl queue --help`") from None
        if state not in states:
            states.append(state)
    return states


@contextmanager
def about_job(job: int | JobRef, action: str = "") -> Iterator[None]:
    """Turns the master's NOT_FOUND and PERMISSION_DENIED about one job into clear lines."""
    try:
        yield
    except NotFound:
        raise CliError(
            f"job {job} not found", ExitCode.NOT_FOUND, "list jobs with `hctl queue --all`"
        ) from None
    except PermissionDenied as exc:
        what = f"cannot {action} job {job}" if action else f"no access to job {job}"
        raise CliError(
            f"{what}: {exc.details}",
            ExitCode.PERMISSION_DENIED,
            "only its owner or an admin may; check your identity with `hctl whoami`",
        ) from None


def now_utc() -> datetime:
    return datetime.now(UTC)


def styled_state(state: JobState) -> Text:
    from rich.text import Text

    return Text(state.value, style=STATE_STYLES.get(state, ""))


# -- submit -----------------------------------------------------------------------------------


def _configure_submit(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    parser.add_argument(
        "-H",
        "--hold",
        action="store_true",
        default=None,
        help="store the job held: it starts only once `hctl release ID` lets it (sbatch --hold)",
    )
    out = parser.add_argument_group("output")
    mode = out.add_mutually_exclusive_group()
    mode.add_argument("--parsable", action="store_true", help="print only the job id")
    mode.add_argument("--json", action="store_true", help="print the accepted job as JSON")


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """What to run and with what: the flags `hctl submit` and `hctl run` share."""
    what = parser.add_argument_group("what to run (one of)")
    what.add_argument("--workload", metavar="NAME", help="a built-in workload (`hctl workloads`)")
    what.add_argument(
        "--script",
        action="store_true",
        help="COMMAND uses the runtime helper: managed (preemptible, migratable, shareable) "
        "once it reports progress; until then it stays where it started, like a command",
    )
    what.add_argument(
        "argv",
        nargs="*",
        metavar="COMMAND",
        help="after `--`: the command line; without --script an opaque command that runs to "
        "completion where first placed (unless --preemptible), in the directory you submit "
        "from and with your environment, as sbatch runs a batch script",
    )
    what.add_argument("-f", "--file", type=Path, metavar="JOB.TOML", help="read the spec from TOML")
    spec = parser.add_argument_group("resources and work")
    spec.add_argument("--name", help="job name (default: the workload or script name)")
    spec.add_argument(
        "--gpus", type=int_type(1, NUM_GPUS_MAX), metavar="N", help="number of GPUs (default 1)"
    )
    spec.add_argument(
        "--gpu-type",
        action="append",
        metavar="TYPE",
        help="allowed GPU type; repeat or comma-separate (default: any)",
    )
    spec.add_argument(
        "--iterations",
        type=int_type(1, ITERATIONS_MAX),
        metavar="N",
        help="training iterations (required for --workload and --script; for a command an "
        "optional estimate: without it the command runs until it exits)",
    )
    spec.add_argument(
        "--batch-size",
        type=int_type(0, BATCH_SIZE_MAX),
        metavar="N",
        help="global batch size (0: the workload's default)",
    )
    spec.add_argument(
        "--priority",
        type=float_type(PRIORITY_MIN, PRIORITY_MAX),
        metavar="W",
        help=f"weight in fair policies, {PRIORITY_RANGE} (default 1)",
    )
    preempt = spec.add_mutually_exclusive_group()
    preempt.add_argument(
        "--no-preempt",
        dest="preemptible",
        action="store_const",
        const=False,
        help="never stop or move the job once it runs",
    )
    preempt.add_argument(
        "--preemptible",
        dest="preemptible",
        action="store_const",
        const=True,
        help="a command may be stopped for others, requeued and run again from scratch in the "
        "same directory with the same environment (it resumes if it checkpoints itself); "
        "managed jobs are preemptible by default",
    )
    spec.add_argument(
        "--signal",
        type=checked_text(parse_signal),
        metavar="SIG[@SECONDS]",
        help="as sbatch --signal: send SIG (a name such as USR1, or a number) SECONDS "
        "(default 60, at most 600) before a preemption or the time limit stops the job; "
        "SIGTERM follows then, SIGKILL after the grace",
    )
    spec.add_argument(
        "--shareable",
        action="store_const",
        const=True,
        help="may share its GPUs with another job (gradient accumulation)",
    )
    spec.add_argument(
        "--elastic",
        "--forkable",
        dest="forkable",
        action="store_const",
        const=True,
        help="may run as several copies on idle servers whose models are averaged (hadare); "
        "this changes how the model trains, so it is off unless asked",
    )
    retries = spec.add_mutually_exclusive_group()
    retries.add_argument(
        "--retries",
        type=int_type(0, MAX_RETRIES),
        metavar="N",
        help="retry a failed attempt up to N times, 0 to 10 (default: none for a command, "
        "the cluster's max_retries for --workload and --script)",
    )
    retries.add_argument(
        "--no-requeue",
        dest="retries",
        action="store_const",
        const=0,
        help="never retry a failed attempt (same as --retries 0)",
    )
    spec.add_argument(
        "-t",
        "--time",
        type=checked_text(parse_time_limit),
        metavar="LIMIT",
        help="time limit, as sbatch's: 30s, 90m, 2h, 1d, MM:SS, HH:MM:SS or D-HH:MM:SS (a bare "
        "number is minutes); run time summed over attempts, queue time not counted; at the "
        "limit the job is stopped (managed jobs checkpoint first) and ends TIMEOUT "
        "(default: the cluster's default limit, if any)",
    )
    spec.add_argument(
        "--notify",
        metavar="URL",
        help="webhook (http/https) the master POSTs a JSON summary to when the job ends, "
        "e.g. a Slack, Mattermost or ntfy URL (default: your own, `hctl notify set`)",
    )
    spec.add_argument(
        "--notify-on",
        metavar="WHEN",
        help="which ends notify: end (completed, failed, timeout; the default), fail (failed, "
        "timeout), all (also cancelled), states, comma-separated, or none (not even your "
        "default webhook, e.g. for the jobs of a sweep)",
    )
    spec.add_argument(
        "--export",
        metavar="ALL|NONE|VARS",
        help="the environment the job gets, as sbatch --export: ALL (your whole environment; "
        "the default for commands and scripts), NONE (only the worker's; the default for "
        "--workload), or NAME,NAME=VALUE,... (only these; ALL,NAME=VALUE adds to ALL). "
        "Variables the runtime sets (HADAR_*, CUDA_VISIBLE_DEVICES, RANK...) are never sent",
    )
    spec.add_argument(
        "--env",
        action="append",
        metavar="NAME[=VALUE]",
        help="set a variable on top of --export (NAME alone: its value here); repeatable",
    )
    spec.add_argument(
        "--workdir",
        metavar="DIR",
        help="working directory on the worker; relative to the current directory "
        "(default for commands and scripts: the current directory)",
    )
    spec.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="where checkpoints go; made as you where missing",
    )
    spec.add_argument("--job-type", metavar="KEY", help="throughput-model key (advanced)")
    spec.add_argument(
        "--gpu-memory",
        type=checked_text(parse_gpu_memory),
        metavar="SIZE",
        help="memory each of its GPUs must have, e.g. 12GiB (smaller GPUs are never used)",
    )
    spec.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="also append standard output to this file, as sbatch does (%%j: job id, "
        "%%u: user, %%x: job name; relative to the workdir); `hctl logs` still has it",
    )
    spec.add_argument(
        "-e",
        "--error",
        metavar="PATH",
        help="also append standard error to this file (default: to --output's file)",
    )
    arrays = parser.add_argument_group("arrays and dependencies")
    arrays.add_argument(
        "-a",
        "--array",
        type=checked_text(parse_array),
        metavar="SPEC",
        help="submit a job array, as sbatch --array: 0-31, 1,3,5, 0-15:4, and %%N for at "
        "most N elements running at once (e.g. 0-31%%4); each element is a job of its own "
        "with HADAR_ARRAY_INDEX and HADAR_ARRAY_JOB_ID set, named ARRAY_INDEX (12_3); %%A "
        "and %%a in --output/--error are the array id and index",
    )
    for flag, waits in (
        ("--after-ok", "completed (cancelled if one of them ends otherwise)"),
        ("--after-any", "ended, however they ended"),
        ("--after-fail", "ended and not all completed (cancelled if they all completed)"),
    ):
        arrays.add_argument(
            flag,
            action="append",
            type=checked_text(parse_job_ids),
            metavar="ID[,ID]",
            help=f"start only once these jobs {waits}; an array's id means all its elements",
        )
    arrays.add_argument(
        "-d",
        "--dependency",
        action="append",
        type=checked_text(parse_dependency),
        metavar="LIST",
        help="dependencies as sbatch writes them: afterok:1:2,afterany:3,afterfail:4 "
        "(afternotok is afterfail)",
    )


def spec_values_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The spec values the flags set, by job-file key (flags left out are absent)."""
    flags: dict[str, Any] = {
        "name": args.name,
        "gpus": args.gpus,
        "iterations": args.iterations,
        "batch_size": args.batch_size,
        "priority": args.priority,
        "preemptible": args.preemptible,
        "shareable": args.shareable,
        "elastic": args.forkable,
        "workdir": args.workdir,
        "checkpoint_dir": args.checkpoint_dir,
        "job_type": args.job_type,
        "gpu_memory": args.gpu_memory,
        "retries": args.retries,
        "output": args.output,
        "error": args.error,
        "time": args.time,
        "array": args.array,
        "notify": args.notify,
        "notify_on": args.notify_on,
        "export": args.export,
        "signal": args.signal,
        "workload": args.workload,
    }
    for key in ("after_ok", "after_any", "after_fail"):
        given = getattr(args, key)
        if given:
            flags[key] = ",".join(given)
    if args.dependency:
        flags["dependency"] = ",".join(args.dependency)
    values = {key: value for key, value in flags.items() if value is not None}
    if args.gpu_type:
        values["gpu_types"] = split_list(args.gpu_type)
    if args.script and not args.argv:
        raise SpecError("--script", "needs the command after `--`: --script -- python train.py")
    if args.argv:
        values["script" if args.script else "command"] = list(args.argv)
    checked = normalize(values, origin="flags")
    if args.env:
        checked["env"] = parse_env_assignments(args.env, os.environ)
    return checked


def _current_directory() -> Path | None:
    """Where hctl runs (a command's default workdir, and what a relative one is under);
    None when it cannot be read (deleted since the shell entered it)."""
    try:
        return Path.cwd()
    except OSError:
        return None


def spec_from_arguments(args: argparse.Namespace) -> tuple[JobSpec, bool]:
    """The job spec `hctl submit` (and `hctl run`) sends, from a job file and the flags
    over it, and whether the job is to be held."""
    try:
        values: dict[str, Any] = load_job_file(args.file) if args.file else {}
        flags = spec_values_from_flags(args)
        if "env" in flags and "env" in values:
            flags["env"] = {**values["env"], **flags["env"]}
        if any(key in flags for key in ("workload", "script", "command")):
            for key in ("workload", "script", "command"):
                values.pop(key, None)
        values.update(flags)
        asked = getattr(args, "hold", None)
        hold = bool(asked if asked is not None else values.pop("hold", False))
        values.pop("hold", None)
        resolve_locally(values, _current_directory(), os.environ)
        spec = build_spec(values)
    except SpecError as exc:
        raise CliError(str(exc), ExitCode.USAGE, "see `hctl submit --help`") from None
    return spec, hold


def _run_submit(args: argparse.Namespace, ctx: Context) -> int:
    spec, hold = spec_from_arguments(args)
    client = ctx.client()
    job = client.submit_job(spec, hold=hold)
    held = f" — held: `hctl release {job.id}` lets it run" if hold else ""
    if spec.array:
        elements = client.array_elements(job.id)
        if args.parsable:
            ctx.say(str(job.id))
        elif args.json:
            ctx.json({"job": job, "elements": elements})
        else:
            ctx.say(
                f"submitted array job {job.id} ({job.spec.name}): {len(elements)} elements "
                f"{job.id}_[{job.spec.array}] — follow it with `hctl queue` or "
                f"`hctl wait {job.id}`{held}"
            )
        return ExitCode.OK
    if args.parsable:
        ctx.say(str(job.id))
    elif args.json:
        ctx.json({"job": job, "elements": []})
    else:
        ctx.say(
            f"submitted job {job.id} ({job.spec.name}): {job.state.value} — "
            f"follow it with `hctl show {job.id}`{held}"
        )
    return ExitCode.OK


# -- queue ------------------------------------------------------------------------------------


def _configure_queue(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group()
    who.add_argument("-u", "--user", help="only this user's jobs")
    who.add_argument("--me", action="store_true", help="only my jobs")
    offer(
        parser.add_argument(
            "-t",
            "--state",
            action="append",
            metavar="STATE",
            help="only these states (pending, running, preempted, completed, failed, "
            "cancelled, timeout, or PD/R/PR/CD/F/CA/TO); repeat or comma-separate",
        ),
        STATE_NAMES,
    )
    parser.add_argument(
        "-a", "--all", action="store_true", help="include finished jobs (default: active only)"
    )
    parser.add_argument(
        "-r",
        "--expand",
        action="store_true",
        help="one line per array element (default: an array's pending elements share one "
        "line, 12_[4-31%%4], as squeue shows them)",
    )
    parser.add_argument(
        "--start",
        action="store_true",
        help="waiting jobs (pending, preempted; or those of -t) with a START column: when "
        "each is expected to start, as squeue --start; - when there is no estimate (held, "
        "waiting on a dependency, or past the forecast's horizon; see docs/user-guide.md)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")
    parser.add_argument(
        "--watch",
        action="store_true",
        help="refresh until Ctrl-C; not on a terminal: a line per change",
    )
    parser.add_argument(
        "--interval", type=seconds_type(), default=2.0, metavar="S", help="--watch refresh period"
    )


def queue_filter(args: argparse.Namespace, ctx: Context) -> tuple[str | None, list[JobState]]:
    """The user and states a queue-like command selects."""
    user: str | None = args.user
    if args.me:
        user = ctx.client().whoami().user
    states = parse_states(args.state)
    if not states and getattr(args, "start", False):
        states = list(WAITING_JOB_STATES)
    elif not states and not getattr(args, "all", False):
        states = list(ACTIVE_JOB_STATES)
    return user, states


def queue_table(
    jobs: Sequence[Job], now: datetime, *, expand: bool = False, start: bool = False
) -> Grid:
    """The queue as a table; with `start`, a START column after STATE (hctl queue
    --start)."""
    rows = []
    for row in queue_rows(jobs, expand=expand):
        job = row.first
        cells = [
            row.shown_id,
            job.spec.name,
            job.user,
            job.state.value,
            # A + marks an elastic job: it may hold more GPUs, as averaged copies.
            f"{job.spec.num_gpus}{'+' if job.spec.forkable else ''}",
            fmt.node_or_reason(job),
            fmt.format_time(job.submitted_at, now),
            fmt.format_duration(fmt.time_run(job, now)),
            fmt.job_progress(job),
        ]
        if start:
            cells.insert(QUEUE_COLUMNS.index("STATE") + 1, fmt.format_time(job.expected_start, now))
        rows.append(tuple(cells))
    columns: tuple[str, ...] = QUEUE_COLUMNS
    if start:
        at = QUEUE_COLUMNS.index("STATE") + 1
        columns = (*QUEUE_COLUMNS[:at], "START", *QUEUE_COLUMNS[at:])
    return Grid.of(
        columns,
        rows,
        wrap_column=columns.index("NODE/REASON"),
        styles={columns.index("STATE"): STATE_TEXT_STYLES},
    )


def _run_queue(args: argparse.Namespace, ctx: Context) -> int:
    user, states = queue_filter(args, ctx)
    client = ctx.client()
    if args.json:
        if args.watch:
            raise CliError("--watch and --json do not combine", ExitCode.USAGE)
        jobs = client.list_jobs(user=user, states=states)
        ctx.json({"jobs": jobs})
        return ExitCode.OK
    if not args.watch:
        jobs = client.list_jobs(user=user, states=states)
        if not jobs:
            selective = args.state or args.all
            if args.start and not args.state:
                ctx.note("no waiting jobs")
            else:
                ctx.note("no jobs" if selective else "no active jobs (add --all for finished ones)")
            return ExitCode.OK
        ctx.show(queue_table(jobs, now_utc(), expand=args.expand, start=args.start))
        return ExitCode.OK
    return _watch_queue(ctx, args.interval, user, states, expand=args.expand, start=args.start)


def _watch_queue(
    ctx: Context,
    interval: float,
    user: str | None,
    states: list[JobState],
    *,
    expand: bool = False,
    start: bool = False,
) -> int:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    client = ctx.client()

    def screen() -> RenderableType:
        jobs = client.list_jobs(user=user, states=states)
        now = now_utc()
        header = Text(f"{fmt.format_time(now, now.astimezone())}  {len(jobs)} jobs", style="dim")
        return Group(header, queue_table(jobs, now, expand=expand, start=start))

    try:
        if ctx.out.is_terminal:
            with Live(screen(), console=ctx.out, auto_refresh=False, screen=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(screen(), refresh=True)
        else:
            # A pipe or a log file gets a line per change, not a table per refresh.
            changes = ChangeLines()
            while True:
                for line in changes.update(client.list_jobs(user=user, states=states), now_utc()):
                    ctx.out.file.write(line + "\n")
                ctx.out.file.flush()
                time.sleep(interval)
    except KeyboardInterrupt:
        return ExitCode.OK


# -- show -------------------------------------------------------------------------------------


def expected_start_line(job: Job, now: datetime) -> str:
    """When a waiting job is expected to start, or why there is no estimate."""
    if job.expected_start is not None:
        return (
            f"{fmt.format_time(job.expected_start, now)} "
            f"({fmt.format_timestamp(job.expected_start)}; the policy run forward over the "
            "queue as it is, without new arrivals)"
        )
    if job.held_by:
        return f"- (held; `hctl release {job.id}` lets it run)"
    return (
        "- (no estimate: submitted since the last forecast, waiting on a dependency or its "
        "array's limit, or not started within the forecast's reach)"
    )


def _configure_show(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", type=job_ref, metavar="JOB", help="job id, or array element (12_3)")
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")


def _run_show(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    with about_job(args.job):
        described = client.describe_job(resolve(client, args.job).id)
    now = now_utc()
    eta = fmt.estimate_eta(described.job, now)
    if args.json:
        document = {
            "job": described.job,
            "events": list(described.events),
            "notifications": list(described.notifications),
            "eta_s": eta.seconds if eta else None,
            "eta_basis": eta.basis if eta else "",
        }
        ctx.json(document)
        return ExitCode.OK
    ctx.show(render_job(described, now))
    return ExitCode.OK


def render_job(described: JobDescription, now: datetime) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    job = described.job
    spec = job.spec
    parts: list[RenderableType] = []
    heading = f"Job {job.id}" + (f" ({display_id(job)})" if spec.array_job_id else "")
    title = Text.assemble((heading, "bold"), f"  {spec.name}  ", (f"({job.user})", "dim"))
    parts.append(title)
    info = Table.grid(padding=(0, 2))
    info.add_column(style="bold")
    info.add_column()
    state = styled_state(job.state)
    if job.reason:
        state.append(f" — {job.reason}")
    info.add_row("state", state)
    if job.failure_output:
        info.add_row("last error", job.failure_output)
    if job.private_hidden:
        info.add_row(
            "program",
            f"{spec.program.kind.value}"
            + (f" {spec.program.workload}" if spec.program.workload else "")
            + f" (its command, environment, paths and output are {job.user}'s and the "
            "admins' to read)",
        )
    else:
        info.add_row("program", spec.program.describe())
    gpu_types = ", ".join(spec.allowed_gpu_types) or "any"
    preemptible = "default" if spec.preemptible is None else ("yes" if spec.preemptible else "no")
    info.add_row(
        "resources",
        f"{spec.num_gpus} GPU(s), types {gpu_types}; batch {spec.batch_size or 'default'}; "
        f"priority {spec.priority:g}; preemptible {preemptible}; "
        f"shareable {'yes' if spec.shareable else 'no'}; "
        f"elastic {'yes (may run as averaged copies)' if spec.forkable else 'no'}"
        + (
            f"; GPU memory {fmt.format_bytes(spec.gpu_memory_bytes)} per GPU"
            if spec.gpu_memory_bytes
            else ""
        ),
    )
    if spec.workdir or spec.checkpoint_dir:
        info.add_row(
            "paths", f"workdir {spec.workdir or '-'}; checkpoints {spec.checkpoint_dir or '-'}"
        )
    if spec.output or spec.error:
        info.add_row(
            "output", f"stdout {spec.output or '-'}; stderr {spec.error or spec.output or '-'}"
        )
    if spec.env:
        info.add_row("env", fmt.env_line(spec.env, job.id))
    if spec.interactive:
        info.add_row("session", "interactive (hctl run --pty): on a terminal its owner attaches to")
    if spec.warn_signal:
        info.add_row(
            "signal",
            f"{format_signal(spec.warn_signal, spec.warn_before_s)}: warned "
            f"{spec.warn_before_s} s before a preemption or its time limit stops it",
        )
    info.add_row(
        "times",
        f"submitted {fmt.format_time(job.submitted_at, now)} "
        f"({fmt.format_age(job.submitted_at, now)}); "
        f"started {fmt.format_time(job.started_at, now)}; "
        f"finished {fmt.format_time(job.finished_at, now)}; "
        f"ran {fmt.format_duration(fmt.time_run(job, now))}",
    )
    if job.state in WAITING_JOB_STATES:
        info.add_row("expected start", expected_start_line(job, now))
    info.add_row("limit", fmt.time_limit_line(job))
    if spec.array_job_id:
        info.add_row(
            "array",
            f"element {display_id(job)} of array {spec.array_job_id} ({spec.array}); "
            f"`hctl queue -r` lists them, `hctl cancel {spec.array_job_id}` cancels them all",
        )
    if spec.dependencies:
        pairs = [(d.kind, d.job_id) for d in spec.dependencies]
        info.add_row("depends on", dependency_text(pairs))
    if spec.no_notify:
        info.add_row("notify", "none (not even your default webhook)")
    elif spec.notify_url or spec.notify_on:
        on = ", ".join(s.value.lower() for s in spec.notify_on) or "completed, failed, timeout"
        info.add_row("notify", f"{spec.notify_url or 'your default webhook'} on {on}")
    if job.progress_measured:
        progress = fmt.format_progress(job.iterations_done, spec.iterations)
        progress += f"; checkpoint at {job.checkpoint_iterations}"
        eta = fmt.estimate_eta(job, now)
        if eta is not None:
            progress += f"; ETA {fmt.format_duration(eta.seconds)} ({eta.basis})"
    else:
        progress = fmt.progress_line(job, now)
    info.add_row("progress", progress)
    exit_code = "-" if job.exit_code is None else str(job.exit_code)
    retries = f"{job.retries} retr{'y' if job.retries == 1 else 'ies'}"
    if job.retry_limit is not None:
        retries += f" of {job.retry_limit} allowed"
        retries += " (default)" if spec.max_retries is None else ""
    info.add_row(
        "history",
        f"{job.preemptions} preemption(s), {job.migrations} migration(s), "
        + (f"{job.requeues} requeue(s), " if job.requeues else "")
        + f"{retries}; {'exit' if job.state.terminal else 'last exit'} code {exit_code}; "
        f"GPU time {fmt.format_gpu_hours(job.gpu_seconds)}; "
        f"attained service {job.attained_service:.1f} GPU-s",
    )
    parts.append(info)
    if job.tasks:
        parts.append(Text(f"\nPlacement (lease {job.tasks[0].lease})", style="bold"))
        tasks = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
        for column in ("TASK", "NODE", "GPUS", "TYPE", "RANKS", "BATCH", "ACCUM", "STATE"):
            tasks.add_column(column)
        for task in job.tasks:
            ranks = f"{task.rank_offset}-{task.rank_offset + len(task.gpu_indices) - 1}"
            shared = f" shared with {task.shared_with_job_id}" if task.shared_with_job_id else ""
            tasks.add_row(
                str(task.task_index),
                task.node,
                ",".join(str(i) for i in task.gpu_indices),
                task.gpu_type,
                ranks,
                str(task.local_batch_size),
                str(task.accumulation_steps),
                task.state.value + shared,
            )
        parts.append(tasks)
    if job.throughputs:
        parts.append(Text("\nThroughput by GPU type", style="bold"))
        rates = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
        for column in ("TYPE", "RATE", "SOURCE", "TIME LEFT"):
            rates.add_column(column)
        for tp in sorted(job.throughputs, key=lambda t: -t.iterations_per_s):
            left = job.remaining_iterations / tp.iterations_per_s if tp.iterations_per_s else None
            rates.add_row(
                tp.gpu_type,
                fmt.format_rate(tp.iterations_per_s),
                tp.source,
                fmt.format_duration(left)
                if job.progress_measured and not job.state.terminal
                else "-",
            )
        parts.append(rates)
    if described.notifications:
        parts.append(Text("\nNotifications", style="bold"))
        parts.append(deliveries_table(described.notifications, now))
    parts.append(Text("\nEvents", style="bold"))
    parts.append(events_table(described.events, now))
    return Group(*parts)


def deliveries_table(deliveries: Sequence[Delivery], now: datetime) -> RenderableType:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in ("FOR", "ENDPOINT", "STATUS", "ATTEMPTS", "LAST TRY", "DETAIL"):
        table.add_column(column)
    for item in deliveries:
        table.add_row(
            item.job_state.value.upper(),
            item.endpoint,
            fmt.delivery_status(item),
            str(item.attempts),
            fmt.format_time(item.last_attempt_at, now),
            fmt.delivery_detail(item, now),
        )
    return table


def events_table(events: Sequence[JobEvent], now: datetime) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    if not events:
        return Text("no events recorded", style="dim")
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in ("TIME", "ROUND", "CHANGE", "KIND", "REASON"):
        table.add_column(column, no_wrap=column != "REASON")
    for event in events:
        if event.from_state is event.to_state or event.from_state is JobState.UNSPECIFIED:
            change = event.to_state.value
        else:
            change = f"{event.from_state.value} → {event.to_state.value}"
        table.add_row(
            fmt.format_time(event.at, now),
            str(event.round) if event.round else "-",
            change,
            event.kind,
            event.reason,
        )
    return table


# -- cancel -----------------------------------------------------------------------------------


def _configure_cancel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "jobs",
        nargs="*",
        type=job_ref,
        metavar="JOB",
        help="job ids; an array's id cancels all its elements, 12_3 one element",
    )
    who = parser.add_mutually_exclusive_group()
    who.add_argument("-u", "--user", help="also every active job of this user")
    who.add_argument("--me", action="store_true", help="also every active job of mine")
    offer(
        parser.add_argument(
            "-t",
            "--state",
            action="append",
            metavar="STATE",
            help="with -u/--me: only these states",
        ),
        STATE_NAMES,
    )
    parser.add_argument("--reason", default="", help="recorded in the job's history")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")


def _run_cancel(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    targets: list[JobRef] = list(dict.fromkeys(args.jobs))
    if args.state and not (args.user or args.me):
        raise CliError(
            "-t/--state selects among a user's jobs: add -u USER or --me", ExitCode.USAGE
        )
    if args.user or args.me:
        user, states = queue_filter(args, ctx)
        selected = [j for j in client.list_jobs(user=user, states=states) if not j.state.terminal]
        if not selected and not targets:
            ctx.note(f"no active jobs of {user} to cancel")
            return ExitCode.OK
        if selected and not args.yes:
            _confirm(ctx, user or "", selected)
        targets.extend(JobRef(j.id) for j in selected if JobRef(j.id) not in targets)
    if not targets:
        raise CliError("name jobs to cancel", ExitCode.USAGE, "e.g. `hctl cancel 42` or `--me`")
    worst = ExitCode.OK
    for target in targets:
        try:
            with about_job(target, "cancel"):
                # Looked up first only to tell "cancelled now" from "had already ended".
                before = resolve(client, target)
                if target.array_index is None and is_array(before):
                    _cancel_array(ctx, client, before, args.reason)
                    continue
                job = before if before.state.terminal else client.cancel_job(before.id, args.reason)
        except CliError as exc:
            ctx.note(exc.line())
            worst = worst if worst != ExitCode.OK else exc.code
            continue
        if before.spec.array_job_id:
            name = f"{display_id(before)} ({job.spec.name}, job {job.id})"
            if before.state.terminal:
                ctx.say(f"array element {name} had already ended: {job.state.value}")
            else:
                ctx.say(f"cancelled array element {name}")
        elif before.state.terminal:
            ctx.say(f"job {job.id} ({job.spec.name}) had already ended: {job.state.value}")
        elif job.state is JobState.CANCELLED:
            ctx.say(f"cancelled job {job.id} ({job.spec.name})")
        else:
            ctx.say(f"cancelling job {job.id} ({job.spec.name}): stopping its tasks")
    return worst


def _cancel_array(ctx: Context, client: HadarClient, first: Job, reason: str) -> None:
    """scancel's form: an array's id cancels every element still waiting or running."""
    before = client.array_elements(first.id)
    client.cancel_job(first.id, reason, whole_array=True)
    ended = sum(1 for e in before if e.state.terminal)
    ctx.say(
        f"cancelled array job {first.id} ({first.spec.name}): {len(before) - ended} of "
        f"{len(before)} elements" + (f" ({ended} had already ended)" if ended else "")
    )


def _confirm(ctx: Context, user: str, jobs: Sequence[Job]) -> None:
    ids = " ".join(str(j.id) for j in jobs)
    if not sys.stdin.isatty():
        raise CliError(
            f"refusing to cancel {len(jobs)} job(s) of {user} ({ids}) without confirmation",
            ExitCode.USAGE,
            "add --yes",
        )
    ctx.note(f"cancel {len(jobs)} job(s) of {user}: {ids}? [y/N] ", end="")
    answer = input().strip().lower()
    if answer not in ("y", "yes"):
        raise CliError("nothing cancelled", ExitCode.ERROR)


# -- logs -------------------------------------------------------------------------------------


def _configure_logs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", type=job_ref, metavar="JOB", help="job id, or array element (12_3)")
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="follow the job: wait while it is pending, print new output as it is written, "
        "go on with each new attempt, exit 0 when the job has ended (`hctl wait` tells how)",
    )
    parser.add_argument(
        "--tail",
        type=int_type(0, UINT32_MAX),
        default=0,
        metavar="N",
        help="last N lines per task",
    )
    parser.add_argument(
        "--rank", type=int_type(0, UINT32_MAX), metavar="R", help="only this global rank"
    )
    parser.add_argument(
        "--attempt",
        type=int_type(1, UINT32_MAX),
        metavar="N",
        help="only attempt N (1: the first placement); default: every attempt, in order",
    )
    parser.add_argument(
        "--label", action="store_true", help="prefix each line with its node and rank"
    )


class LogPrinter:
    """Writes a job's output as it arrives: standard output to stdout, standard error to
    stderr, a header before each attempt when the job has had several (when following,
    before every attempt: more may come), and, with labels, each line prefixed with where
    it came from."""

    def __init__(
        self,
        job: int,
        label: bool,
        headers: bool,
        follow: bool = False,
        header_stream: LogStream = LogStream.STDOUT,
    ) -> None:
        self._job = job
        self._label = label
        self._headers = headers
        self._follow = follow
        # `hctl run` keeps stdout for the job's own output.
        self._header_stream = header_stream
        self._pending: dict[tuple[int, str, int, LogStream], bytes] = {}
        self.attempts: list[LogChunk] = []
        self.received = False

    @staticmethod
    def _write(stream: LogStream, data: bytes) -> None:
        target = sys.stderr if stream is LogStream.STDERR else sys.stdout
        binary = getattr(target, "buffer", None)
        if binary is not None:
            target.flush()
            binary.write(data)
            binary.flush()
        else:
            target.write(data.decode(errors="replace"))
            target.flush()

    def chunk(self, chunk: LogChunk) -> None:
        if not chunk.data:
            self._opening(chunk)
            return
        self.received = True
        if not self._label:
            self._write(chunk.stream, chunk.data)
            return
        key = (chunk.attempt, chunk.node, chunk.rank, chunk.stream)
        *lines, rest = (self._pending.pop(key, b"") + chunk.data).split(b"\n")
        self._pending[key] = rest
        prefix = self._prefix(chunk.node, chunk.rank, chunk.stream)
        self._write(chunk.stream, b"".join(prefix + line + b"\n" for line in lines))

    def _opening(self, chunk: LogChunk) -> None:
        if not chunk.attempt:
            return
        self.flush()
        self.attempts.append(chunk)
        if self._headers and (self._follow or chunk.attempts > 1):
            what = f"attempt {chunk.attempt}" + ("" if self._follow else f" of {chunk.attempts}")
            if chunk.nodes:
                what += f" on {', '.join(chunk.nodes)}"
            what += f" (lease {chunk.lease})"
            if chunk.start_failure:
                what += f": did not start: {chunk.start_failure}"
            # The header is hctl's, not the job's: what others wrote in it is escaped.
            header = printable_line(f"==> job {self._job} {what} <==")
            self._write(self._header_stream, f"{header}\n".encode())

    @staticmethod
    def _prefix(node: str, rank: int, stream: LogStream) -> bytes:
        where = f"{node} rank {rank}" + (" stderr" if stream is LogStream.STDERR else "")
        return f"[{printable_line(where)}] ".encode()

    def flush(self) -> None:
        for (_, node, rank, stream), rest in self._pending.items():
            if rest:
                self._write(stream, self._prefix(node, rank, stream) + rest + b"\n")
        self._pending.clear()


def _run_logs(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    with about_job(args.job, "read the logs of"):
        # Asked first, so that NOT_FOUND from the stream is about the output only.
        job = resolve(client, args.job)
    job_id_ = job.id
    if args.follow and args.attempt is None and job.state in (JobState.PENDING, JobState.PREEMPTED):
        what = "is pending" if job.state is JobState.PENDING else "waits to run again"
        why = f" ({job.reason})" if job.reason else ""
        ctx.note(f"job {args.job} {what}{why}; its output follows once it runs (Ctrl-C to stop)")
    printer = LogPrinter(job_id_, args.label, headers=args.attempt is None, follow=args.follow)
    try:
        for chunk in client.stream_logs(
            job_id_,
            follow=args.follow,
            tail_lines=args.tail,
            rank=args.rank,
            attempt=args.attempt,
        ):
            printer.chunk(chunk)
    except KeyboardInterrupt:
        return ExitCode.OK
    except NotFound as exc:
        printer.flush()
        raise CliError(f"no such output: {exc.details}", ExitCode.NOT_FOUND) from None
    except Unavailable as exc:
        printer.flush()
        if not printer.attempts:
            raise
        # The master answered (it opened an attempt): a worker is what cannot be reached.
        raise CliError(
            f"cannot read all of job {job_id_}'s output: {exc.details}",
            ExitCode.UNAVAILABLE,
            "its worker may be down; `hctl nodes` shows the nodes' state",
        ) from None
    printer.flush()
    if printer.received:
        return ExitCode.OK
    attempts = printer.attempts
    if not attempts:
        ctx.note(f"no output from job {args.job} (a job that has not run yet has none)")
        return ExitCode.OK
    failures = [a for a in attempts if a.start_failure]
    if len(failures) == len(attempts):
        last = failures[-1]
        which = f"attempt {last.attempt}" if len(attempts) > 1 or args.attempt else "it"
        raise CliError(
            f"job {args.job} has no output: {which} did not start: {last.start_failure}",
            ExitCode.NOT_STARTED,
            f"see `hctl show {args.job}` for its history",
        )
    which = "" if len(attempts) == 1 else f" in {len(attempts)} attempts"
    ctx.note(f"job {args.job} printed no output{which}")
    return ExitCode.OK


# -- wait -------------------------------------------------------------------------------------

WAIT_EXIT_CODES: dict[JobState, ExitCode] = {
    JobState.COMPLETED: ExitCode.OK,
    JobState.FAILED: ExitCode.JOB_FAILED,
    JobState.CANCELLED: ExitCode.JOB_CANCELLED,
    JobState.TIMEOUT: ExitCode.JOB_TIMEOUT,
}


def _configure_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job",
        type=job_ref,
        metavar="JOB",
        help="job id (an array's id: all its elements), or array element (12_3)",
    )
    parser.add_argument(
        "--timeout",
        dest="wait_timeout",
        type=seconds_type(),
        metavar="S",
        help="give up after S seconds (exit 124); default: wait as long as it takes",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing")


def wait_for_job(ctx: Context, job: int, timeout: float | None) -> Job | None:
    """The job once it reaches a terminal state; None if ``timeout`` seconds pass first."""
    client = ctx.client()
    deadline = None if timeout is None else time.monotonic() + timeout
    with about_job(job):
        current = client.get_job(job)
    while not current.state.terminal:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return None
        try:
            with about_job(job):
                for update in client.watch_jobs([job], include_initial=True, timeout=remaining):
                    if update.job.id == job:
                        current = update.job
                        if current.state.terminal:
                            break
                else:
                    # The master ended the stream (e.g. it is shutting down): look again.
                    current = client.get_job(job)
        except DeadlineExceeded:
            return None
    return current


def _run_wait(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    with about_job(args.job):
        target = resolve(client, args.job)
    if args.job.array_index is None and is_array(target):
        return _wait_array(args, ctx, target)
    try:
        job = wait_for_job(ctx, target.id, args.wait_timeout)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    if job is None:
        if not args.quiet:
            ctx.note(f"job {args.job} did not finish within {args.wait_timeout:g}s")
        return ExitCode.TIMEOUT
    if not args.quiet:
        redundant = not job.reason or job.reason.startswith(job.state.value)
        detail = "" if redundant else f": {job.reason}"
        ctx.say(f"job {display_id(job)} ({job.spec.name}) {job.state.value}{detail}")
    return WAIT_EXIT_CODES.get(job.state, ExitCode.ERROR)


def _wait_array(args: argparse.Namespace, ctx: Context, first: Job) -> int:
    """Wait for every element; the exit code is 0 when all completed, else that of the
    first element (by index) that did not."""
    deadline = None if args.wait_timeout is None else time.monotonic() + args.wait_timeout
    ended: list[Job] = []
    try:
        for element in ctx.client().array_elements(first.id):
            remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
            job = wait_for_job(ctx, element.id, remaining)
            if job is None:
                if not args.quiet:
                    ctx.note(
                        f"array {first.id} did not finish within {args.wait_timeout:g}s "
                        f"({len(ended)} elements ended)"
                    )
                return ExitCode.TIMEOUT
            ended.append(job)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    counts: dict[str, int] = {}
    for job in ended:
        counts[job.state.value] = counts.get(job.state.value, 0) + 1
    if not args.quiet:
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        ctx.say(f"array {first.id} ({first.spec.name}): {len(ended)} elements ended: {summary}")
    for job in ended:
        if job.state is not JobState.COMPLETED:
            return WAIT_EXIT_CODES.get(job.state, ExitCode.ERROR)
    return ExitCode.OK


COMMANDS = [
    Command(
        "submit",
        "Submit a job and print its id",
        _configure_submit,
        _run_submit,
        description="Submit a job: a built-in workload, a managed script, or an opaque command. "
        "The spec comes from flags, or from a TOML file (-f) that flags override; the file's "
        "keys are listed in docs/cli.md.",
        epilog="examples:\n"
        "  hctl submit --workload resnet --gpus 2 --iterations 5000 --gpu-type v100,a100-40gb\n"
        "  hctl submit --script --gpus 4 --iterations 20000 -- python train.py --lr 0.1\n"
        "  hctl submit --iterations 100 --name prep -- bash prepare.sh\n"
        "  JOB=$(hctl submit -f job.toml --priority 2 --parsable)",
    ),
    Command(
        "queue",
        "List jobs, Slurm style",
        _configure_queue,
        _run_queue,
        aliases=("ls",),
        description="List jobs by id with their state, GPUs, placement or the reason they "
        "wait, run time and progress. Without -t or --all only active jobs (pending, running, "
        "preempted) are listed. NODE/REASON reads `gpu-01[0,1],gpu-02[3]`: each node with "
        "the GPU indices the job holds there; `+17` after a node's GPUs: they are shared with "
        "job 17 (both train there, each by gradient accumulation).",
        epilog="examples:\n"
        "  hctl queue --me\n"
        "  hctl queue -t pending,preempted -u alice\n"
        "  hctl queue --all --json | jq '.jobs[] | select(.state == \"failed\") | .id'\n"
        "  hctl queue --watch --interval 5",
    ),
    Command(
        "show",
        "Show a job: spec, state, placement, progress, ETA and history",
        _configure_show,
        _run_show,
        description="Show everything about one job, including why it waits or was preempted.",
        epilog="examples:\n  hctl show 42\n  hctl show 42 --json | jq .eta_s",
    ),
    Command(
        "cancel",
        "Cancel jobs",
        _configure_cancel,
        _run_cancel,
        description="Cancel jobs by id, or every active job of a user (asks first unless --yes).",
        epilog="examples:\n  hctl cancel 42 43\n  hctl cancel --me -t pending --yes",
    ),
    Command(
        "logs",
        "Print a job's output",
        _configure_logs,
        _run_logs,
        description="Print the output of a job's processes, relayed from its workers: "
        "standard output on stdout, standard error on stderr. Every attempt (each placement: "
        "after a preemption, migration, resize or retry the job runs again) is kept until "
        "the workers' log retention has passed, and printed in order under a header naming "
        "its nodes when there are several. The scheduler's own notices (preempted, "
        "migrated, time limit, cancelled, requeued) are `hadar:` lines on stderr. With -f, "
        "the job is followed, not one attempt: a pending job is waited for, output appears "
        "as it is written, each new attempt follows under its header, and hctl exits 0 "
        "once the job has ended. Exit code 9: the job has no output because it did not "
        "start (the reason is printed).",
        epilog="examples:\n  hctl logs 42 --tail 50\n  hctl logs 42 -f --label\n"
        "  hctl logs 42 --attempt 1 2>/dev/null",
    ),
    Command(
        "wait",
        "Wait for a job to end; the exit code tells how it ended",
        _configure_wait,
        _run_wait,
        description="Block until the job ends. Exit code: 0 completed, 100 failed, "
        "103 cancelled, 104 stopped at its time limit (TIMEOUT), 124 --timeout ran out.",
        epilog="examples:\n"
        "  hctl wait 42 --timeout 3600 && echo done\n"
        "  JOB=$(hctl submit -f job.toml --parsable) && hctl wait $JOB",
    ),
]
