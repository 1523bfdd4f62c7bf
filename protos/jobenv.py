"""Which environment variables a job may be given, as hctl and the master both judge them.

A job's environment is its user's (hctl sends the submitting shell's, as sbatch
--export=ALL does), laid over the worker's own. The worker then sets, for each process, the
variables through which it tells the job where and how it runs; those belong to the
runtime, and a job that set them would either be overridden silently or break its own
placement. So a submission that names one is refused, with the reason; hctl leaves them out
of an exported shell environment without a word (a shell inside a job has them all).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What the master accepts (INVALID_ARGUMENT on spec.env beyond): a real shell environment
# is a few KiB; the cap keeps one spec from bloating every round's snapshot and push.
MAX_ITEMS = 1024
MAX_BYTES = 64 * 1024

# torchrun's variables: which process of the job this is, and where its peers meet.
TORCHRUN = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
)
# The GPUs of the task, in the order NVML numbers them, and the directory it runs in.
PLACEMENT = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PWD"})
# The runtime's settings a job may choose (see worker/runtime/contract.py); every other
# HADAR_* name is the worker's (the job's identity, lease and batch layout), the master's
# (an array element's HADAR_ARRAY_*) or hctl's own (HADAR_CONFIG, HADAR_TOKEN).
JOB_SETTINGS = frozenset(
    {"HADAR_SEED", "HADAR_DETERMINISTIC", "HADAR_DEVICE", "HADAR_PROGRESS_INTERVAL_S"}
)
PREFIX = "HADAR_"


def runtime_owned(name: str) -> str | None:
    """Why `name` is the runtime's to set, or None when a job may set it."""
    if name in TORCHRUN:
        return "set by the worker for each process (torchrun's rank and rendezvous variables)"
    if name == "CUDA_VISIBLE_DEVICES":
        return "set by the worker to the GPUs the scheduler gave the job"
    if name == "CUDA_DEVICE_ORDER":
        return "set by the worker so that CUDA numbers GPUs as the scheduler does"
    if name == "PWD":
        return "set by the worker to the job's working directory (choose it with --workdir)"
    if name.startswith(PREFIX) and name not in JOB_SETTINGS:
        allowed = ", ".join(sorted(JOB_SETTINGS))
        return f"HADAR_* variables are set by Hadar for each job (a job may set only {allowed})"
    return None


def env_bytes(env: Mapping[str, str]) -> int:
    """The size the master counts against MAX_BYTES: NAME=VALUE and a terminator each."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())
