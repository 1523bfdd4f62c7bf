"""The collector's settings while a simulator runs, and after."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from master.scheduling.policy import make_policy
from master.scheduling.round import RoundDecision, RoundState
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView
from master.sim.collector import RUN_GC_THRESHOLD, young_collections_rarer
from master.sim.engine import Simulator
from master.sim.generate import generate_trace
from tests.unit.sim.gavel_data import THROUGHPUTS


@pytest.fixture
def default_threshold() -> Iterator[tuple[int, int, int]]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*saved)


def test_a_run_collects_young_objects_rarer_and_restores_the_settings(
    default_threshold: tuple[int, int, int],
) -> None:
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    cluster = ClusterView.from_counts({"v100": 4, "k80": 4}, gpus_per_server=4)
    trace = generate_trace(10, model, mean_interarrival_s=600.0, seed=3)
    seen: list[tuple[int, ...]] = []

    def observe(state: RoundState, decision: RoundDecision) -> None:
        seen.append(gc.get_threshold())

    Simulator(make_policy("fifo"), trace, cluster, model, on_round=observe).run()
    assert seen and set(seen) == {(RUN_GC_THRESHOLD, 10, 10)}
    assert gc.get_threshold() == default_threshold


def test_settings_are_restored_after_an_error(default_threshold: tuple[int, int, int]) -> None:
    with pytest.raises(RuntimeError), young_collections_rarer():
        assert gc.get_threshold()[0] == RUN_GC_THRESHOLD
        raise RuntimeError
    assert gc.get_threshold() == default_threshold


def test_higher_or_disabled_thresholds_are_left_alone() -> None:
    saved = gc.get_threshold()
    try:
        for setting in ((0, 10, 10), (50_000, 5, 5)):
            gc.set_threshold(*setting)
            with young_collections_rarer():
                assert gc.get_threshold() == setting
            assert gc.get_threshold() == setting
    finally:
        gc.set_threshold(*saved)
