"""The scheduling core stays pure: importing it and every policy pulls in no grpc,
sqlalchemy or torch, so policies run without a network, a database or a GPU stack."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_scheduling_core_imports_no_infrastructure() -> None:
    code = textwrap.dedent(
        """
        import sys
        import master.scheduling.diff, master.scheduling.placement, master.scheduling.rates
        from master.scheduling.policy import available_policies, make_policy
        for name in available_policies():
            make_policy(name)
        import master.sim.engine, master.sim.metrics, master.sim.trace
        bad = sorted(m for m in sys.modules if m.split(".")[0] in {"grpc", "sqlalchemy", "torch"})
        print(",".join(bad))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "", f"imported: {out.stdout.strip()}"
