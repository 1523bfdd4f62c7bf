"""The ranges of the numbers a job spec carries.

Both sides of the API read them: hctl and job files refuse a priority out of range before
sending, the master refuses any field out of range (INVALID_ARGUMENT naming it; it trusts
no client). Each bound is far beyond what a real job asks for and small enough that every
policy's arithmetic (a linear program's coefficients, remaining time, prices) stays finite
and well scaled with it; tests/unit/policies/test_extremes.py plans with jobs at both ends.
"""

from __future__ import annotations

import math

# A weight relative to the default 1: a million to one between the two ends is more than
# any lab's fairness needs, and keeps gavel's LP within what its solver scales reliably.
PRIORITY_MIN = 0.001
PRIORITY_MAX = 1000.0
PRIORITY_RANGE = "0.001 to 1000"
# More GPUs than any one job of a lab's cluster uses; the master also refuses more than
# the cluster has, once a worker has registered.
NUM_GPUS_MAX = 4096
# 10^12 iterations take over 30 years at a thousand a second.
ITERATIONS_MAX = 10**12
# A global batch of a million samples; a job splits it over its GPUs.
BATCH_SIZE_MAX = 1 << 20
# 1 PiB per GPU, beyond any GPU's memory.
GPU_MEMORY_MAX_BYTES = 1 << 50


def valid_priority(value: float) -> bool:
    """Whether ``value`` is a priority: a finite weight from PRIORITY_MIN to PRIORITY_MAX."""
    return math.isfinite(value) and PRIORITY_MIN <= value <= PRIORITY_MAX
