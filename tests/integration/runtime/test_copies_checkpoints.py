"""HadarE copies whose lease keeps being extended still average and checkpoint: every
checkpoint interval, and at the end of each lease they started under, so a crash loses at
most that much work."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.integration.runtime.processes import (
    DEADLINE_S,
    JobProcess,
    contract_env,
    free_port,
    start,
    stop_all,
    torchrun_env,
)
from worker.runtime import contract
from worker.runtime.checkpoint import CheckpointStore, job_directory
from worker.runtime.contract import ProgressRecord

JOB = "31"
TOTAL = 1_000_000


def _start_copies(
    tmp_path: Path, name: str, lease_file: Path, extra: dict[str, object]
) -> list[JobProcess]:
    port = free_port()
    common: dict[str, object] = {
        contract.JOB_ID: JOB,
        contract.TOTAL_ITERATIONS: TOTAL,
        contract.GLOBAL_BATCH_SIZE: 8,
        contract.NUM_COPIES: 2,
        contract.CHECKPOINT_DIR: tmp_path / "ckpt",
        contract.LEASE_FILE: lease_file,
        contract.SEED: 3,
        contract.FAKE_GPU_SPEED: 0.5,
        **extra,
    }
    processes: list[JobProcess] = []
    for copy in range(2):
        env = contract_env(torchrun_env(2, copy, port), common, {contract.COPY_INDEX: copy})
        processes.append(start("recommendation", env, tmp_path / name, name=f"copy{copy}"))
    return processes


def _kill(processes: list[JobProcess]) -> None:
    for process in processes:
        process.popen.send_signal(signal.SIGKILL)
    for process in processes:
        process.popen.wait(DEADLINE_S)


def _is_checkpoint(record: ProgressRecord) -> bool:
    return record.event == "checkpoint" and record.checkpoint_iterations > 0


def test_copies_checkpoint_every_interval_under_an_extended_lease_and_resume_there(
    tmp_path: Path,
) -> None:
    """Two copies with a 0.5 s checkpoint interval under a lease that does not end: both
    keep running (no exit) and checkpoint the average again and again. Killed with
    SIGKILL (a node crash), the job restarts from the newest checkpoint, which is no
    older than the last checkpoint record the copies wrote before the crash."""
    lease = tmp_path / "lease"
    lease.write_text(f"{time.time() + 3600}\n")
    processes = _start_copies(tmp_path, "run0", lease, {contract.CHECKPOINT_INTERVAL_S: 0.5})
    try:
        first = processes[0].wait_for(_is_checkpoint)
        second = processes[0].wait_for(
            lambda r: _is_checkpoint(r) and r.checkpoint_iterations > first.checkpoint_iterations
        )
        assert all(p.popen.poll() is None for p in processes), "copies must still be running"
        assert not any(r.event == "exit" for p in processes for r in p.records())
        _kill(processes)
        written = max(r.checkpoint_iterations for r in processes[0].records() if _is_checkpoint(r))
        assert written >= second.checkpoint_iterations
        store = CheckpointStore(job_directory(tmp_path / "ckpt", JOB))
        latest = store.load_latest()
        assert latest is not None and latest.iterations == written

        lease.write_text(f"{time.time() + 3600}\n")
        resumed = _start_copies(tmp_path, "run1", lease, {contract.ITERATIONS_DONE: written})
        processes += resumed
        starts = [p.wait_for(lambda r: r.event == "progress") for p in resumed]
        assert {r.iterations_done for r in starts} == {written}
    finally:
        stop_all(processes)


def test_copies_average_at_the_end_of_the_lease_they_started_under_when_it_is_renewed(
    tmp_path: Path,
) -> None:
    """Without a checkpoint interval, copies whose lease is renewed before it ends meet at
    its old end: they average and checkpoint there, and keep running under the renewal."""
    lease = tmp_path / "lease"  # no end known yet: the copies wait for one
    processes = _start_copies(tmp_path, "run0", lease, {})
    try:
        for process in processes:
            process.wait_for(lambda r: r.event == "progress" and r.iterations_done > 0)
        ends = time.time() + 3.0
        lease.write_text(f"{ends}\n")
        # The agent renews the lease before it ends, after the copies have read the old
        # end (they read the file at most once a second).
        while time.time() < ends - 0.8:
            time.sleep(0.05)
        lease.write_text(f"{time.time() + 3600}\n")
        record = processes[0].wait_for(_is_checkpoint)
        assert time.time() >= ends
        assert all(p.popen.poll() is None for p in processes), "copies must still be running"
        latest = CheckpointStore(job_directory(tmp_path / "ckpt", JOB)).load_latest()
        assert latest is not None and latest.iterations >= record.checkpoint_iterations
    finally:
        stop_all(processes)
