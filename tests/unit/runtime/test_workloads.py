"""The built-in workloads: registry, synthetic data, profiler and command line."""

from __future__ import annotations

import re

import pytest
import torch

from worker.runtime import contract
from worker.workloads.__main__ import EXIT_BAD_INPUT, main
from worker.workloads.profile import profile
from worker.workloads.registry import WORKLOADS, UnknownWorkloadError, get_workload
from worker.workloads.synthetic import synthetic_batch


def test_registry_lists_four_workloads_with_throughput_keys() -> None:
    assert set(WORKLOADS) == {"resnet", "lstm", "transformer", "recommendation"}
    for workload in WORKLOADS.values():
        assert re.fullmatch(r".+ \(batch size \d+\)", workload.job_type())
        assert workload.job_type(7).endswith("(batch size 7)")
        assert workload.description and workload.default_batch_size > 0


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownWorkloadError, match="known: lstm, recommendation"):
        get_workload("vgg")


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_samples_do_not_depend_on_how_the_batch_is_cut(name: str) -> None:
    """Samples [0, 40) equal the concatenation of [0, 5), [5, 21), [21, 40)."""
    workload = get_workload(name)
    whole = synthetic_batch(workload, seed=1, stream=0, iteration=3, start=0, stop=40)
    pieces = [
        synthetic_batch(workload, seed=1, stream=0, iteration=3, start=a, stop=b)
        for a, b in [(0, 5), (5, 21), (21, 40)]
    ]
    for column, joined in zip(whole, zip(*pieces, strict=True), strict=True):
        assert torch.equal(column, torch.cat(joined))
    other = synthetic_batch(workload, seed=1, stream=0, iteration=4, start=0, stop=40)
    copy = synthetic_batch(workload, seed=1, stream=1, iteration=3, start=0, stop=40)
    assert not torch.equal(whole[0], other[0])
    assert not torch.equal(whole[0], copy[0])


def test_profile_measures_each_workload() -> None:
    results = profile(["recommendation", "transformer"], "cpu", 2, batch_size=4)
    assert [(r.workload, r.job_type) for r in results] == [
        ("recommendation", "Hadar Recommendation-MLP (batch size 4)"),
        ("transformer", "Hadar Transformer-2L (batch size 4)"),
    ]
    assert all(r.iterations_per_s > 0 for r in results)


def test_profile_refuses_unknown_names_before_measuring() -> None:
    with pytest.raises(UnknownWorkloadError):
        profile(["recommendation", "nope"], "cpu", 1)


def test_command_line_lists_and_rejects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    assert "Hadar ResNet-8 (batch size 32)" in capsys.readouterr().out
    assert main(["nope"]) == EXIT_BAD_INPUT
    assert "unknown workload 'nope'" in capsys.readouterr().err


def test_command_line_reports_contract_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed contract variable ends the process with a message naming it."""
    assert main(["recommendation"], {contract.TOTAL_ITERATIONS: "many"}) == EXIT_BAD_INPUT
    assert "HADAR_ITERATIONS must be an integer" in capsys.readouterr().err
