"""Expected start times against a real master with fake-GPU workers: after a round the
master forecasts, off the round thread, when each waiting job starts, and `hctl queue
--start`, `hctl queue --json` and `hctl show` report it; held and dependent jobs get none."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from clients.cli import shapes
from master.rounds.forecaster import StartTimes
from tests.integration.cli.conftest import Cluster, Hctl, running_cluster
from tests.integration.cli.test_hctl import row, submit


def eventually(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.removesuffix("Z") + "+00:00")


@pytest.fixture
def forecasting(tmp_path: Path, quiet_master_logs: None) -> Iterator[Cluster]:
    """The test cluster (fifo, rounds an hour apart, no early rounds), forecasting after
    every round."""
    with running_cluster(tmp_path, forecast_interval_s=0.001) as started:
        yield started


@pytest.fixture
def hctl(forecasting: Cluster, capsys: pytest.CaptureFixture[str], isolated_env: None) -> Hctl:
    return Hctl(forecasting, capsys)


def next_forecast(cluster: Cluster, before: StartTimes | None) -> StartTimes:
    """Runs a round, once a forecast is due (the last one's duration spaces them too), and
    returns the forecast made from it."""
    forecaster = cluster.master.rounds.forecaster
    assert forecaster is not None
    eventually(forecaster.due, "a forecast to be due")
    cluster.round()
    eventually(lambda: forecaster.latest is not before, "the round's forecast")
    assert forecaster.latest is not None
    return forecaster.latest


def test_queue_and_show_report_the_expected_start(hctl: Hctl, forecasting: Cluster) -> None:
    """Jobs 1 and 2 hold all four GPUs; job 1 reports it has 200 s of work left. Job 3,
    behind them, is expected in the first round after job 1 exits: an hour after this one.
    A held job and one waiting on a dependency get no estimate, nor do running jobs."""
    first = submit(hctl, "--workload", "resnet", "--gpus", "2", "--iterations", "2000")
    second = submit(hctl, "--workload", "resnet", "--gpus", "2", "--iterations", "2000")
    waiting = submit(hctl, "--workload", "resnet", "--gpus", "2", "--iterations", "100")
    held = submit(hctl, "--hold", "--workload", "resnet", "--iterations", "10")
    dependent = submit(hctl, "--after-ok", str(first), "--workload", "resnet", "--iterations", "10")
    before = next_forecast(forecasting, None)
    # Measured speeds: job 1 has 1000 iterations left at 5/s, job 2 all 2000 at 1/s.
    forecasting.worker_running(first).report_progress(first, 1000, iterations_per_s=5.0)
    forecasting.worker_running(second).report_progress(second, 0, iterations_per_s=1.0)
    latest = next_forecast(forecasting, before)
    expected = latest.computed_at + timedelta(seconds=3600)

    listed = hctl("queue", "--json")
    assert listed.code == 0, listed.err
    document = json.loads(listed.out)
    assert shapes.check(document, shapes.OUTPUTS["queue"]) == []
    starts = {job["id"]: job["expected_start"] for job in document["jobs"]}
    assert starts[first] is None and starts[second] is None  # running
    assert starts[held] is None and starts[dependent] is None
    assert starts[waiting] is not None
    assert abs((parse_time(starts[waiting]) - expected).total_seconds()) < 1.0

    queue = hctl("queue", "--start")
    assert queue.code == 0, queue.err
    header = queue.lines()[0].split()
    assert header[:6] == ["ID", "NAME", "USER", "STATE", "START", "GPUS"], header
    assert str(first) not in [line.split()[0] for line in queue.lines()]  # running: not listed
    assert row(queue.out, waiting)[4] != "-"
    assert row(queue.out, held)[4] == "-"
    assert row(queue.out, dependent)[4] == "-"

    shown = hctl("show", str(waiting))
    assert shown.code == 0, shown.err
    assert "expected start" in shown.out
    assert f"{expected:%Y-%m-%dT%H:%M:%S}Z" in shown.out
    held_shown = hctl("show", str(held))
    assert f"hctl release {held}" in held_shown.out
    as_json = json.loads(hctl("show", str(waiting), "--json").out)
    assert parse_time(as_json["job"]["expected_start"]) == parse_time(starts[waiting])


def test_another_users_start_time_is_public(hctl: Hctl, forecasting: Cluster) -> None:
    """Start times are public like the rest of the queue: bob sees alice's."""
    for _ in range(2):
        submit(hctl, "--workload", "resnet", "--gpus", "2", "--iterations", "2000")
    waiting = submit(hctl, "--workload", "resnet", "--gpus", "2", "--iterations", "100")
    next_forecast(forecasting, None)
    shown = json.loads(hctl("show", str(waiting), "--json", user="bob").out)
    assert shown["job"]["private_hidden"] is True
    assert shown["job"]["expected_start"] is not None


def test_forecasts_can_be_turned_off(tmp_path: Path, quiet_master_logs: None) -> None:
    """With forecast_interval_s = 0 no forecast runs and no job gets an estimate."""
    with running_cluster(tmp_path, forecast_interval_s=0) as cluster:
        assert cluster.master.rounds.forecaster is not None
        assert not cluster.master.rounds.forecaster.due()
        cluster.round()
        assert cluster.master.rounds.forecaster.latest is None
