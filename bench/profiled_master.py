"""`hadar-master` under cProfile in every thread: the profile of each thread (gRPC handlers,
rounds, background work) is merged into one pstats file when the process exits.

    .venv/bin/python -m bench.profiled_master PSTATS_FILE run --database ... [master args]

cProfile watches only the thread that enables it, so each thread enables its own profiler
as it starts; the main thread's is enabled here. Times are each thread's CPU time
(`time.thread_time`), so waits on locks, the database or the network count for nothing:
the profile says where the CPU goes.
"""

from __future__ import annotations

import atexit
import cProfile
import pstats
import sys
import threading
import time
from typing import Any

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()
_original_run = threading.Thread.run


def _profiled_run(self: threading.Thread) -> None:
    profile = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append(profile)
    profile.enable()
    try:
        _original_run(self)
    finally:
        profile.disable()


def _dump(path: str, main: cProfile.Profile) -> None:
    main.disable()
    with _lock:
        profiles = [main, *_profiles]
    merged: Any = None
    for profile in profiles:
        try:
            stats = pstats.Stats(profile)
        except TypeError:
            # A thread that never ran a profiled call has no stats.
            continue
        if merged is None:
            merged = stats
        else:
            merged.add(stats)
    if merged is not None:
        merged.dump_stats(path)


def main() -> int:
    path, *argv = sys.argv[1:]
    threading.Thread.run = _profiled_run  # type: ignore[method-assign]
    main_profile = cProfile.Profile(time.thread_time)
    atexit.register(_dump, path, main_profile)
    main_profile.enable()
    from master.cli import main as master_main

    return master_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
