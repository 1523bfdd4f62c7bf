"""The Gavel throughput table and traces the tests use: the copies bundled with the package."""

from __future__ import annotations

from master.sim.data import GAVEL_DIR, THROUGHPUTS, TRACES_DIR

TRACES = TRACES_DIR

__all__ = ["GAVEL_DIR", "THROUGHPUTS", "TRACES"]
