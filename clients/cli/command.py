"""What an ``hctl`` subcommand is, what it gets to run, and how it fails.

Adding a subcommand: write a module under ``clients/cli/`` that defines ``COMMANDS``, a
sequence of :class:`Command`, list the module in ``clients.cli.main.COMMAND_MODULES``
(``clients.cli.local`` is already listed and picked up when it exists) and the command in
``clients.cli.catalog`` (tests/unit/clients/test_catalog.py prints the line to add)::

    def _configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="only print the plan")

    def _run(args: argparse.Namespace, ctx: Context) -> int:
        ctx.out.print("done")
        return ExitCode.OK

    COMMANDS = [Command("frob", "Frobnicate the cluster", _configure, _run,
                        epilog="example:\\n  hctl frob --dry-run")]

The module is imported only when its command is the one being run (and when the docs or
the shell completion are generated), and ``configure`` called only then: every other run
of hctl pays for neither. At the module's top, import only what building its parser needs;
rich, the client and gRPC load inside the functions that print or call the master
(tests/unit/clients/test_startup.py checks). A command that needs the master calls
``ctx.client()``; the connection opens on first use.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import IO, TYPE_CHECKING

from clients.cli.printable import printable
from clients.config import ClientConfig, resolve

if TYPE_CHECKING:
    # Loaded when a command first prints or calls the master: `hctl --version` and
    # `hctl --help` need neither rich nor gRPC.
    from rich.console import Console, RenderableType

    from clients.client import HadarClient


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
    RESOURCE_EXHAUSTED = 8
    # hctl logs: the job has no output because it did not start.
    NOT_STARTED = 9
    # hctl wait: the job's final state, or the wait timing out.
    JOB_FAILED = 100
    JOB_CANCELLED = 103
    # The job reached its time limit (state TIMEOUT).
    JOB_TIMEOUT = 104
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
    # Whether docs/cli.md carries its full --help. Commands whose options belong to another
    # part of the system (the simulator's policies, say) are only named there, so that part
    # can change without making this reference stale.
    full_reference: bool = True
    # Whether `hctl --help`, docs/cli.md and shell completion show it. An unlisted command
    # still runs: it keeps an older spelling working for scripts (`hctl token`).
    listed: bool = True


@dataclass
class Context:
    """What a running command needs: global options, output consoles, the master client."""

    master: str | None = None
    token: str | None = None
    timeout: float | None = None
    # The subcommand being run, for hints such as "see `hctl submit --help`".
    command_name: str = ""
    _out: Console | None = None
    _err: Console | None = None
    _client: HadarClient | None = None
    _config: ClientConfig | None = None

    @property
    def out(self) -> Console:
        """The console on stdout, made on first use (on the stdout of that moment)."""
        if self._out is None:
            self._out = make_console(sys.stdout)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            self._err = make_console(sys.stderr)
        return self._err

    def config(self) -> ClientConfig:
        if self._config is None:
            self._config = resolve(self.master, self.token, self.timeout)
        return self._config

    def client(self) -> HadarClient:
        if self._client is None:
            from clients.client import HadarClient

            self._client = HadarClient(config=self.config())
        return self._client

    def say(self, text: str) -> None:
        """One plain line on stdout, as written (job names may hold brackets or colons)
        but escaped, never wrapped. Written without rich: a command that only says a line
        (`hctl submit`) never loads it."""
        _write(self._out.file if self._out is not None else sys.stdout, text + "\n")

    def note(self, text: str, *, end: str = "\n") -> None:
        """One plain line on stderr, for people: progress notes, hints, prompts."""
        _write(self._err.file if self._err is not None else sys.stderr, text + end)

    def json(self, document: Mapping[str, object]) -> None:
        """A --json document (see clients.cli.shapes): coloured on a terminal, exact in pipes."""
        from clients.cli import shapes

        text = shapes.dumps(document)
        if self.out.is_terminal:
            self.out.print_json(text)
        else:
            self.out.file.write(text + "\n")
            self.out.file.flush()

    def show(self, renderable: RenderableType) -> None:
        """Prints tables and panels; in pipes without the cell padding at line ends, so
        scripts can split rows on whitespace and compare lines exactly."""
        if self.out.is_terminal:
            self.out.print(renderable)
            return
        from clients.cli.grid import Grid

        if isinstance(renderable, Grid):
            # Long listings: written as rich would lay them out, without its per-cell cost.
            lines = renderable.plain_lines(self.out.width)
            if lines is not None:
                self.out.file.write("".join(line + "\n" for line in lines))
                self.out.file.flush()
                return
        with self.out.capture() as captured:
            self.out.print(renderable)
        text = "\n".join(line.rstrip() for line in captured.get().splitlines())
        self.out.file.write(text + "\n")
        self.out.file.flush()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _write(stream: IO[str], text: str) -> None:
    stream.write(printable(text))
    stream.flush()


def make_console(stream: object) -> Console:
    """A console that colours terminals only and never wraps table rows in pipes."""
    from clients.cli.console import PrintableConsole

    console = PrintableConsole(file=stream, highlight=False, soft_wrap=False)  # type: ignore[arg-type]
    if not console.is_terminal:
        # Scripts read rows line by line; a wide fixed width keeps each row on one line.
        console = PrintableConsole(
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
