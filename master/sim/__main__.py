"""``python -m master.sim``: the simulator without the hctl CLI."""

from __future__ import annotations

import sys

from master.sim.command import main

sys.exit(main())
