"""The worker's half of master fencing: orders from a master older than one already seen are
refused.

Every order (ApplyAssignments, StopTask) carries the sending master's epoch, which grows by
one with each master that becomes active. The worker keeps the highest epoch it has seen in
``<state_dir>/agent/master-epoch.json``, written to disk before the first order of a new
epoch is carried out, so a restarted worker still refuses a master it had left behind.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from worker.agent.state import write_atomically

# The master recognises a refusal by this prefix (master.nodes.workers.FENCED_PREFIX).
FENCED_PREFIX = "fenced:"
EPOCH_FILE = "master-epoch.json"


class FencedError(Exception):
    """An order from a master whose epoch is older than the newest this worker has seen."""


class EpochFence:
    """The highest master epoch seen, and the one gate every order passes."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / "agent" / EPOCH_FILE
        # Held while an order is carried out: an order of a newer epoch waits for one of an
        # older epoch that was admitted before it, and after it nothing older gets in.
        self._lock = threading.RLock()
        self.warnings: list[str] = []
        self._highest = 0
        try:
            self._highest = int(json.loads(self._path.read_text())["epoch"])
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, KeyError) as exc:
            # Kept aside for a person to look at; the next order's epoch is taken as the
            # highest again, so only an order already in flight from a replaced master
            # could still pass.
            self._path.replace(self._path.with_name(self._path.name + ".corrupt"))
            self.warnings.append(f"{self._path} was unreadable ({exc!r}); moved aside")

    @property
    def highest(self) -> int:
        with self._lock:
            return self._highest

    @contextmanager
    def admit(self, epoch: int) -> Iterator[None]:
        """Carry out an order of master `epoch` inside this block, or raise FencedError
        (before anything is done) when a newer master's order has been seen."""
        with self._lock:
            if epoch < self._highest:
                raise FencedError(
                    f"{FENCED_PREFIX} the order comes from master epoch {epoch}, but this "
                    f"worker follows epoch {self._highest}: a newer master is active"
                )
            if epoch > self._highest:
                write_atomically(self._path, json.dumps({"epoch": epoch}))
                self._highest = epoch
            yield
