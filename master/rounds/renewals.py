"""Which running tasks' leases a round renews.

A lease lasts `lease_rounds` rounds, and scheduled rounds renew every lease they keep. But
rounds also run early, after an exit or a submission that finds idle GPUs: under a stream
of exits that is a round every few seconds, and each sent every worker a lease end barely
later than the one it had just acknowledged (at 200 workers, half of the master's pushes
were such renewals). So a round leaves a lease alone while the lease end its worker
acknowledged is still at least `lease_s - renewal_age_s` away (Settings.lease_renewal_age_s:
the renewal it skips comes at most that much later than a scheduled round's would, which
the lease's margins allow for).

Only acknowledged lease ends count: a push that did not reach its worker, or is still under
way, leaves the book as it was, so the next round sends the renewal again. A task the book
does not know (just started, or the master restarted) is renewed. A worker that gets a push
in the round anyway (a start or a stop) gets its renewals with it, since they cost nothing
more there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


class RenewalBook:
    def __init__(self, lease_s: float, renewal_age_s: float) -> None:
        self._lease_s = lease_s
        self._age_s = renewal_age_s
        self._lock = threading.Lock()
        # Task id -> the latest lease end (Unix seconds) its worker acknowledged.
        self._held: dict[int, float] = {}

    def due(self, task_id: int, now_s: float) -> bool:
        """Whether a round at `now_s` (Unix seconds) renews the task's lease."""
        if self._age_s <= 0:
            return True
        with self._lock:
            held = self._held.get(task_id)
        return held is None or held < now_s + self._lease_s - self._age_s

    def acknowledged(self, task_ids: Iterable[int], lease_end_s: float) -> None:
        """The worker answered a push carrying `lease_end_s` for these tasks."""
        with self._lock:
            for task_id in task_ids:
                if self._held.get(task_id, float("-inf")) < lease_end_s:
                    self._held[task_id] = lease_end_s

    def keep_only(self, task_ids: Iterable[int]) -> None:
        """Forget every task but these (the running ones): ended tasks' entries go."""
        keep = set(task_ids)
        with self._lock:
            for task_id in [t for t in self._held if t not in keep]:
                del self._held[task_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)
