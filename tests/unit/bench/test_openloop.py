"""The open-loop accounting of the load benchmarks (bench/openloop.py): due times, latency
from the due time, the generator's lag, and round phases recovered from metric scrapes."""

from __future__ import annotations

import itertools
import json
import math
import random
from datetime import UTC, datetime

import pytest

from bench.openloop import (
    OK,
    OUTSIDE,
    HistogramDeltas,
    Ledger,
    arrivals,
    histogram_series,
    latency_by_phase,
    parse_samples,
    percentile,
    round_phases,
    spread,
)


def test_percentile_is_nearest_rank() -> None:
    """p50 of 1..4 is 2, p99 of 1..100 is 99, p100 the largest; no values give NaN."""
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.0
    assert percentile([float(v) for v in range(100, 0, -1)], 0.99) == 99.0
    assert percentile([5.0, 7.0], 1.0) == 7.0
    assert math.isnan(percentile([], 0.5))
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0], 1.5)


def test_spread_gives_each_member_one_slot_per_interval_at_its_phase() -> None:
    """Four members over 1 s: each is due every second at its own quarter of it."""
    slots = list(itertools.islice(spread(10.0, 1.0, 4), 8))
    assert [member for _, member in slots] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [due for due, _ in slots] == pytest.approx(
        [10.0, 10.25, 10.5, 10.75, 11.0, 11.25, 11.5, 11.75]
    )


def test_arrivals_keep_their_rate() -> None:
    """Uniform arrivals come every 1/rate; Poisson ones average the rate."""
    uniform = list(itertools.islice(arrivals(0.0, 4.0, "uniform", random.Random(0)), 5))
    assert uniform == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    poisson = list(itertools.islice(arrivals(0.0, 100.0, "poisson", random.Random(0)), 20_000))
    assert all(b > a for a, b in itertools.pairwise(poisson))
    assert 20_000 / poisson[-1] == pytest.approx(100.0, rel=0.03)
    with pytest.raises(ValueError, match="'uniform' or 'poisson'"):
        next(arrivals(0.0, 1.0, "bursty", random.Random(0)))


def test_latency_counts_from_the_due_time_and_lag_is_kept_apart() -> None:
    """A call due at 1.0, sent late at 1.3 and answered at 1.35 took 350 ms, with 300 ms of
    the generator's lag; errors are counted by code and calls never answered apart."""
    ledger = Ledger()
    ledger.sent("Heartbeat", due=1.0, at=1.3)
    ledger.answered("Heartbeat", due=1.0, at=1.35, code=OK)
    ledger.sent("Heartbeat", due=2.0, at=2.0)
    ledger.answered("Heartbeat", due=2.0, at=2.5, code="DEADLINE_EXCEEDED")
    ledger.sent("Heartbeat", due=3.0, at=3.0)
    summary = ledger.methods["Heartbeat"].summary()
    assert summary["calls"] == 3
    assert summary["ok"] == 1
    assert summary["p50_ms"] == pytest.approx(350.0)
    assert summary["lag_max_ms"] == pytest.approx(300.0)
    assert summary["errors"] == {"DEADLINE_EXCEEDED": 1}
    assert summary["unanswered"] == 1
    assert ledger.errors() == 2
    # The timeline pairs each answered call's due time with its latency.
    stats = ledger.methods["Heartbeat"]
    assert stats.answered_due == [1.0]
    assert stats.latencies == [pytest.approx(0.35)]


def test_round_phases_are_recovered_from_scrapes() -> None:
    """One round between two scrapes gives its exact time; two rounds give their mean twice."""
    text = (
        "# HELP hadar_round_phase_seconds Time of one phase\n"
        'hadar_round_phase_seconds_bucket{le="0.1",phase="read"} 1.0\n'
        'hadar_round_phase_seconds_sum{phase="read"} 0.2\n'
        'hadar_round_phase_seconds_count{phase="read"} 1.0\n'
        "hadar_nodes_lost_total 2.0\n"
    )
    names = frozenset(
        {
            "hadar_round_phase_seconds_sum",
            "hadar_round_phase_seconds_count",
            "hadar_nodes_lost_total",
        }
    )
    samples = parse_samples(text, names)
    assert samples[("hadar_nodes_lost_total", "")] == 2.0
    series = histogram_series(samples, "hadar_round_phase_seconds")
    assert series == {'{phase="read"}': (0.2, 1.0)}
    deltas = HistogramDeltas()
    deltas.update(*series['{phase="read"}'])
    deltas.update(0.2, 1.0)  # no round in between
    deltas.update(1.2, 3.0)  # two rounds, 1.0 s together
    assert deltas.values == pytest.approx([0.2, 0.5, 0.5])
    assert deltas.exact == 1
    assert deltas.summary()["max_ms"] == pytest.approx(500.0)


def test_calls_are_grouped_by_the_round_phase_under_way_when_due() -> None:
    """A round that ended at t=10 after 0.4 s (read 0.1, plan 0.1, persist 0.1, the rest
    pushing) splits [9.6, 10] into its phases; calls due elsewhere count as outside rounds."""
    end = datetime.fromtimestamp(10.0, UTC).isoformat().replace("+00:00", "Z")
    line = json.dumps(
        {
            "event": "round finished",
            "timestamp": end,
            "duration_s": 0.4,
            "read_s": 0.1,
            "plan_s": 0.1,
            "persist_s": 0.1,
            "push_s": 0.1,
        }
    )
    phases = round_phases(["not json", '{"event": "master started"}', line])
    assert [p for _, _, p in phases] == ["read", "plan", "persist", "push"]
    assert phases[0][0] == pytest.approx(9.6)
    assert phases[-1][1] == pytest.approx(10.0)
    calls = [(9.65, 0.01), (9.85, 0.2), (9.95, 0.06), (5.0, 0.001), (11.0, 0.002)]
    grouped = latency_by_phase(calls, phases, slow=0.05)
    assert set(grouped) == {"read", "persist", "push", OUTSIDE}
    assert grouped["persist"]["p50_ms"] == pytest.approx(200.0)
    assert grouped["push"]["slow_share"] == 1.0
    assert grouped[OUTSIDE]["calls"] == 2
    assert grouped[OUTSIDE]["slow_share"] == 0.0
