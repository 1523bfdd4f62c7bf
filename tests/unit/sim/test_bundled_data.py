"""The Gavel data ships inside the package: `hctl simulate` needs no file beside the checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from master.sim.command import main
from master.sim.data import THROUGHPUTS, bundled_trace, bundled_traces, resolve_trace

REPO = Path(__file__).resolve().parents[3]


def _simulate(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result: dict[str, object] = json.loads(captured.out)["results"][0]
    return result


def test_the_bundled_traces_are_gavels_six():
    """Every Gavel trace is bundled, by its file name without the suffix."""
    assert bundled_traces() == [
        "artifact_evaluation",
        "debug",
        "highmem_test",
        "max_min_fairness",
        "medium_test",
        "small_test",
    ]
    assert bundled_trace("max_min_fairness.trace") == bundled_trace("max_min_fairness")


def test_a_trace_name_runs_the_bundled_trace_with_the_bundled_table(capsys):
    """`--trace NAME` with no `--throughputs` equals naming both bundled files explicitly."""
    by_name = _simulate(
        capsys, "--trace", "artifact_evaluation", "--cluster", "v100:2,k80:4", "--policy", "gavel"
    )
    by_path = _simulate(
        capsys,
        "--trace",
        str(bundled_trace("artifact_evaluation")),
        "--throughputs",
        str(THROUGHPUTS),
        "--cluster",
        "v100:2,k80:4",
        "--policy",
        "gavel",
    )
    assert by_name["jobs"] == 15
    timing = {"plan_ms_mean", "plan_ms_p99", "plan_ms_max", "planning_s"}
    assert {k: v for k, v in by_name.items() if k not in timing} == {
        k: v for k, v in by_path.items() if k not in timing
    }


def test_throughputs_none_models_relative_speeds_only(capsys):
    """`--throughputs none` drops the table, which changes the simulated job times."""
    common = ("--trace", "artifact_evaluation", "--cluster", "v100:2,k80:4", "--policy", "fifo")
    with_table = _simulate(capsys, *common)
    without = _simulate(capsys, *common, "--throughputs", "none")
    assert with_table["avg_jct_s"] != without["avg_jct_s"]


def test_an_unknown_trace_name_lists_the_bundled_ones(capsys):
    """A name that is neither a file nor a bundled trace exits 2 naming what exists."""
    assert main(["--trace", "no_such_trace", "--cluster", "v100:1", "--policy", "fifo"]) == 2
    err = capsys.readouterr().err
    assert "no_such_trace" in err
    assert "max_min_fairness" in err


def test_an_existing_file_wins_over_a_bundled_name(tmp_path, monkeypatch):
    """A file in the working directory named like a bundled trace is read, not the bundle."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "debug").write_text("")
    assert resolve_trace("debug") == Path("debug")
    with pytest.raises(FileNotFoundError, match="trace file not found: elsewhere/debug"):
        resolve_trace("elsewhere/debug")


def test_nothing_in_the_repository_reads_data_beside_it():
    """No test, benchmark, doc or product file points at a data folder outside the checkout."""
    offenders = []
    for folder in ("master", "worker", "store", "clients", "tests", "bench", "docs"):
        for path in (REPO / folder).rglob("*"):
            readable = path.suffix in {".py", ".md", ".toml", ".cfg"} and path != Path(__file__)
            if readable and "shared/data" in path.read_text(errors="replace"):
                offenders.append(str(path.relative_to(REPO)))
    for name in ("README.md", "Makefile", "pyproject.toml"):
        if "shared/data" in (REPO / name).read_text():
            offenders.append(name)
    assert offenders == []
