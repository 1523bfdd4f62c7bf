"""Whether moving a running job pays for its restart.

A running job that is migrated, resized or forked into a different set of copies stops,
checkpoints and starts again from the checkpoint on its new GPUs: for ``restart_s`` seconds
it makes no progress. A move is worth it only when the faster placement wins that time back
within the planning horizon (the next lease): the work the job would do there if it stayed
(``min(remaining, before * horizon)`` iterations) must take longer where it is than the
restart plus the same work at the new speed.

``restart_s`` comes from the views (:attr:`JobView.restart_s`): the daemon measures it per
job (placement to first progress, averaged over placements) and takes its ``restart_cost_s``
setting, whose default was measured (docs/benchmarks.md), until then; the simulator uses
its restart overhead.
"""

from __future__ import annotations

#: Seconds a running job loses to one move when nothing better is known: a checkpoint on
#: stop plus a new process that loads it, measured for the built-in workloads on a
#: worker (docs/benchmarks.md, "Restart cost").
DEFAULT_RESTART_S = 6.0


def move_pays(
    before: float, after: float, *, remaining: float, restart_s: float, horizon_s: float
) -> bool:
    """Whether moving from ``before`` to ``after`` iterations/s gains more than the restart.

    ``remaining`` is the job's work left (iterations), ``horizon_s`` the time the new
    placement is planned for. A job that does not progress where it is (``before <= 0``)
    always gains from moving to a placement where it does.
    """
    if after <= 0:
        return False
    if before <= 0:
        return True
    work = min(max(remaining, 0.0), before * max(horizon_s, 0.0))
    if work <= 0:
        return False
    saved = work / before - work / after
    return saved > restart_s
