"""``python -m worker.workloads NAME``: train a built-in workload under the runtime helper.

This is what the worker agent launches for workload jobs, with the contract's environment
(see :mod:`worker.runtime.contract`). ``--list`` prints the registry.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from worker.runtime import contract
from worker.runtime.checkpoint import CheckpointError
from worker.runtime.settings import ContractError, record_contract_error
from worker.workloads.registry import WORKLOADS, UnknownWorkloadError
from worker.workloads.runner import train_managed

EXIT_BAD_INPUT = 2


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.workloads", description=__doc__)
    parser.add_argument("name", nargs="?", help="workload name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the built-in workloads")
    parser.add_argument(
        "--iterations",
        type=int,
        default=100,
        help="total iterations when HADAR_ITERATIONS is not set (default 100)",
    )
    args = parser.parse_args(argv)
    if args.list or not args.name:
        for workload in WORKLOADS.values():
            print(
                f"{workload.name:16} batch {workload.default_batch_size:<5} "
                f"{workload.job_type():40} {workload.description}"
            )
        return 0 if args.list else EXIT_BAD_INPUT
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    try:
        run = train_managed(args.name, env, default_iterations=args.iterations)
    except (UnknownWorkloadError, ContractError, CheckpointError) as error:
        if isinstance(error, ContractError):
            record_contract_error(_error_file(env), error)
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(
        f"{args.name}: {run.exit_reason} at {run.iterations_done}/{run.total_iterations} "
        "iterations",
        file=sys.stderr,
    )
    return 0


def _error_file(env: Mapping[str, str] | None) -> Path | None:
    raw = (os.environ if env is None else env).get(contract.ERROR_FILE, "")
    return Path(raw) if raw else None


if __name__ == "__main__":
    sys.exit(main())
