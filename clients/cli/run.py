"""``hctl run``: a job in the foreground, as ``srun`` runs one. It submits the job, waits for
its GPUs, prints its output as it is written (stdout to stdout, stderr to stderr) and exits
with the job's own exit code; Ctrl-C cancels the job. With ``--pty`` the job is an
interactive session on a terminal instead (see clients.cli.session)."""

from __future__ import annotations

import argparse

from clients.cli.command import CliError, Command, Context, ExitCode

# The exit status of a program killed by SIGINT, as shells report it.
INTERRUPTED = 130


def _configure(parser: argparse.ArgumentParser) -> None:
    from clients.cli.jobs import add_spec_arguments

    parser.add_argument(
        "--pty",
        action="store_true",
        help="run COMMAND interactively on a terminal on the node, as `srun --pty`: your "
        "terminal becomes its terminal (keys, Ctrl-C and window size go there) until it exits",
    )
    add_spec_arguments(parser)


def exit_status(exit_code: int | None, fallback: int) -> int:
    """The status hctl run exits with: the job's own exit code when it has one (as a shell
    gives it, 0 to 255), else `fallback`, what `hctl wait` gives for how the job ended."""
    if exit_code is None:
        return fallback
    if exit_code < 0:
        # Killed by a signal (-N, as the worker reports it): 128 + N, as a shell does.
        return min(255, 128 - exit_code)
    return min(255, exit_code)


def _run(args: argparse.Namespace, ctx: Context) -> int:
    from clients.cli.jobs import WAIT_EXIT_CODES, LogPrinter, spec_from_arguments, wait_for_job
    from clients.types import JobState, LogStream

    spec, _ = spec_from_arguments(args)
    if spec.array:
        raise CliError(
            "hctl run runs one job in the foreground; an array is many",
            ExitCode.USAGE,
            "submit it with `hctl submit --array ...` and follow it with `hctl queue`",
        )
    if args.pty:
        from clients.cli.session import run_session

        return run_session(ctx, spec)
    client = ctx.client()
    job = client.submit_job(spec)
    ctx.note(f"job {job.id} ({job.spec.name}) submitted; waiting for GPUs (Ctrl-C cancels it)")
    printer = LogPrinter(job.id, False, headers=True, follow=True, header_stream=LogStream.STDERR)
    try:
        for chunk in client.stream_logs(job.id, follow=True):
            printer.chunk(chunk)
        printer.flush()
        ended = wait_for_job(ctx, job.id, None)
    except KeyboardInterrupt:
        printer.flush()
        client.cancel_job(job.id, reason="its hctl run was interrupted (Ctrl-C)")
        ctx.note(f"job {job.id} cancelled")
        return INTERRUPTED
    assert ended is not None  # no deadline
    fallback = WAIT_EXIT_CODES.get(ended.state, ExitCode.ERROR)
    if ended.state is not JobState.COMPLETED or ended.exit_code not in (None, 0):
        reason = f": {ended.reason}" if ended.reason else ""
        ctx.note(f"job {job.id} {ended.state.value}{reason}")
    return exit_status(ended.exit_code, fallback)


COMMANDS = [
    Command(
        "run",
        "Run a job in the foreground: its output here, its exit code yours (like srun)",
        _configure,
        _run,
        description="Submit a job as `hctl submit` does (the same flags; no arrays, no hold), "
        "wait for its GPUs, print its output as it is written (standard output here, "
        "standard error on stderr, a note on stderr when it moves to another attempt), "
        "and exit with its exit code once it ends. Ctrl-C cancels the job. A job that ends "
        "without an exit code of its own (cancelled, timed out, lost) exits as `hctl wait` "
        "does. With --pty the command runs on a terminal on the node instead, as `srun "
        "--pty` runs one: hctl waits for its GPUs (Ctrl-C cancels it while it waits), puts "
        "this terminal in raw mode and relays it both ways (every key, Ctrl-C included, and "
        "the window size) until the command exits, and exits with its exit status. Only you "
        "can attach to it; it is never preempted; its time counts against --time and in "
        "accounting; nothing it shows is kept in the job's log. If hctl goes away, the "
        "session is hung up (SIGHUP) and the job ends; `hctl cancel` ends it too.",
        epilog="examples:\n"
        "  hctl run --pty --gpus 1 -- bash\n"
        "  hctl run --gpus 1 -- python train.py --epochs 1\n"
        "  hctl run --gpus 2 --gpu-type a100 --time 30m -- ./eval.sh && echo passed",
    ),
]
