"""clients.cli.catalog, which `hctl --help` and every run read instead of importing each
command module, lists exactly the commands the modules define, in their order, with their
help lines; and `hctl --help` built from it reads as the reference parser's."""

from __future__ import annotations

import contextlib
import io

from clients.cli import catalog
from clients.cli.main import build_parser, load_commands


def test_the_catalog_lists_every_command_as_its_module_defines_it() -> None:
    expected = tuple(
        catalog.Listing(c.run.__module__, c.name, tuple(c.aliases), c.help, c.listed)
        for c in load_commands()
    )
    assert expected == catalog.COMMANDS, (
        "clients/cli/catalog.py is stale; write its COMMANDS as:\n"
        + "\n".join(f"    {listing!r}," for listing in expected)
    )


def test_help_from_the_catalog_reads_as_help_from_the_modules() -> None:
    def help_text(all_commands: bool) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            build_parser(width=100, all_commands=all_commands).print_help()
        return out.getvalue()

    assert help_text(all_commands=False) == help_text(all_commands=True)
    assert "  queue (ls)" in help_text(all_commands=False)
