"""A built wheel carries what `hctl simulate` needs (the bundled Gavel table and traces) and
what the dashboard serves (its templates, and its vendored scripts with their licences)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_simulate_runs_from_an_installed_wheel_with_no_data_flags(tmp_path):
    """Built as a wheel and unpacked elsewhere, the package simulates a bundled trace by name."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("hadar-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert "master/sim/data/gavel/LICENSE" in names
        assert "master/sim/data/gavel/traces/max_min_fairness.trace" in names
        for asset in (
            "templates/base.html",
            "static/htmx.min.js",
            "static/LICENSE-htmx",
            "static/uPlot.iife.min.js",
            "static/LICENSE-uplot",
            "static/dashboard.js",
        ):
            assert f"dashboard/{asset}" in names
        archive.extractall(site)
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    probe = (
        "import sys, master.sim.data as d; print(d.__file__, file=sys.stderr); "
        "from master.sim.command import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            probe,
            "--trace",
            "max_min_fairness",
            "--cluster",
            "v100:8,p100:16,k80:24",
            "--policy",
            "gavel",
            "--json",
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=run_dir,
        env={**os.environ, "PYTHONPATH": str(site)},
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0].startswith(str(site))
    (result,) = json.loads(done.stdout)["results"]
    assert (result["policy"], result["jobs"]) == ("gavel", 96)
