"""The contract between the worker agent and a job's processes.

The agent starts one process per GPU of a task, with torchrun's variables (MASTER_ADDR,
MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE) so an ordinary DDP script runs
unchanged, plus the variables below, which the runtime helper reads. Both sides import the
names from here; nothing else couples them.

Stopping: the agent sends SIGTERM to the task's process group. A managed process finishes the
iteration in flight, saves a checkpoint, writes an ``exit`` record and exits 0. After the
grace period the agent sends SIGKILL.

Progress: each process appends JSON lines to its ``HADAR_PROGRESS_FILE`` (see
:class:`ProgressRecord`); the agent tails the file of each task's local rank 0 and relays the
newest record to the master. The last record before a clean exit has ``event == "exit"`` and
an ``exit_reason`` that tells the agent how the lease ended.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

# Identity of the task and its lease.
JOB_ID = "HADAR_JOB_ID"
TASK_INDEX = "HADAR_TASK_INDEX"
LEASE = "HADAR_LEASE"
# Amount of work.
TOTAL_ITERATIONS = "HADAR_ITERATIONS"
ITERATIONS_DONE = "HADAR_ITERATIONS_DONE"  # as the master knows it at lease start
ITERATION_BUDGET = "HADAR_ITERATION_BUDGET"  # iterations for this lease; 0: until done/stopped
# Batch: the global batch is fixed by the job; this rank computes LOCAL_BATCH_SIZE samples of
# it per iteration in ACCUMULATION_STEPS micro-batches.
GLOBAL_BATCH_SIZE = "HADAR_GLOBAL_BATCH_SIZE"
LOCAL_BATCH_SIZE = "HADAR_LOCAL_BATCH_SIZE"
ACCUMULATION_STEPS = "HADAR_ACCUMULATION_STEPS"
# Where checkpoints live (shared between workers in a lab) and where progress goes.
CHECKPOINT_DIR = "HADAR_CHECKPOINT_DIR"
PROGRESS_FILE = "HADAR_PROGRESS_FILE"
# A file holding the Unix time this task's lease ends unless renewed; the agent rewrites it
# on every renewal. Once that time has passed the runtime stops the job as SIGTERM would
# (checkpoint, exit): the job's agent, which would stop it, may be frozen or gone.
LEASE_FILE = "HADAR_LEASE_FILE"
# Seconds between checkpoints while running (0: only at the end of a lease or on stop).
CHECKPOINT_INTERVAL_S = "HADAR_CHECKPOINT_INTERVAL_S"
# Relative speed of a fake GPU (1.0: no pacing). The runtime sleeps so that each iteration
# takes compute_time / speed, which makes heterogeneity real on machines without GPUs.
FAKE_GPU_SPEED = "HADAR_FAKE_GPU_SPEED"
GPU_TYPE = "HADAR_GPU_TYPE"
# HadarE copies: the job runs as NUM_COPIES independent replicas that average parameters at
# the end of each lease; this process belongs to copy COPY_INDEX. The copies find each other
# through the ordinary torchrun variables: MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK span the
# processes of *all* copies (one rendezvous per job, as for any multi-task job), and each
# process names its copy in COPY_INDEX. The runtime groups ranks by copy (copies may have
# different numbers of processes), all-reduces gradients only within a copy, and at the end of
# the lease averages parameters over the whole world, each copy weighing the same.
NUM_COPIES = "HADAR_NUM_COPIES"
COPY_INDEX = "HADAR_COPY_INDEX"
# Seed for synthetic data and initialization (fixed per job so runs are reproducible).
SEED = "HADAR_SEED"
# "1": torch.use_deterministic_algorithms(True) (and CUBLAS_WORKSPACE_CONFIG on CUDA), for
# bit-exact reproduction; off by default because some kernels are slower or missing.
DETERMINISTIC = "HADAR_DETERMINISTIC"
# Seconds between "progress" records (default 1.0); checkpoints and exits always write one.
PROGRESS_INTERVAL_S = "HADAR_PROGRESS_INTERVAL_S"
# A file the runtime writes an uncaught ContractError's message to before the process exits:
# the agent then reports the failure as one no retry can pass (the job's setup is wrong).
ERROR_FILE = "HADAR_ERROR_FILE"
# Where the job runs its model: "cuda" (default when CUDA is available: cuda:LOCAL_RANK of the
# GPUs the agent made visible) or "cpu" (fake GPUs, or forcing CPU on a GPU machine).
DEVICE = "HADAR_DEVICE"

ExitReason = Literal["completed", "lease_done", "stopped"]


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """One line of a progress file."""

    event: Literal["progress", "checkpoint", "exit"]
    iterations_done: int
    iterations_per_s: float
    samples_per_s: float
    loss: float
    checkpoint_iterations: int
    at: float  # Unix time
    exit_reason: ExitReason | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), allow_nan=True)

    @classmethod
    def from_json(cls, line: str) -> ProgressRecord:
        raw = json.loads(line)
        return cls(**raw)
