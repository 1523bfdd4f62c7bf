"""hctl never prints a character a terminal would act on from text others wrote: escape
sequences and direction marks in job names, reasons and node names come out as \\uXXXX,
in tables, plain lines and --json alike, with or without colours."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from rich.text import Text

from clients.cli.command import Context, make_console
from clients.cli.console import PrintableConsole
from clients.cli.jobs import LogPrinter, queue_table
from clients.cli.printable import printable
from clients.cli.shapes import dumps
from clients.types import Job, JobState, LogChunk, LogStream
from tests.unit.clients.test_format import make_job

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
HOSTILE_NAME = "evil\x1b]0;pwned\x07\u202egnp.exe"
HOSTILE_REASON = "waiting\x1b[2J\x1b[1;1H\x9b31m fake line"
UNSAFE = ("\x1b", "\x07", "\u202e", "\x9b")


def render(console_factory, renderable) -> str:
    stream = io.StringIO()
    console = console_factory(stream)
    console.print(renderable)
    return stream.getvalue()


def hostile_job() -> Job:
    job = make_job(state=JobState.PENDING)
    return replace(job, spec=replace(job.spec, name=HOSTILE_NAME), reason=HOSTILE_REASON)


def terminal(stream: io.StringIO) -> PrintableConsole:
    return PrintableConsole(file=stream, force_terminal=True, color_system="standard", width=200)


@pytest.mark.parametrize("factory", [make_console, terminal], ids=["pipe", "terminal"])
def test_a_queue_with_hostile_names_and_reasons_prints_them_escaped(factory) -> None:
    out = render(factory, queue_table([hostile_job()], NOW))
    # A terminal console adds rich's own colour codes (ESC [ ... m); nothing else escapes.
    text = re.sub("\x1b\\[[0-9;]*m", "", out)
    assert "\\u001b]0;pwned\\u0007\\u202egnp.exe" in text
    assert "\\u009b31m fake line" in text
    assert all(ch not in text for ch in UNSAFE)


def test_text_built_outside_strings_is_escaped_too() -> None:
    out = render(make_console, Text.assemble(("Job 7", "bold"), f"  {HOSTILE_NAME}"))
    assert all(ch not in out for ch in UNSAFE)
    assert "\\u202e" in out


def test_json_output_stays_valid_and_carries_the_text_escaped() -> None:
    out = render(make_console, dumps({"job": hostile_job()}))
    assert all(ch not in out for ch in UNSAFE)
    assert json.loads(out)["job"]["spec"]["name"] == HOSTILE_NAME


def test_log_headers_escape_what_others_wrote_but_not_the_jobs_own_bytes(capfdbinary) -> None:
    printer = LogPrinter(7, label=True, headers=True)
    for data in (b"", b"own \x1b[32mcolour\x1b[0m\n"):
        printer.chunk(
            LogChunk(
                job_id=7,
                task_index=0,
                offset=0,
                node="n1\x1b[2J",
                rank=0,
                stream=LogStream.STDOUT,
                data=data,
                attempt=2,
                attempts=2,
                lease=3,
            )
        )
    printer.flush()
    out = capfdbinary.readouterr().out
    assert out.endswith(b"[n1\\u001b[2J rank 0] own \x1b[32mcolour\x1b[0m\n")


def test_printable_keeps_ordinary_text_and_newlines() -> None:
    assert printable("Zoë's 日本語 run\n\ttwo") == "Zoë's 日本語 run\n\ttwo"


def test_plain_lines_print_names_as_written_but_escaped(capsys) -> None:
    """hctl's one-line messages (`submitted job 7 (NAME)`) keep brackets and colons in a
    name as they are (no markup, no emoji codes) and escape what a terminal acts on, on
    stdout and stderr alike."""
    ctx = Context()
    ctx.say(f"submitted job 7 (run[lr=0.1] :fire: {HOSTILE_NAME})")
    ctx.note("waiting\x1b[2J", end="")
    out, err = capsys.readouterr()
    assert out == "submitted job 7 (run[lr=0.1] :fire: evil\\u001b]0;pwned\\u0007\\u202egnp.exe)\n"
    assert err == "waiting\\u001b[2J"
