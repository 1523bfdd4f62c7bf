"""How fast this machine runs Python today, printed beside a benchmark's figures.

The same virtual machine type ran the same Python loop three times faster on one day than
on another, and every benchmark's figures moved with it: figures of different days compare
only with this figure beside them.
"""

from __future__ import annotations

import time

LOOP_STEPS = 20_000_000

# At a module's top level, as `python -c "for _ in range(20_000_000): pass"` runs it, the
# way docs/benchmarks.md's figures for it were taken: inside a function the same loop takes
# about half as long.
_LOOP = compile("for _ in range(steps):\n    pass\n", "<python-loop>", "exec")


def python_loop_s(steps: int = LOOP_STEPS) -> float:
    """Seconds this interpreter takes for an empty top-level loop of `steps` steps (0.35-1.0
    s for the default on the 2-core development machine type)."""
    started = time.perf_counter()
    exec(_LOOP, {"steps": steps})
    return time.perf_counter() - started
