"""Which CPUs the master's threads and its helper processes run on.

Every thread of the master that runs Python takes turns on one interpreter lock, and a
call passes between several of them (gRPC's poller, the handler, the group commit). When
those threads sit on different CPUs, each hand-over wakes a thread on another CPU first;
on a virtual machine that costs tens of microseconds and the lock's waiters queue up
behind it. With every thread of the serving process on one CPU the hand-overs stay on
that CPU, and the planning and forecasting processes, which do not share the lock, get the
other CPUs to themselves (setting ``serving_cpu``; docs/benchmarks.md has the
measurements).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

# "auto": one of the allowed CPUs, when there are at least two; "off": leave the
# scheduler free; a number: that CPU.
AUTO, OFF = "auto", "off"

_TASKS = Path("/proc/self/task")


@dataclass(frozen=True, slots=True)
class CpuSplit:
    """The CPU the serving process keeps to and the CPUs left to its helper processes."""

    serving: int
    helpers: frozenset[int]


_split: CpuSplit | None = None


def check(choice: str) -> str | None:
    """Why `choice` is not a valid ``serving_cpu``, or None."""
    if choice in (AUTO, OFF) or (choice.isdigit() and choice.isascii()):
        return None
    return f"serving_cpu must be 'auto', 'off' or a CPU number, got {choice!r}"


def choose(choice: str, allowed: Collection[int], pid: int) -> CpuSplit | None:
    """The split for ``serving_cpu`` = `choice` among the `allowed` CPUs; None when the
    serving process is left unpinned. ``auto`` picks by process id, so that masters
    sharing a machine (a standby beside the active one) spread over its CPUs. A CPU the
    process may not use raises ValueError naming the ones it may."""
    cpus = sorted(allowed)
    if choice == OFF or (choice == AUTO and len(cpus) < 2):
        return None
    if choice == AUTO:
        serving = cpus[pid % len(cpus)]
    else:
        serving = int(choice)
        if serving not in cpus:
            raise ValueError(
                f"serving_cpu {serving} is not one this process may run on "
                f"({', '.join(map(str, cpus))})"
            )
    helpers = frozenset(cpus) - {serving}
    return CpuSplit(serving, helpers or frozenset(cpus))


def keep_serving_on_one_cpu(choice: str) -> CpuSplit | None:
    """Put every thread of this process (and those it starts later) on the chosen CPU;
    returns the split, also kept for :func:`helper_cpus`. Called once, before the master
    starts its threads."""
    global _split
    split = choose(choice, os.sched_getaffinity(0), os.getpid())
    if split is None:
        return None
    # sched_setaffinity applies to one thread; threads started later inherit it from the
    # thread that starts them.
    for tid in sorted(int(entry.name) for entry in _TASKS.iterdir()):
        try:
            os.sched_setaffinity(tid, {split.serving})
        except ProcessLookupError:
            continue  # ended meanwhile
    _split = split
    return split


def helper_cpus() -> frozenset[int] | None:
    """The CPUs a helper process started now should move to (None: stay as started)."""
    return None if _split is None else _split.helpers


def use_cpus(cpus: frozenset[int] | None) -> None:
    """In a helper process, at its start: move to `cpus` (None: stay)."""
    if cpus:
        os.sched_setaffinity(0, cpus)
