"""Identity and API tokens: whoami, admin token create/list/revoke (``token`` for short)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from clients.cli import format as fmt
from clients.cli.command import CliError, Command, Context, ExitCode
from clients.cli.jobs import now_utc
from clients.errors import NotFound, PermissionDenied


@contextmanager
def admin_only(action: str) -> Iterator[None]:
    try:
        yield
    except PermissionDenied as exc:
        raise CliError(
            f"cannot {action}: {exc.details}",
            ExitCode.PERMISSION_DENIED,
            "token management needs an admin token; check yours with `hctl whoami`",
        ) from None


# -- whoami -----------------------------------------------------------------------------------


def _configure_whoami(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")


def _run_whoami(args: argparse.Namespace, ctx: Context) -> int:
    identity = ctx.client().whoami()
    config = ctx.config()
    if args.json:
        document = {
            "user": identity.user,
            "admin": identity.admin,
            "master": config.address,
            "token_source": config.token_source,
        }
        ctx.json(document)
        return ExitCode.OK
    role = "admin" if identity.admin else "user"
    token = "no token" if config.token is None else f"token from {config.token_source}"
    ctx.say(f"{identity.user} ({role}) at {config.address}, {token}")
    return ExitCode.OK


# -- admin token ------------------------------------------------------------------------------

TOKEN_HELP = "API tokens: create, list and revoke your own; admins manage everyone's"
TOKEN_EXAMPLES = (
    "examples:\n"
    "  hctl admin token create alice --description laptop\n"
    "  hctl admin token list --user alice\n"
    "  hctl admin token revoke 3f2a9c1e"
)


def _configure_admin(parser: argparse.ArgumentParser) -> None:
    areas = parser.add_subparsers(dest="admin_area", metavar="AREA", required=True)
    token = areas.add_parser(
        "token",
        help=TOKEN_HELP,
        description=f"{TOKEN_HELP}. `hctl token ...` is the same command, for short.",
        epilog=TOKEN_EXAMPLES,
        formatter_class=parser.formatter_class,
    )
    _configure_token(token)


def _run_admin(args: argparse.Namespace, ctx: Context) -> int:
    return _run_token(args, ctx)


def _configure_token(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="token_action", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="create a token for a user; the plaintext is printed once",
        description="Create an API token. The plaintext token is printed once on stdout; "
        "only its hash is stored.",
        epilog='example:\n  hctl admin token create alice --description "alice laptop"',
        formatter_class=parser.formatter_class,
    )
    create.add_argument("user", metavar="USER", help="the token's user")
    create.add_argument("--admin", action="store_true", help="may manage nodes and tokens")
    create.add_argument("--description", default="", help="what the token is for")
    create.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")
    listing = actions.add_parser(
        "list",
        help="list tokens (never their plaintext)",
        description="List API tokens: id, user, role, creation and last use, whether revoked. "
        "Users see their own tokens, admins everyone's.",
        epilog="examples:\n  hctl admin token list\n  hctl admin token list --user alice --json",
        formatter_class=parser.formatter_class,
    )
    listing.add_argument("-u", "--user", help="only this user's tokens")
    listing.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")
    revoke = actions.add_parser(
        "revoke",
        help="revoke a token by its id",
        description="Revoke a token: the master refuses it from now on.",
        epilog="example:\n  hctl admin token revoke 3f2a9c1e",
        formatter_class=parser.formatter_class,
    )
    revoke.add_argument("id", metavar="ID", help="token id from `hctl admin token list`")


def _run_token(args: argparse.Namespace, ctx: Context) -> int:
    from rich.table import Table

    client = ctx.client()
    if args.token_action == "create":
        with admin_only(f"create a token for {args.user}"):
            created = client.create_token(args.user, admin=args.admin, description=args.description)
        if args.json:
            ctx.json({"token": created.token, "info": created.info})
            return ExitCode.OK
        ctx.say(created.token)
        ctx.note(
            f"token {created.info.id} for {created.info.user}"
            f"{' (admin)' if created.info.admin else ''} — shown once, store it now "
            '(e.g. `token = "..."` in ~/.config/hadar/config.toml)'
        )
        return ExitCode.OK
    if args.token_action == "list":
        with admin_only("list those tokens"):
            tokens = client.list_tokens(user=args.user)
        if args.json:
            ctx.json({"tokens": tokens})
            return ExitCode.OK
        now = now_utc()
        table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
        for column in ("ID", "USER", "ADMIN", "CREATED", "LAST USED", "STATE", "DESCRIPTION"):
            table.add_column(column)
        for t in tokens:
            table.add_row(
                t.id,
                t.user,
                "yes" if t.admin else "no",
                fmt.format_time(t.created_at, now),
                fmt.format_age(t.last_used_at, now),
                "revoked" if t.revoked else "active",
                t.description,
            )
        ctx.show(table)
        return ExitCode.OK
    try:
        with admin_only(f"revoke token {args.id}"):
            info = client.revoke_token(args.id)
    except NotFound:
        raise CliError(
            f"token {args.id} not found",
            ExitCode.NOT_FOUND,
            "list tokens with `hctl admin token list`",
        ) from None
    ctx.say(f"revoked token {info.id} of {info.user}")
    return ExitCode.OK


COMMANDS = [
    Command(
        "whoami",
        "Show who the master takes you for",
        _configure_whoami,
        _run_whoami,
        epilog="examples:\n  hctl whoami\n  hctl whoami --json",
    ),
    Command(
        "admin",
        "Admin: API tokens (create, list, revoke; your own, or everyone's for admins)",
        _configure_admin,
        _run_admin,
        epilog=TOKEN_EXAMPLES,
    ),
    # The short form, kept for scripts written against it; not listed in --help or the docs.
    Command(
        "token",
        TOKEN_HELP,
        _configure_token,
        _run_token,
        description=f"{TOKEN_HELP}. The short form of `hctl admin token`.",
        epilog=TOKEN_EXAMPLES,
        listed=False,
    ),
]
