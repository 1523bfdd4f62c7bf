"""Where the Gavel throughput table and traces live (shared beside the repository)."""

from __future__ import annotations

import os
from pathlib import Path

GAVEL_DIR = Path(
    os.environ.get(
        "HADAR_GAVEL_DATA", Path(__file__).resolve().parents[3].parent / "shared/data/gavel"
    )
)
THROUGHPUTS = GAVEL_DIR / "simulation_throughputs.json"
TRACES = GAVEL_DIR / "traces"
