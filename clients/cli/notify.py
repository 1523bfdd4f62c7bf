"""Webhook notifications: hctl notify set/show/clear (your default webhook for jobs' ends)."""

from __future__ import annotations

import argparse

from clients.cli import format as fmt
from clients.cli.command import CliError, Command, Context, ExitCode
from clients.cli.jobfile import SpecError, parse_notify_on
from clients.cli.jobs import now_utc
from clients.types import NotifyDefault

NOTIFY_HELP = "Your default webhook, POSTed when any of your jobs ends (like --mail-user)"
NOTIFY_EXAMPLES = (
    "examples:\n"
    "  hctl notify set https://hooks.slack.com/services/T000/B000/XXXX\n"
    "  hctl notify set https://ntfy.example.org/alice-jobs --on fail\n"
    "  hctl notify show --json\n"
    "  hctl notify clear\n"
    "  hctl notify set --user bob https://ntfy.example.org/bob   # admins, for another user"
)


def _configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="notify_action", metavar="ACTION", required=True)
    set_parser = actions.add_parser(
        "set",
        help="set your default webhook",
        description="Set the webhook the master POSTs a JSON summary to when one of your "
        "jobs ends, for every job that names none (`hctl submit --notify` overrides it).",
        epilog="examples:\n"
        "  hctl notify set https://hooks.slack.com/services/T000/B000/XXXX\n"
        "  hctl notify set https://ntfy.example.org/alice-jobs --on failed,timeout",
        formatter_class=parser.formatter_class,
    )
    set_parser.add_argument("url", metavar="URL", help="http or https URL")
    set_parser.add_argument(
        "--on",
        metavar="WHEN",
        help="which ends notify: end (completed, failed, timeout; the default), fail (failed, "
        "timeout), all (also cancelled), or states, comma-separated",
    )
    for name in ("show", "clear"):
        sub = actions.add_parser(
            name,
            help="show your default webhook" if name == "show" else "remove your default webhook",
            description="Show your default webhook and the ends it is told of."
            if name == "show"
            else "Remove your default webhook; jobs naming their own keep theirs.",
            epilog=f"examples:\n  hctl notify {name}\n  hctl notify {name} --user bob   # admins"
            + ("\n  hctl notify show --json" if name == "show" else ""),
            formatter_class=parser.formatter_class,
        )
        sub.add_argument("-u", "--user", help="another user's (admins only)")
        if name == "show":
            sub.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")
    set_parser.add_argument("-u", "--user", help="set it for another user (admins only)")


def _run(args: argparse.Namespace, ctx: Context) -> int:
    from rich.table import Table

    client = ctx.client()
    if args.notify_action == "set":
        try:
            on = parse_notify_on(args.on, "--on") if args.on else []
        except SpecError as exc:
            raise CliError(str(exc), ExitCode.USAGE) from None
        if args.on and not on:
            raise CliError(
                "--on: none would notify nothing; remove the webhook with `hctl notify clear`",
                ExitCode.USAGE,
            )
        default = client.set_notify_default(args.url, on=on, user=args.user)
        ctx.say(f"webhook of {default.user} set: {_states(default)} go to {default.url}")
        return ExitCode.OK
    if args.notify_action == "clear":
        default = client.clear_notify_default(user=args.user)
        ctx.say(f"no default webhook for {default.user} any more")
        return ExitCode.OK
    default = client.notify_default(user=args.user)
    if args.json:
        ctx.json({"notify": default})
        return ExitCode.OK
    if not default.configured:
        ctx.note(f"{default.user} has no default webhook; set one with `hctl notify set URL`")
        return ExitCode.OK
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("user", default.user)
    table.add_row("url", default.url)
    table.add_row("on", _states(default))
    table.add_row("updated", fmt.format_time(default.updated_at, now_utc()))
    ctx.show(table)
    return ExitCode.OK


def _states(default: NotifyDefault) -> str:
    return ", ".join(s.value.lower() for s in default.on)


COMMANDS = [
    Command(
        "notify",
        NOTIFY_HELP,
        _configure,
        _run,
        description=f"{NOTIFY_HELP}. The master POSTs JSON (job id, name, user, state, "
        "reason, exit code, times, GPU-hours and a `text` line chat services show) and "
        "retries a failing endpoint with backoff; `hctl show JOB` says how delivery went.",
        epilog=NOTIFY_EXAMPLES,
    ),
]
