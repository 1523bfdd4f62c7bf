"""`hadar-master`: run the daemon, manage the database schema and API tokens.

hadar-master [run] [--config FILE] [--listen ADDR] [--database URL] [--policy NAME]
                   [--round-seconds S] [--auth token|none] [--cluster-token T]
                   [--metrics-port P] [--log-format auto|json|console] [--log-level L]
hadar-master db upgrade|downgrade|current [--database URL] [--revision REV]
hadar-master token create --user NAME [--admin] [--description TEXT]
hadar-master token list [--user NAME]
hadar-master token revoke ID
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from master.settings import Settings, SettingsError, load
from store import Database
from store.errors import NotFoundError
from store.migrate import current, downgrade, head, upgrade
from store.reachability import DatabaseUnreachableError

# EX_TEMPFAIL: systemd's Restart=on-failure starts the master again, as a standby.
LEASE_LOST_EXIT = 75
# Collections of the middle generation between two full ones (the interpreter's default: 10).
FULL_COLLECTION_EVERY = 100


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML settings file (also $HADAR_CONFIG)")
    parser.add_argument("--database", help="SQLAlchemy URL or SQLite path (default ./hadar.db)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hadar-master", description="Hadar's master: scheduling daemon and admin tools."
    )
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run the master daemon (the default)")
    _run_arguments(run)

    db = sub.add_parser("db", help="database schema migrations")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    for name, text in (
        ("upgrade", "migrate to the newest schema (or --revision)"),
        ("downgrade", "migrate back to --revision (default: base, an empty database)"),
        ("current", "print the schema revision of the database"),
    ):
        cmd = db_sub.add_parser(name, help=text)
        _common(cmd)
        if name != "current":
            cmd.add_argument("--revision", help="target revision")

    token = sub.add_parser("token", help="API tokens (written straight to the database)")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="issue a token; prints it once")
    _common(create)
    create.add_argument("--user", required=True)
    create.add_argument("--admin", action="store_true", help="may drain nodes, manage tokens")
    create.add_argument("--description", default="")
    listing = token_sub.add_parser("list", help="list tokens (never their values)")
    _common(listing)
    listing.add_argument("--user", default="")
    revoke = token_sub.add_parser("revoke", help="revoke a token by its id")
    _common(revoke)
    revoke.add_argument("id")
    return parser


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--listen", help="host:port for the gRPC API (default 127.0.0.1:50051)")
    parser.add_argument("--policy", help="scheduling policy (default hadare)")
    parser.add_argument("--round-seconds", type=float, help="seconds between rounds (default 60)")
    parser.add_argument("--auth", choices=["token", "none"], help="'none' is for local use only")
    parser.add_argument("--cluster-token", help="token workers present (default: a file)")
    parser.add_argument("--heartbeat-timeout", type=float, dest="heartbeat_timeout_s")
    parser.add_argument("--max-retries", type=int)
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--throughput-profile", help="Gavel-format throughputs JSON")
    parser.add_argument("--metrics-port", type=int, help="Prometheus port; -1 disables")
    parser.add_argument("--log-format", choices=["auto", "json", "console"])
    parser.add_argument("--log-level")


RUN_FLAGS = (
    "listen",
    "database",
    "policy",
    "round_seconds",
    "auth",
    "cluster_token",
    "heartbeat_timeout_s",
    "max_retries",
    "checkpoint_dir",
    "throughput_profile",
    "metrics_port",
    "log_format",
    "log_level",
)


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {
        name: getattr(args, name) for name in RUN_FLAGS if getattr(args, name, None) is not None
    }
    return load(getattr(args, "config", None), overrides=overrides)


def _database_url(args: argparse.Namespace) -> str:
    return settings_from(args).database


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    known = {"run", "db", "token", "-h", "--help"}
    if not args_list or args_list[0] not in known:
        args_list.insert(0, "run")
    args = parser.parse_args(args_list)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "db":
            return _db(args)
        return _token(args)
    except SettingsError as exc:
        print(f"hadar-master: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import structlog

    from master.daemon import Master
    from master.process.cpus import keep_serving_on_one_cpu
    from master.process.observability import configure_logging

    settings = settings_from(args)
    master = Master(settings)  # refuses bad settings before anything else happens
    try:
        # Before the master starts a thread: each one inherits the CPU of its starter.
        split = keep_serving_on_one_cpu(settings.serving_cpu)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    configure_logging(settings.log_format, settings.log_level)
    if split is not None:
        structlog.get_logger().info(
            "serving threads kept to one CPU",
            cpu=split.serving,
            helper_cpus=sorted(split.helpers),
        )
    # What exists now (modules, the policies' tables, the store's metadata: about 150,000
    # objects) lives as long as the process. Moved out of the collector's reach, it is no
    # longer scanned by every full collection, which stops every thread, RPCs included:
    # at 200 workers and 100 submissions a second such pauses took 100-150 ms each, 17 in
    # 40 s, and about 20 ms after this. Objects freed by reference counting are freed as
    # before.
    gc.collect()
    gc.freeze()
    # A full collection scans every job the master remembers, and a growing queue keeps
    # asking for one; ten times fewer of them (34 -> 4 in a minute of that load, 1.3 s
    # -> 0.26 s of pauses) costs only cyclic garbage living longer.
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    try:
        if not master.serve_forever():
            print(
                f"hadar-master: lost the master lease ({master.deposed_reason}); exiting so "
                "that a restart stands by",
                file=sys.stderr,
            )
            return LEASE_LOST_EXIT
    except DatabaseUnreachableError as exc:
        print(
            f"hadar-master: {exc} (setting `database`: --database, HADAR_DATABASE or the "
            "config file)",
            file=sys.stderr,
        )
        return 1
    return 0


def _db(args: argparse.Namespace) -> int:
    url = _database_url(args)
    database = Database(url)
    try:
        if args.db_command == "upgrade":
            upgrade(database.url, args.revision or "head", engine=database.engine)
        elif args.db_command == "downgrade":
            downgrade(database.url, args.revision or "base", engine=database.engine)
        revision = current(database.url, engine=database.engine)
        latest = head()
        state = "up to date" if revision == latest else f"head is {latest}"
        print(f"{revision or 'empty (no schema)'} ({state})")
    finally:
        database.dispose()
    return 0


def _token(args: argparse.Namespace) -> int:
    database = Database(_database_url(args))
    try:
        upgrade(database.url, engine=database.engine)
        with database.transaction() as uow:
            if args.token_command == "create":
                issued = uow.tokens.create(
                    args.user, admin=args.admin, description=args.description
                )
                print(issued.plaintext)
                print(
                    f"id {issued.info.id} for {issued.info.user}"
                    + (" (admin)" if issued.info.admin else "")
                    + "; shown once, store it now",
                    file=sys.stderr,
                )
            elif args.token_command == "list":
                for token in uow.tokens.all(user=args.user):
                    flags = ",".join(
                        f for f, on in (("admin", token.admin), ("revoked", token.revoked)) if on
                    )
                    used = token.last_used_at.isoformat() if token.last_used_at else "never"
                    print(
                        f"{token.id}\t{token.user}\t{flags or '-'}\tcreated "
                        f"{token.created_at:%Y-%m-%d}\tlast used {used}\t{token.description}"
                    )
            else:
                try:
                    revoked = uow.tokens.revoke(args.id)
                except NotFoundError:
                    print(f"hadar-master: no token with id {args.id}", file=sys.stderr)
                    return 1
                print(f"revoked {revoked.id} ({revoked.user})")
    finally:
        database.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
