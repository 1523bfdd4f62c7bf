"""What `hctl` loads before it does anything: each run imports the module of its own command
only, and gRPC, protobuf, rich, SQLAlchemy, numpy and torch only when a command prints or
calls the master. Each check runs in a fresh interpreter, where sys.modules tells what a
process would have imported."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from clients.cli import catalog

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("grpc", "google.protobuf", "rich", "sqlalchemy", "numpy", "scipy", "torch")
# The simulator is the master's own code: `hctl simulate` loads numpy and scipy by design.
NEEDS_HEAVY_OPTIONS = frozenset({"simulate"})


def entry_point() -> tuple[str, str]:
    """The module and function of the `hctl` console script, as pyproject.toml declares it."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = scripts["hctl"].split(":")
    return module, function


def loaded_after(statements: str) -> list[str]:
    """The modules a fresh interpreter holds after `statements` (sorted)."""
    program = f"{statements}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def heavy_roots(modules: list[str]) -> set[str]:
    return {h for h in HEAVY for m in modules if m == h or m.startswith(h + ".")}


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []], ids=["version", "help", "bare"])
def test_version_and_help_load_no_command_module_nor_anything_heavy(argv: list[str]) -> None:
    module, function = entry_point()
    modules = loaded_after(
        "import contextlib, io\n"
        f"from {module} import {function}\n"
        "quiet = io.StringIO()\n"
        "with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):\n"
        f"    code = {function}({argv!r})\n"
        f"assert code == {2 if not argv else 0}, code"
    )
    assert heavy_roots(modules) == set()
    commands = {listing.module for listing in catalog.COMMANDS}
    assert [m for m in modules if m in commands] == []
    # Nor the client's model: dozens of dataclasses, each made at import.
    assert "clients.types" not in modules


@pytest.mark.parametrize(
    "name", [c.name for c in catalog.COMMANDS if c.name not in NEEDS_HEAVY_OPTIONS]
)
def test_a_commands_parser_loads_its_module_alone_and_nothing_heavy(name: str) -> None:
    module, _ = entry_point()
    modules = loaded_after(f"from {module} import build_parser\nbuild_parser({name!r})")
    assert heavy_roots(modules) == set()
    own = next(c.module for c in catalog.COMMANDS if c.name == name)
    others = {c.module for c in catalog.COMMANDS} - {own}
    # Command modules may share helpers (jobs' for states), never load the simulator or
    # the local cluster for another command.
    assert {"clients.cli.simulate", "clients.cli.local"} & others & set(modules) == set()


def test_queue_loads_neither_the_simulator_nor_the_local_cluster() -> None:
    modules = loaded_after("from clients.cli.main import build_parser\nbuild_parser('queue')")
    assert "clients.cli.jobs" in modules
    assert not [m for m in modules if m.startswith(("master", "clients.localcluster"))]
