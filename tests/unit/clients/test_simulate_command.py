"""`hctl simulate` runs the master's simulator, imported only when it is the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from clients.cli.main import main

REPO = Path(__file__).resolve().parents[3]
TRACE = (
    "ResNet-18 (batch size 64)\tpython3 main.py --batch_size 64\timage_classification/cifar10"
    "\t--num_steps\t1\t2000\t1\t1\t-1.000000\t0\n"
    "Recommendation (batch size 2048)\tpython3 train.py --batch_size 2048\trecommendation"
    "\t-n\t1\t3000\t1\t1\t-1.000000\t0\n"
)


def test_simulate_runs_a_trace_and_prints_its_report(tmp_path, capsys):
    """A two-job trace on a small cluster yields one result per policy."""
    trace = tmp_path / "two.trace"
    trace.write_text(TRACE)
    code = main(
        [
            "simulate",
            "--trace",
            str(trace),
            "--cluster",
            "v100:1,k80:1",
            "--policy",
            "fifo",
            "--json",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    (result,) = report["results"]
    assert (result["policy"], result["jobs"]) == ("fifo", 2)


def test_simulate_usage_errors_exit_2(capsys):
    """The simulator's own required options are enforced by hctl's parser."""
    assert main(["simulate", "--cluster", "v100:1"]) == 2
    assert "--trace" in capsys.readouterr().err


def test_other_commands_do_not_import_the_simulator():
    """`hctl queue --help` never loads master.sim (nor numpy and scipy through it)."""
    probe = (
        "import sys; from clients.cli.main import main\n"
        "try:\n    main(['queue', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('master.sim.command' in sys.modules, 'scipy' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "False False"
