"""``hctl``: the Hadar command line. Entry point :func:`main`; parser :func:`build_parser`.

Subcommands live in the modules of :data:`COMMAND_MODULES`, each defining ``COMMANDS`` (see
:mod:`clients.cli.command` for how to add one), and are listed in :mod:`clients.cli.catalog`.
A run imports the module of its own subcommand only (``hctl queue`` never imports the
simulator, ``hctl --version`` no command module at all), and what that module needs to
print or to call the master (rich, gRPC) loads when the command first does so.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import sys
import textwrap
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

from clients.cli import catalog

if TYPE_CHECKING:
    from clients.cli.command import CliError, Command, Context
    from clients.errors import HadarError

# What `hctl` exits with on a usage error (ExitCode.USAGE, whose module a run that stops at
# the parser need not load).
USAGE = 2

# Modules that define COMMANDS, in the order `hctl --help` lists them. Optional modules that
# are absent (e.g. a trimmed install) are skipped.
COMMAND_MODULES: tuple[str, ...] = (
    "clients.cli.jobs",
    "clients.cli.run",
    "clients.cli.control",
    "clients.cli.cluster",
    "clients.cli.accounting",
    "clients.cli.notify",
    "clients.cli.access",
    "clients.cli.simulate",
    "clients.cli.local",
    "clients.cli.completion",
)
OPTIONAL_MODULES = frozenset({"clients.cli.local"})
HELP_WIDTH = 100

DESCRIPTION = (
    "Hadar: schedule deep-learning training jobs on a lab's heterogeneous GPU servers.\n"
    "The master is found from --master, HADAR_MASTER, ~/.config/hadar/config.toml, or "
    "127.0.0.1:50051."
)
EPILOG = (
    "examples:\n"
    "  hctl submit --workload resnet --gpus 2 --iterations 5000\n"
    "  hctl queue --me\n"
    "  hctl show 42\n"
    "  hctl --master gpu-master:50051 status\n"
    "\n"
    "exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 permission denied, 5 master "
    "unavailable, 6 invalid argument, 7 conflict, 8 limit reached, 130 interrupted; "
    "`hctl wait`: 100 failed, 103 cancelled, 124 timed out"
)


class HctlArgumentParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr, naming the --help to read; exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} — see `{self.prog} --help`\n")
        raise SystemExit(USAGE)


def client_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("hadar")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class VersionAction(argparse._VersionAction):
    """``--version``, looking the version up only when asked (reading the installed
    package's metadata is a good part of what a command would otherwise wait for)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        self.version = f"hctl {client_version()}"
        super().__call__(parser, namespace, values, option_string)


def _present(name: str) -> bool:
    return name not in OPTIONAL_MODULES or importlib.util.find_spec(name) is not None


def load_commands() -> list[Command]:
    """Every subcommand, from its module."""
    commands: list[Command] = []
    for name in COMMAND_MODULES:
        if _present(name):
            commands.extend(importlib.import_module(name).COMMANDS)
    return commands


def _load_command(listing: catalog.Listing) -> Command:
    command: Command
    for command in importlib.import_module(listing.module).COMMANDS:
        if command.name == listing.name:
            return command
    raise LookupError(f"{listing.module} defines no command {listing.name!r}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wraps prose paragraphs of descriptions and epilogs, keeps indented lines (examples)
    exactly as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            if not line or line[0].isspace():
                lines.append(indent + line)
            else:
                lines.append(
                    textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent)
                )
        return "\n".join(lines)


def _formatter(width: int | None) -> type[argparse.HelpFormatter]:
    if width is None:
        return HelpFormatter
    # The generated reference must not depend on the terminal it is built in.
    return partial(HelpFormatter, width=width)  # type: ignore[return-value]


def _seconds(text: str) -> float:
    from protos.numbers import seconds_type

    return seconds_type()(text)


# argparse names the type in some messages.
_seconds.__name__ = "seconds"


def add_global_options(parser: argparse.ArgumentParser, *, suppress_defaults: bool) -> None:
    """--master, --token, --timeout; on subcommands too, so they may follow the command."""
    default = argparse.SUPPRESS if suppress_defaults else None
    group = parser.add_argument_group("connection")
    options = (
        (("--master",), {"metavar": "HOST:PORT", "help": "master address ($HADAR_MASTER)"}),
        (("--token",), {"help": "API token ($HADAR_TOKEN)"}),
        (
            ("--timeout",),
            {
                "dest": "rpc_timeout",
                "type": _seconds,
                "metavar": "S",
                "help": "seconds per call to the master ($HADAR_TIMEOUT, default 10)",
            },
        ),
    )
    for flags, kwargs in options:
        # A subcommand may use the flag itself (`wait --timeout`); its meaning wins there.
        with contextlib.suppress(argparse.ArgumentError):
            group.add_argument(*flags, default=default, **kwargs)


def build_parser(
    selected: str | None = None, *, width: int | None = None, all_commands: bool = True
) -> argparse.ArgumentParser:
    """The whole parser. With ``selected``, only that subcommand is loaded and gets its
    options; the others are listed from :mod:`clients.cli.catalog`, which keeps unrelated
    imports out. Without it, every subcommand is configured (the reference, shell
    completion) unless ``all_commands`` is false (a run without a command: `hctl --help`)."""
    formatter = _formatter(width)
    parser = HctlArgumentParser(
        prog="hctl", description=DESCRIPTION, epilog=EPILOG, formatter_class=formatter
    )
    parser.add_argument("--version", action=VersionAction)
    add_global_options(parser, suppress_defaults=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    if selected is None and all_commands:
        for command in load_commands():
            _add_command(subparsers, command, formatter)
        return parser
    for listing in catalog.COMMANDS:
        if not _present(listing.module):
            continue
        if selected in (listing.name, *listing.aliases):
            _add_command(subparsers, _load_command(listing), formatter)
            continue
        # Without `help`, argparse leaves a subcommand out of the list in --help.
        shown: dict[str, Any] = {"help": listing.help} if listing.listed else {}
        subparsers.add_parser(listing.name, aliases=list(listing.aliases), **shown)
    return parser


def _add_command(
    subparsers: argparse._SubParsersAction[Any],
    command: Command,
    formatter: type[argparse.HelpFormatter],
) -> None:
    listing: dict[str, Any] = {"help": command.help} if command.listed else {}
    sub = subparsers.add_parser(
        command.name,
        aliases=list(command.aliases),
        description=command.description or command.help,
        epilog=command.epilog or None,
        formatter_class=formatter,
        **listing,
    )
    sub.set_defaults(_command=command)
    command.configure(sub)
    if command.uses_master:
        _add_global_options_everywhere(sub)


def _add_global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    add_global_options(parser, suppress_defaults=True)
    for action in parser._actions:  # nested subcommands, e.g. `admin token create`
        if isinstance(action, argparse._SubParsersAction):
            # Aliases map to the same parser object: visit each once.
            for sub in {id(p): p for p in action.choices.values()}.values():
                _add_global_options_everywhere(sub)


_VALUE_OPTIONS = frozenset({"--master", "--token", "--timeout"})


def selected_command(argv: Sequence[str]) -> str | None:
    """The subcommand word in ``argv``, skipping global options and their values."""
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in _VALUE_OPTIONS:
            skip = True
            continue
        if word == "--":
            return None
        if word.startswith("-"):
            continue
        return word
    return None


def describe_failure(error: HadarError, ctx: Context) -> CliError:
    """The one line (and exit code) for a client error no command handled itself."""
    from clients.cli.command import CliError, ExitCode
    from clients.config import config_path
    from clients.errors import (
        Conflict,
        DeadlineExceeded,
        InvalidArgument,
        NotFound,
        PermissionDenied,
        ResourceExhausted,
        Unauthenticated,
        Unavailable,
    )

    address = ctx.master or _address_or_default(ctx)
    if isinstance(error, DeadlineExceeded):
        return CliError(
            f"the master at {address} did not answer in time ({error.details})",
            ExitCode.UNAVAILABLE,
            "retry, or allow longer with `--timeout 30`",
        )
    if isinstance(error, Unavailable):
        return CliError(
            f"cannot reach the master at {address} — is hadar-master running? "
            "try `hctl status --master HOST:PORT`",
            ExitCode.UNAVAILABLE,
        )
    if isinstance(error, Unauthenticated):
        return CliError(
            f"the master did not accept your credentials: {error.details}",
            ExitCode.PERMISSION_DENIED,
            f"set a token with --token, HADAR_TOKEN or `token` in {config_path()}",
        )
    if isinstance(error, PermissionDenied):
        return CliError(
            f"permission denied: {error.details}",
            ExitCode.PERMISSION_DENIED,
            "check your identity with `hctl whoami`",
        )
    if isinstance(error, InvalidArgument):
        details = error.details
        if error.field and details.startswith(f"{error.field}:"):
            details = details[len(error.field) + 1 :].strip()
        what = error.field or "the request"
        return CliError(
            f"the master rejected {what}: {details}",
            ExitCode.INVALID_ARGUMENT,
            f"see `hctl {ctx.command_name or 'COMMAND'} --help`",
        )
    if isinstance(error, ResourceExhausted):
        if error.retry_after_s is not None:
            hint = f"retry in {error.retry_after_s:g} s"
        elif "message larger than max" in error.details.lower():
            hint = "send less: fewer or shorter arguments and environment variables"
        else:
            hint = "see your waiting jobs with `hctl queue --me`; `hctl cancel JOB` frees a slot"
        return CliError(f"limit reached: {error.details}", ExitCode.RESOURCE_EXHAUSTED, hint)
    if isinstance(error, NotFound):
        return CliError(f"not found: {error.details}", ExitCode.NOT_FOUND)
    if isinstance(error, Conflict):
        # Loaded already: a Conflict comes from a call to the master.
        import grpc

        if error.code == grpc.StatusCode.ALREADY_EXISTS:
            # The master's message says what exists and what to do instead; retrying the
            # same request cannot pass.
            return CliError(f"conflict: {error.details}", ExitCode.CONFLICT)
        return CliError(
            f"conflict: {error.details}", ExitCode.CONFLICT, "look again and retry if still needed"
        )
    return CliError(f"the master failed the request: {error.details}", ExitCode.ERROR)


def _address_or_default(ctx: Context) -> str:
    from clients.config import ConfigError

    try:
        return ctx.config().address
    except ConfigError:
        return "the configured address"


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # Only the command being run is configured (its options may need heavy modules); with
    # none (`hctl --help`, `hctl --version`) none is.
    parser = build_parser(selected_command(args_list), all_commands=False)
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else USAGE
    from clients.cli.command import CliError, Context, ExitCode
    from clients.config import ConfigError, config_path
    from clients.errors import HadarError

    command: Command | None = getattr(args, "_command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    ctx = Context(
        master=args.master, token=args.token, timeout=args.rpc_timeout, command_name=command.name
    )
    try:
        return int(command.run(args, ctx))
    except CliError as exc:
        _report(ctx, exc)
        return exc.code
    except HadarError as exc:
        failure = describe_failure(exc, ctx)
        _report(ctx, failure)
        return failure.code
    except ConfigError as exc:
        _report(ctx, CliError(str(exc), ExitCode.USAGE, f"fix it, or see {config_path()}"))
        return ExitCode.USAGE
    except KeyboardInterrupt:
        ctx.note("interrupted")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # `hctl queue | head`: the reader left; not an error worth a traceback.
        return ExitCode.OK
    finally:
        ctx.close()


def _report(ctx: Context, error: CliError) -> None:
    ctx.note(error.line())


if __name__ == "__main__":
    raise SystemExit(main())
