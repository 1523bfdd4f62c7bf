"""`hadar-worker profile` measures a real workload and reports it with ReportProfile."""

from __future__ import annotations

import pytest

from tests.integration.worker.fake_master import FakeMaster
from worker.cli import main


def test_profile_reports_each_fake_gpu_type(capsys: pytest.CaptureFixture[str]) -> None:
    """One entry per (workload, GPU type); fake types scale one CPU measurement by pace."""
    master = FakeMaster(token="t0k").start()
    try:
        code = main(
            [
                "profile",
                "--master",
                master.address,
                "--token",
                "t0k",
                "--node",
                "gpu-07",
                "--fake-gpus",
                "v100:2,k80:1",
                "--fake-gpu-reference-speed",
                "1.0",
                "--workloads",
                "resnet",
                "--iterations",
                "2",
            ]
        )
        assert code == 0, capsys.readouterr().err
        (request,) = master.profiles
        assert request.node == "gpu-07"
        by_type = {e.gpu_type: e for e in request.entries}
        assert sorted(by_type) == ["k80", "v100"]
        assert all(e.workload == "resnet" and e.num_gpus == 1 for e in request.entries)
        assert by_type["v100"].job_type.startswith("Hadar ResNet-8 (batch size")
        assert by_type["v100"].iterations_per_s > 0
        ratio = by_type["k80"].iterations_per_s / by_type["v100"].iterations_per_s
        assert ratio == pytest.approx(0.25)
    finally:
        master.stop()


def test_profile_dry_run_rejects_unknown_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    """`profile` names an unknown workload instead of measuring anything."""
    code = main(["profile", "--fake-gpus", "v100:1", "--workloads", "nope", "--dry-run"])
    assert code == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err
