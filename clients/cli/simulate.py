"""``hctl simulate``: the trace-driven simulator, provided by ``master.sim.command``.

The simulator belongs to the master's side (it needs numpy and scipy), so it is imported only
when ``hctl simulate`` is the command being run, and a client-only install says what to add.
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType

from clients.cli.command import CliError, Command, Context, ExitCode

SIMULATOR_MODULE = "master.sim.command"


def _simulator() -> ModuleType | None:
    try:
        return importlib.import_module(SIMULATOR_MODULE)
    except ModuleNotFoundError as exc:
        # Only a missing simulator (or a missing dependency of it) means "not installed";
        # any other import failure is a bug that must surface.
        if exc.name is not None and (
            SIMULATOR_MODULE.startswith(exc.name) or exc.name.split(".")[0] != "master"
        ):
            return None
        raise


def _configure(parser: argparse.ArgumentParser) -> None:
    module = _simulator()
    if module is not None:
        module.add_arguments(parser)
    else:
        parser.set_defaults(_simulator_missing=True)


def _run(args: argparse.Namespace, ctx: Context) -> int:
    if getattr(args, "_simulator_missing", False):
        raise CliError(
            "the simulator is not installed here",
            ExitCode.ERROR,
            "install the master extra: pip install 'hadar[master]'",
        )
    module = _simulator()
    if module is None:
        raise CliError("the simulator is not installed here", ExitCode.ERROR)
    return int(module.run(args))


COMMANDS = [
    Command(
        "simulate",
        "Replay a job trace on a simulated cluster under a policy",
        _configure,
        _run,
        description="Run the trace-driven simulator: the master's own scheduling policies on "
        "a simulated cluster and clock, to compare policies on a lab's own history.",
        epilog="example:\n"
        "  hctl simulate --trace lab.trace --cluster v100:4,k80:8 --policy fifo,gavel,hadar",
        uses_master=False,
        full_reference=False,
    ),
]
