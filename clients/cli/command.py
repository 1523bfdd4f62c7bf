"""What an ``hctl`` subcommand is, what it gets to run, and how it fails.

Adding a subcommand: write a module under ``clients/cli/`` that defines ``COMMANDS``, a
sequence of :class:`Command`, and list the module in ``clients.cli.main.COMMAND_MODULES``
(``clients.cli.local`` is already listed and picked up when it exists)::

    def _configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="only print the plan")

    def _run(args: argparse.Namespace, ctx: Context) -> int:
        ctx.out.print("done")
        return ExitCode.OK

    COMMANDS = [Command("frob", "Frobnicate the cluster", _configure, _run,
                        epilog="example:\\n  hctl frob --dry-run")]

``configure`` is called only when the command is the one being run (and when the docs or
the shell completion are generated), so it may import heavy modules lazily. A command that
needs the master calls ``ctx.client()``; the connection opens on first use.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from rich.console import Console

from clients.client import HadarClient
from clients.config import ClientConfig, resolve


class ExitCode(IntEnum):
    """Exit statuses a script can branch on (documented in docs/cli.md)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    NOT_FOUND = 3
    PERMISSION_DENIED = 4
    UNAVAILABLE = 5
    INVALID_ARGUMENT = 6
    CONFLICT = 7
    # hctl wait: the job's final state, or the wait timing out.
    JOB_FAILED = 100
    JOB_CANCELLED = 103
    TIMEOUT = 124
    INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as one line on stderr: what failed, and what to run next."""

    def __init__(self, message: str, code: ExitCode = ExitCode.ERROR, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint

    def line(self) -> str:
        return f"error: {self.message} — {self.hint}" if self.hint else f"error: {self.message}"


@dataclass(frozen=True)
class Command:
    """One ``hctl`` subcommand."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Context], int]
    aliases: tuple[str, ...] = ()
    # Longer text above the options; defaults to ``help``.
    description: str = ""
    # Shown below the options: examples, notes.
    epilog: str = ""
    # Whether it talks to the master (and so takes --master, --token, --timeout).
    uses_master: bool = True


@dataclass
class Context:
    """What a running command needs: global options, output consoles, the master client."""

    master: str | None = None
    token: str | None = None
    timeout: float | None = None
    # The subcommand being run, for hints such as "see `hctl submit --help`".
    command_name: str = ""
    out: Console = field(default_factory=lambda: make_console(sys.stdout))
    err: Console = field(default_factory=lambda: make_console(sys.stderr))
    _client: HadarClient | None = None
    _config: ClientConfig | None = None

    def config(self) -> ClientConfig:
        if self._config is None:
            self._config = resolve(self.master, self.token, self.timeout)
        return self._config

    def client(self) -> HadarClient:
        if self._client is None:
            self._client = HadarClient(config=self.config())
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def make_console(stream: object) -> Console:
    """A console that colours terminals only and never wraps table rows in pipes."""
    console = Console(file=stream, highlight=False, soft_wrap=False)  # type: ignore[arg-type]
    if not console.is_terminal:
        # Scripts read rows line by line; a wide fixed width keeps each row on one line.
        console = Console(
            file=stream,  # type: ignore[arg-type]
            highlight=False,
            width=200,
            no_color=True,
            color_system=None,
        )
    return console


def split_list(values: Sequence[str] | None) -> list[str]:
    """Repeatable options that also take comma lists: ``-t pending -t running,preempted``."""
    items: list[str] = []
    for value in values or ():
        items.extend(part.strip() for part in value.split(",") if part.strip())
    return items
