"""Job control commands, as Slurm's scontrol: hold, release, requeue, update."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from clients.cli.arrays import display_id, is_array, job_ref, resolve
from clients.cli.command import CliError, Command, Context, ExitCode, split_list
from clients.cli.jobfile import parse_notify_on, parse_time_limit
from clients.cli.jobs import about_job, checked_text
from clients.types import Dependency
from protos.arrays import JobRef, parse_dependency
from protos.bounds import NUM_GPUS_MAX, PRIORITY_MAX, PRIORITY_MIN, PRIORITY_RANGE
from protos.numbers import float_type, int_type
from protos.warnsignal import parse_signal

if TYPE_CHECKING:
    from clients.client import HadarClient
    from clients.types import Job

# One job's action: the client, the job as looked up, and whether an array's id stands for
# all its elements; returns the job after the action.
Action = Callable[["HadarClient", "Job", bool], "Job"]


def _add_jobs(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "jobs",
        nargs="+",
        type=job_ref,
        metavar="JOB",
        help=f"job ids; an array's id {verb} all its elements, 12_3 one element",
    )
    parser.add_argument("--json", action="store_true", help="print the jobs after it as JSON")


def _each(
    args: argparse.Namespace,
    ctx: Context,
    verb: str,
    action: Action,
    said: Callable[[Job, Job, bool], str],
) -> int:
    """Runs `action` on every job named, as `hctl cancel` does: a refusal is reported and
    the others still go ahead; the exit code is the first refusal's."""
    from clients.errors import Conflict, InvalidArgument

    client = ctx.client()
    worst = ExitCode.OK
    done: list[Job] = []
    for target in dict.fromkeys(args.jobs):
        try:
            with about_job(target, verb):
                before = resolve(client, target)
                whole = target.array_index is None and is_array(before)
                try:
                    after = action(client, before, whole)
                except Conflict as exc:
                    raise CliError(
                        f"cannot {verb} job {_name(target, before)}: {exc.details}",
                        ExitCode.CONFLICT,
                    ) from None
                except InvalidArgument as exc:
                    raise CliError(
                        f"cannot {verb} job {_name(target, before)}: {exc.details}",
                        ExitCode.INVALID_ARGUMENT,
                        f"see `hctl {verb} --help`",
                    ) from None
        except CliError as exc:
            ctx.note(exc.line())
            worst = worst if worst != ExitCode.OK else exc.code
            continue
        done.append(after)
        if not args.json:
            what = f"array job {after.id}" if whole else f"job {display_id(after)}"
            ctx.say(f"{what} ({after.spec.name}): {said(before, after, whole)}")
    if args.json:
        ctx.json({"jobs": done})
    return worst


def _name(target: JobRef, job: Job) -> str:
    return display_id(job) if target.array_index is not None else str(target.job_id)


# -- hold -------------------------------------------------------------------------------------


def _configure_hold(parser: argparse.ArgumentParser) -> None:
    _add_jobs(parser, "holds")
    parser.add_argument("--reason", default="", help="recorded in the job's history")


def _run_hold(args: argparse.Namespace, ctx: Context) -> int:
    def said(before: Job, after: Job, whole: bool) -> str:
        if whole:
            return f"its waiting elements held — `hctl release {after.id}` lets them run"
        if before.held_by:
            return f"already held by {before.held_by}"
        return f"held — `hctl release {after.id}` lets it run"

    return _each(
        args,
        ctx,
        "hold",
        lambda client, job, whole: client.hold_job(job.id, args.reason, whole_array=whole),
        said,
    )


# -- release ----------------------------------------------------------------------------------


def _configure_release(parser: argparse.ArgumentParser) -> None:
    _add_jobs(parser, "releases")


def _run_release(args: argparse.Namespace, ctx: Context) -> int:
    def said(before: Job, after: Job, whole: bool) -> str:
        if whole:
            return "its held elements released"
        if not before.held_by and not after.held_by:
            return "not held"
        return "released: it waits for the next scheduling round"

    return _each(
        args,
        ctx,
        "release",
        lambda client, job, whole: client.release_job(job.id, whole_array=whole),
        said,
    )


# -- requeue ----------------------------------------------------------------------------------


def _configure_requeue(parser: argparse.ArgumentParser) -> None:
    _add_jobs(parser, "requeues")
    parser.add_argument(
        "--hold",
        action="store_true",
        help="hold it once requeued (scontrol requeuehold): it waits for `hctl release`",
    )
    parser.add_argument("--reason", default="", help="recorded in the job's history")


def _run_requeue(args: argparse.Namespace, ctx: Context) -> int:
    def said(before: Job, after: Job, whole: bool) -> str:
        if whole:
            return "its running and ended elements requeued (completed ones left as they are)"
        if before.state is after.state and after.state.value in ("pending", "preempted"):
            return "already waiting" + (" (held)" if after.held_by else "")
        running = before.state.value == "running"
        if after.reports_progress:
            how = (
                "stopping it with a checkpoint, then it resumes from there"
                if running
                else f"resumes from its checkpoint at iteration {after.checkpoint_iterations}"
            )
        else:
            how = ("stopping it, then it " if running else "") + "runs again from the start"
        held = f"; held until `hctl release {after.id}`" if after.held_by else ""
        return f"requeued ({how}){held}"

    return _each(
        args,
        ctx,
        "requeue",
        lambda client, job, whole: client.requeue_job(
            job.id, args.reason, hold=args.hold, whole_array=whole
        ),
        said,
    )


# -- update -----------------------------------------------------------------------------------


def _configure_update(parser: argparse.ArgumentParser) -> None:
    _add_jobs(parser, "updates")
    parser.add_argument("--name", help="new job name")
    parser.add_argument(
        "--time",
        type=checked_text(parse_time_limit),
        metavar="LIMIT",
        help="new time limit, as sbatch's --time (up to the cluster's max_time_limit)",
    )
    parser.add_argument(
        "--priority",
        type=float_type(PRIORITY_MIN, PRIORITY_MAX),
        metavar="W",
        help=f"new weight in fair policies, {PRIORITY_RANGE}",
    )
    parser.add_argument(
        "--gpus", type=int_type(1, NUM_GPUS_MAX), metavar="N", help="new GPU count (waiting jobs)"
    )
    parser.add_argument(
        "--gpu-type",
        action="append",
        metavar="TYPE",
        help="allowed GPU types, repeat or comma-separate; `any` for any (waiting jobs)",
    )
    parser.add_argument(
        "-d",
        "--dependency",
        type=checked_text(_parse_dependencies),
        metavar="LIST",
        help="new dependencies as sbatch writes them (afterok:1:2,afterany:3), replacing the "
        "job's; `none` for none (waiting jobs; only jobs submitted before it)",
    )
    preempt = parser.add_mutually_exclusive_group()
    preempt.add_argument(
        "--preemptible",
        dest="preemptible",
        action="store_const",
        const=True,
        help="a preemption may stop it (a command then runs again from the start; waiting jobs)",
    )
    preempt.add_argument(
        "--no-preemptible",
        dest="preemptible",
        action="store_const",
        const=False,
        help="no preemption stops it (waiting jobs)",
    )
    parser.add_argument(
        "--signal",
        type=checked_text(_parse_warning),
        metavar="SIG[@SECONDS]",
        help="as sbatch --signal: send SIG SECONDS (default 60) before a preemption or the "
        "time limit stops it; `none` for no warning (waiting jobs)",
    )
    parser.add_argument(
        "--notify",
        metavar="URL",
        help="webhook told when the job ends; `default` for your own (`hctl notify set`)",
    )
    parser.add_argument(
        "--notify-on",
        type=checked_text(parse_notify_on),
        metavar="WHEN",
        help="which ends notify: end, fail, all, states comma-separated, or none",
    )


def _parse_dependencies(text: str) -> list[tuple[str, int]]:
    """`none`, or sbatch's dependency list."""
    return [] if text.strip().lower() == "none" else parse_dependency(text)


def _parse_warning(text: str) -> tuple[int, int]:
    """`none` (signal 0), or sbatch's SIG[@SECONDS]."""
    return (0, 0) if text.strip().lower() == "none" else parse_signal(text)


def _run_update(args: argparse.Namespace, ctx: Context) -> int:
    types: list[str] | None = None
    if args.gpu_type:
        types = [t for t in split_list(args.gpu_type) if t != "any"]
    time_limit = parse_time_limit(args.time) if args.time else None
    dependencies = _parse_dependencies(args.dependency) if args.dependency else None
    warning = _parse_warning(args.signal) if args.signal else None
    notify_url = None
    if args.notify is not None:
        notify_url = "" if args.notify.strip().lower() == "default" else args.notify
    notify_on = parse_notify_on(args.notify_on) if args.notify_on else None
    given = (
        args.name,
        time_limit,
        args.priority,
        args.gpus,
        types,
        dependencies,
        args.preemptible,
        warning,
        notify_url,
        notify_on,
    )
    if all(v is None for v in given):
        raise CliError(
            "nothing to update",
            ExitCode.USAGE,
            "give --name, --time, --priority, --gpus, --gpu-type, --dependency, "
            "--preemptible/--no-preemptible, --signal, --notify or --notify-on",
        )

    def action(client: HadarClient, job: Job, whole: bool) -> Job:
        return client.update_job(
            job.id,
            name=args.name,
            time_limit_s=time_limit,
            priority=args.priority,
            num_gpus=args.gpus,
            allowed_gpu_types=types,
            dependencies=(
                None
                if dependencies is None
                else [Dependency(kind, dep_id) for kind, dep_id in dependencies]
            ),
            preemptible=args.preemptible,
            warning=warning,
            notify_url=notify_url,
            notify_on=notify_on,
            whole_array=whole,
        )

    def said(before: Job, after: Job, whole: bool) -> str:
        if whole:
            return "its unfinished elements updated"
        if before.version == after.version:
            return "unchanged (it had those values)"
        return "updated — `hctl show " + str(after.id) + "` shows its history"

    return _each(args, ctx, "update", action, said)


COMMANDS = [
    Command(
        "hold",
        "Hold waiting jobs back from scheduling (like scontrol hold)",
        _configure_hold,
        _run_hold,
        description="Keep waiting jobs queued but never scheduled until `hctl release`. "
        "A running job cannot be held: `hctl requeue --hold` stops it with a checkpoint and "
        "holds it. A hold an admin put on your job only an admin may release.",
        epilog="examples:\n  hctl hold 42 43\n  hctl hold 12   # all waiting elements of array 12",
    ),
    Command(
        "release",
        "Let held jobs be scheduled again (like scontrol release)",
        _configure_release,
        _run_release,
        description="Release jobs held by `hctl hold`, `hctl submit --hold` or "
        "`hctl requeue --hold`; a job nobody holds is left as it is.",
        epilog="examples:\n  hctl release 42\n  hctl release 12_3",
    ),
    Command(
        "requeue",
        "Run jobs again: a running job is stopped and requeued (like scontrol requeue)",
        _configure_requeue,
        _run_requeue,
        description="Put a running job, or one that ended failed, cancelled or timeout, "
        "back in the queue. A managed job (built-in workload, script using the runtime "
        "helper) resumes from its last checkpoint; a command runs again from the start, as "
        "Slurm reruns a batch script. The new run starts once the previous one has exited, "
        "and its time limit counts anew. A completed job cannot be requeued (exit 7).",
        epilog="examples:\n  hctl requeue 42            # a TIMEOUT job goes on from its "
        "checkpoint\n  hctl requeue --hold 42     # stop it with a checkpoint and hold it",
    ),
    Command(
        "update",
        "Change a job's time limit, priority, name, GPUs (like scontrol update)",
        _configure_update,
        _run_update,
        description="Change a job: its name, time limit, priority and notifications while "
        "it waits or runs; its GPU count, GPU types, dependencies, preemptibility and warning "
        "signal while it waits (the running job was started with them). Owners and admins "
        "alike stay within the cluster's limits: a time limit up to max_time_limit, a "
        f"priority from {PRIORITY_RANGE}, no more GPUs than the cluster or your quota has, "
        "webhooks the cluster allows.",
        epilog="examples:\n  hctl update 42 --time 4h\n  hctl update 42 --priority 0.5 "
        "--name lower\n  hctl update 43 --gpus 2 --gpu-type v100,a100\n"
        "  hctl update 44 --dependency afterok:40 --signal USR1@120\n"
        "  hctl update 45 --no-preemptible --notify-on fail",
    ),
]
