"""The generated reference part of docs/cli.md: every command's --help, exit codes, --json shapes.

python -m clients.cli.docs                      # print the reference
python -m clients.cli.docs --write docs/cli.md  # replace it between the markers
python -m clients.cli.docs --check docs/cli.md  # exit 1 when the file is stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from clients.cli import shapes
from clients.cli.command import Command, ExitCode
from clients.cli.main import HELP_WIDTH, build_parser

BEGIN = "<!-- BEGIN GENERATED REFERENCE: python -m clients.cli.docs --write docs/cli.md -->"
END = "<!-- END GENERATED REFERENCE -->"

EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success (`wait`: the job completed)",
    ExitCode.ERROR: "any other failure",
    ExitCode.USAGE: "bad command line, job file or config file (a number out of its range "
    "included; see Numbers and their ranges)",
    ExitCode.NOT_FOUND: "no such job, node or token",
    ExitCode.PERMISSION_DENIED: "not allowed, or the token was refused",
    ExitCode.UNAVAILABLE: "the master cannot be reached or did not answer in time",
    ExitCode.INVALID_ARGUMENT: (
        "the master rejected a value (the message names the field), e.g. more GPUs than the "
        "cluster has"
    ),
    ExitCode.CONFLICT: "the request clashes with the current state; look again and retry",
    ExitCode.RESOURCE_EXHAUSTED: (
        "a limit refused the request: too many of your jobs waiting, submitting too fast, "
        "or a request message over the size cap"
    ),
    ExitCode.NOT_STARTED: "`logs`: the job has no output because it did not start",
    ExitCode.JOB_FAILED: "`wait`: the job failed",
    ExitCode.JOB_CANCELLED: "`wait`: the job was cancelled",
    ExitCode.JOB_TIMEOUT: "`wait`: the job reached its time limit (TIMEOUT)",
    ExitCode.TIMEOUT: "`wait`: the job had not ended when --timeout ran out",
    ExitCode.INTERRUPTED: "interrupted by Ctrl-C",
}


def _subparsers(parser: argparse.ArgumentParser) -> Iterable[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for sub in action.choices.values():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield sub.prog, sub


def _help_sections(parser: argparse.ArgumentParser) -> Iterable[tuple[str, str]]:
    command = parser.get_default("_command")
    if isinstance(command, Command) and not command.listed:
        return
    if isinstance(command, Command) and not command.full_reference:
        yield (
            parser.prog,
            f"{command.help}. Its options belong to another part of Hadar and "
            f"change with it: see `{parser.prog} --help`.",
        )
        return
    yield parser.prog, f"```text\n{parser.format_help().rstrip()}\n```"
    for _, sub in _subparsers(parser):
        yield from _help_sections(sub)


def reference() -> str:
    parser = build_parser(width=HELP_WIDTH)
    lines = [BEGIN, "", "## Reference (generated from the parser)", ""]
    lines += ["### Exit codes", "", "| code | meaning |", "|---|---|"]
    lines += [f"| {int(code)} | {meaning} |" for code, meaning in EXIT_CODE_MEANINGS.items()]
    lines += ["", "### Commands", ""]
    for prog, text in _help_sections(parser):
        lines += [f"#### `{prog}`", "", text, ""]
    lines += ["### JSON output", ""]
    lines += [
        "Each read command's `--json` prints one object. Enums are lowercase strings, times "
        "RFC 3339 in UTC (`2026-01-31T12:00:00Z`) or `null`; keys are never removed within "
        "`hadar.v1`, new keys may be added.",
        "",
        "| command | prints |",
        "|---|---|",
    ]
    top = list(shapes.OUTPUTS.values())
    for command, shape in shapes.OUTPUTS.items():
        lines.append(f"| `hctl {command} --json` | `{shape.name}` |")
    lines.append("")
    for obj in shapes.named_objects(list(top)):
        lines += [f"#### `{obj.name}`", "", "```text", "{"]
        lines += [f"  {key}: {shapes.describe(inner)}" for key, inner in obj.fields]
        lines += ["}", "```", ""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def splice(document: str, generated: str) -> str:
    """``document`` with the text between the markers replaced by ``generated``."""
    start = document.find(BEGIN)
    end = document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"markers not found: the file needs a line {BEGIN!r} and a line {END!r}")
    return document[:start] + generated + document[end + len(END) + 1 :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clients.cli.docs", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", type=Path, metavar="FILE", help="update FILE in place")
    mode.add_argument("--check", type=Path, metavar="FILE", help="exit 1 if FILE is stale")
    args = parser.parse_args(argv)
    generated = reference()
    if args.write is None and args.check is None:
        sys.stdout.write(generated)
        return 0
    path: Path = args.write or args.check
    current = path.read_text(encoding="utf-8")
    updated = splice(current, generated)
    if args.check is not None:
        if updated != current:
            sys.stderr.write(f"{path} is stale: run `python -m clients.cli.docs --write {path}`\n")
            return 1
        return 0
    path.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
