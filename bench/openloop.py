"""Open-loop accounting for load benchmarks: when each call was due, when it was sent, when
it was answered.

A call's latency is its answer time minus its due time, not minus the time it was sent: a
generator that falls behind (or a server that holds it back) then shows up in the
latency instead of hiding in fewer calls (coordinated omission). How late the generator
itself sent each call is kept apart, so a reader can tell whether it kept up.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

OK = "OK"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of unsorted values; NaN when there are none."""
    if not values:
        return math.nan
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"percentile: q must be in [0, 1], got {q}")
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def spread(t0: float, interval: float, count: int) -> Iterator[tuple[float, int]]:
    """(due time, member) for `count` members each due once per `interval`, their phases
    spread evenly over the interval: member i is due at t0 + i * interval / count, then
    every interval after."""
    if count < 1 or interval <= 0:
        raise ValueError(f"spread: need count >= 1 and interval > 0, got {count}, {interval}")
    step = interval / count
    slot = 0
    while True:
        yield t0 + slot * step, slot % count
        slot += 1


def arrivals(t0: float, rate: float, kind: str, rng: random.Random) -> Iterator[float]:
    """Due times of calls at `rate` a second from t0: "uniform" (every 1/rate) or "poisson"
    (exponential gaps of mean 1/rate)."""
    if rate <= 0:
        raise ValueError(f"arrivals: rate must be > 0, got {rate}")
    if kind == "uniform":
        n = 0
        while True:
            yield t0 + n / rate
            n += 1
    elif kind == "poisson":
        due = t0
        while True:
            due += rng.expovariate(rate)
            yield due
    else:
        raise ValueError(f"arrivals: kind must be 'uniform' or 'poisson', got {kind!r}")


@dataclass
class RpcStats:
    """One RPC method's calls: latency from due time of those answered OK, the generator's
    lag for every call sent, and the status codes of the others."""

    latencies: list[float] = field(default_factory=list)
    # The due time of each answered call, in the order of `latencies`.
    answered_due: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def unanswered(self) -> int:
        """Calls sent that got neither an answer nor an error (still in flight at the end)."""
        return len(self.lags) - len(self.latencies) - sum(self.errors.values())

    def summary(self) -> dict[str, Any]:
        ms = 1e3
        return {
            "calls": len(self.lags),
            "ok": len(self.latencies),
            "p50_ms": percentile(self.latencies, 0.5) * ms,
            "p99_ms": percentile(self.latencies, 0.99) * ms,
            "max_ms": max(self.latencies, default=math.nan) * ms,
            "errors": dict(sorted(self.errors.items())),
            "unanswered": self.unanswered,
            "lag_p50_ms": percentile(self.lags, 0.5) * ms,
            "lag_p99_ms": percentile(self.lags, 0.99) * ms,
            "lag_max_ms": max(self.lags, default=math.nan) * ms,
        }


class Ledger:
    """Every call of a run, by method. Not thread-safe: one event loop records."""

    def __init__(self) -> None:
        self.methods: dict[str, RpcStats] = {}

    def _stats(self, method: str) -> RpcStats:
        stats = self.methods.get(method)
        if stats is None:
            stats = self.methods[method] = RpcStats()
        return stats

    def sent(self, method: str, due: float, at: float) -> None:
        self._stats(method).lags.append(max(0.0, at - due))

    def answered(self, method: str, due: float, at: float, code: str) -> None:
        stats = self._stats(method)
        if code == OK:
            stats.latencies.append(at - due)
            stats.answered_due.append(due)
        else:
            stats.errors[code] += 1

    def lags(self) -> list[float]:
        return [lag for stats in self.methods.values() for lag in stats.lags]

    def errors(self) -> int:
        return sum(sum(s.errors.values()) + s.unanswered for s in self.methods.values())


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_samples(text: str, names: frozenset[str]) -> dict[tuple[str, str], float]:
    """The samples of Prometheus text exposition whose metric name is in `names`, keyed by
    (name, label text as written, e.g. '{phase="read"}' or '')."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in names:
            continue
        out[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return out


@dataclass
class HistogramDeltas:
    """Per-observation values of a Prometheus histogram series recovered from successive
    scrapes of its _sum and _count: exact where one observation fell between two scrapes,
    the mean of the interval's observations (counted once each) where several did."""

    values: list[float] = field(default_factory=list)
    exact: int = 0
    _sum: float = 0.0
    _count: float = 0.0

    def update(self, total: float, count: float) -> None:
        new = round(count - self._count)
        if new > 0:
            mean = (total - self._sum) / new
            self.values.extend([mean] * new)
            if new == 1:
                self.exact += 1
        self._sum, self._count = total, count

    def summary(self) -> dict[str, Any]:
        return {
            "count": len(self.values),
            "exact": self.exact,
            "p50_ms": percentile(self.values, 0.5) * 1e3,
            "max_ms": max(self.values, default=math.nan) * 1e3,
        }


def histogram_series(
    samples: Mapping[tuple[str, str], float], metric: str
) -> dict[str, tuple[float, float]]:
    """label text -> (sum, count) of each series of histogram `metric` in parsed samples."""
    out: dict[str, tuple[float, float]] = {}
    for (name, labels), value in samples.items():
        if name == f"{metric}_sum":
            count = samples.get((f"{metric}_count", labels))
            if count is not None:
                out[labels] = (value, count)
    return out


# The phases of a round as its "round finished" log line times them, in order; what is left
# of its duration after them counts as the push.
ROUND_PHASES = ("read", "plan", "persist", "push")
OUTSIDE = "no round"


def round_phases(log_lines: Iterable[str]) -> list[tuple[float, float, str]]:
    """(start, end, phase) in Unix seconds, sorted, for every round the master's JSON log
    reports finished (from its `started_at`, or, without one, back from the line's time)."""
    out: list[tuple[float, float, str]] = []
    for line in log_lines:
        if '"round finished"' not in line:
            continue
        try:
            entry = json.loads(line)
            duration = float(entry["duration_s"])
            if "started_at" in entry:
                at = float(entry["started_at"])
            else:  # the line is written as the round ends, or a little after
                stamp = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
                at = stamp.timestamp() - duration
            end = at + duration
            spans = [float(entry[f"{phase}_s"]) for phase in ROUND_PHASES[:-1]]
        except (ValueError, KeyError, TypeError):
            continue
        for phase, seconds in zip(ROUND_PHASES, [*spans, math.inf], strict=True):
            stop = min(end, at + seconds)
            out.append((at, stop, phase))
            at = stop
    out.sort()
    return out


def latency_by_phase(
    calls: Iterable[tuple[float, float]], phases: list[tuple[float, float, str]], slow: float
) -> dict[str, dict[str, float]]:
    """Calls (due time in Unix seconds, latency in seconds) grouped by the round phase under
    way when each was due: count, p50 and p99 in ms, and the share slower than `slow`."""
    starts = [start for start, _, _ in phases]
    grouped: dict[str, list[float]] = {}
    for due, latency in calls:
        i = bisect.bisect_right(starts, due) - 1
        phase = phases[i][2] if i >= 0 and due < phases[i][1] else OUTSIDE
        grouped.setdefault(phase, []).append(latency)
    return {
        phase: {
            "calls": len(values),
            "p50_ms": percentile(values, 0.5) * 1e3,
            "p99_ms": percentile(values, 0.99) * 1e3,
            "slow_share": sum(v > slow for v in values) / len(values),
        }
        for phase, values in sorted(grouped.items())
    }
