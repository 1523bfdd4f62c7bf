"""The serving process keeps its threads to one CPU and leaves the others to its helper
processes (master/process/cpus.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from master.process.cpus import CpuSplit, check, choose
from master.settings import Settings, SettingsError, load

REPO = Path(__file__).resolve().parents[3]


def test_auto_picks_one_allowed_cpu_by_process_id_and_leaves_the_rest_to_helpers() -> None:
    """Masters on one machine spread over its CPUs; helpers get every other CPU."""
    assert choose("auto", {0, 1, 2, 3}, pid=6) == CpuSplit(2, frozenset({0, 1, 3}))
    assert choose("auto", {4, 9}, pid=7) == CpuSplit(9, frozenset({4}))


def test_nothing_is_pinned_with_one_cpu_or_when_off() -> None:
    assert choose("auto", {3}, pid=1) is None
    assert choose("off", {0, 1}, pid=1) is None


def test_a_chosen_cpu_must_be_one_the_process_may_use() -> None:
    assert choose("1", {0, 1}, pid=1) == CpuSplit(1, frozenset({0}))
    # Alone, the helpers share it.
    assert choose("5", {5}, pid=1) == CpuSplit(5, frozenset({5}))
    refused = r"serving_cpu 7 is not one this process may run on \(0, 1\)"
    with pytest.raises(ValueError, match=refused):
        choose("7", {0, 1}, pid=1)


def test_the_setting_accepts_auto_off_or_a_cpu_number_only() -> None:
    assert check("auto") is None and check("off") is None and check("12") is None
    assert Settings().serving_cpu == "auto"
    assert load(environ={"HADAR_SERVING_CPU": "off"}).serving_cpu == "off"
    with pytest.raises(SettingsError, match="serving_cpu must be 'auto', 'off' or a CPU number"):
        Settings(serving_cpu="first")
    with pytest.raises(SettingsError, match="serving_cpu"):
        Settings(serving_cpu="-1")


_PROBE = """
import json, multiprocessing, os, threading
from master.process.cpus import helper_cpus, keep_serving_on_one_cpu, use_cpus

def affinity(_=None):
    return sorted(os.sched_getaffinity(0))

if __name__ == "__main__":
    split = keep_serving_on_one_cpu("auto")
    seen = []
    later = threading.Thread(target=lambda: seen.append(affinity()))
    later.start(); later.join()
    context = multiprocessing.get_context("spawn")
    with context.Pool(1, initializer=use_cpus, initargs=(helper_cpus(),)) as pool:
        helper = pool.apply(affinity)
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    threads = sorted({tuple(sorted(os.sched_getaffinity(t))) for t in tids})
    got = {"serving": split.serving, "threads": threads, "later": seen[0], "helper": helper}
    print(json.dumps(got))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to split")
def test_every_thread_keeps_to_the_serving_cpu_and_a_helper_moves_to_the_others(
    tmp_path: Path,
) -> None:
    """In a process of its own (pinning the test process would slow every other test)."""
    allowed = sorted(os.sched_getaffinity(0))
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    out = subprocess.run(
        [sys.executable, str(probe)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    got = json.loads(out.stdout)
    serving = got["serving"]
    assert serving in allowed
    assert got["threads"] == [[serving]]
    assert got["later"] == [serving]
    assert got["helper"] == [cpu for cpu in allowed if cpu != serving]
