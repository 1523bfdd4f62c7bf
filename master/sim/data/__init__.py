"""Data shipped with the simulator: the Gavel project's throughput table and traces.

The files under ``gavel/`` are copied unchanged from Gavel (MIT licence, see
``gavel/LICENSE`` and ``gavel/README.md``). They are package data, so ``hctl simulate``
finds them in an installed wheel as well as in a checkout.
"""

from __future__ import annotations

from pathlib import Path

GAVEL_DIR = Path(__file__).resolve().parent / "gavel"
THROUGHPUTS = GAVEL_DIR / "simulation_throughputs.json"
TRACES_DIR = GAVEL_DIR / "traces"
TRACE_SUFFIX = ".trace"


def bundled_traces() -> list[str]:
    """Names of the bundled traces (file names without ``.trace``), sorted."""
    return sorted(path.stem for path in TRACES_DIR.glob(f"*{TRACE_SUFFIX}"))


def bundled_trace(name: str) -> Path:
    """The bundled trace called ``name`` (with or without its ``.trace`` suffix).

    Raises FileNotFoundError listing the bundled names when there is none by that name.
    """
    stem = name.removesuffix(TRACE_SUFFIX)
    path = TRACES_DIR / f"{stem}{TRACE_SUFFIX}"
    if "/" in stem or not path.is_file():
        raise FileNotFoundError(
            f"no trace file {name!r} and no bundled trace by that name; "
            f"bundled traces: {', '.join(bundled_traces())}"
        )
    return path


def resolve_trace(argument: str | Path) -> Path:
    """A ``--trace`` argument as a file: an existing path wins, else a bundled trace's name."""
    path = Path(argument)
    if path.exists():
        return path
    if path.parent != Path():
        raise FileNotFoundError(f"trace file not found: {path}")
    return bundled_trace(str(argument))
