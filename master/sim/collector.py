"""How the cyclic garbage collector runs while a simulation runs.

A simulator allocates a few objects per active job in every decided round (views,
actions, the plan's dicts) that live until the next round, and keeps every round's
record to the end. Under the collector's default settings that costs a large share of a
long run; :func:`young_collections_rarer` changes them for the run's duration.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Net allocations between the collector's youngest collections while a simulator runs.
RUN_GC_THRESHOLD = 10_000


@contextmanager
def young_collections_rarer(threshold: int = RUN_GC_THRESHOLD) -> Iterator[None]:
    """Collect the youngest generation only after ``threshold`` net allocations (700 by
    default) for the duration, then restore the settings.

    A decided round keeps a few objects per active job alive until the next one (views,
    actions, the plan's dicts). At 700 they outlive two young collections and reach the
    oldest generation, which they fill so fast that it is collected every few dozen
    rounds, each time through every live object of the run (the trace, every round's
    record): at 10,000 jobs about a third of a run's time. A round's own objects mostly
    stay under 10,000, so at that threshold they die young and are never traversed.
    A threshold of 0 (automatic collection off) is left as it is.
    """
    old = gc.get_threshold()
    if old[0] == 0 or old[0] >= threshold:
        yield
        return
    gc.set_threshold(threshold, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
