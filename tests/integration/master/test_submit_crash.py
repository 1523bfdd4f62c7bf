"""A master killed while submissions are being committed: every submission it answered is
in the database when it comes back, with its spec."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from clients.localcluster import free_port
from protos.hadar.v1 import common_pb2, hadar_pb2, hadar_pb2_grpc

THREADS = 8
# Answered submissions to wait for before the kill: enough that groups are being committed.
ANSWERED_BEFORE_KILL = 200


def master_command() -> list[str]:
    script = Path(sys.executable).with_name("hadar-master")
    return [str(script)] if script.exists() else [sys.executable, "-m", "master.cli"]


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


@dataclass
class RunningMaster:
    process: subprocess.Popen[bytes]
    address: str
    log: Path


@contextmanager
def running_master(database: str, tmp_path: Path, name: str) -> Iterator[RunningMaster]:
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / f"{name}.log"
    command = [*master_command(), "run", "--listen", address, "--database", database]
    command += ["--cluster-token", "crash-test", "--metrics-port", "-1"]
    command += ["--round-seconds", "3600", "--log-level", "warning"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            env={**os.environ, "STATE_DIRECTORY": str(tmp_path)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        with grpc.insecure_channel(address) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=30)
            except grpc.FutureTimeoutError:
                raise AssertionError(f"{name} did not serve: {log.read_text()}") from None
        yield RunningMaster(process, address, log)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


@dataclass
class Submitter:
    """Threads that submit jobs without pause, each remembering what was answered."""

    address: str
    metadata: tuple[tuple[str, str], ...]
    # (job id, name) of each answered submission: an id answered twice must show.
    answered: list[tuple[int, str]] = field(default_factory=list)
    # Calls that failed once the master was gone: they were in flight at the kill.
    failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, thread: int) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub: Any = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
            sent = 0
            while not self.stop.is_set():
                name = f"t{thread}-{sent}"
                spec = common_pb2.JobSpec(
                    name=name,
                    num_gpus=1 + sent % 4,
                    iterations=1000 + sent,
                    workload=common_pb2.WorkloadProgram(name="resnet"),
                    env={"SUBMISSION": name},
                )
                sent += 1
                try:
                    response = stub.SubmitJob(
                        hadar_pb2.SubmitJobRequest(spec=spec, idempotency_key=name),
                        metadata=self.metadata,
                        timeout=5,
                    )
                except grpc.RpcError:
                    with self.lock:
                        self.failed += 1
                    return
                with self.lock:
                    self.answered.append((response.job.id, name))

    def count(self) -> int:
        with self.lock:
            return len(self.answered)


def test_a_killed_master_loses_no_answered_submission(tmp_path: Path) -> None:
    """Eight threads submit without pause to a master on SQLite; the master is killed with
    SIGKILL while they do. Restarted on the same database, it has every job it answered,
    each with the spec that was submitted."""
    database = f"sqlite:///{tmp_path / 'hadar.db'}"
    token = subprocess.run(
        [*master_command(), "token", "create", "--user", "alice", "--database", database],
        env={**os.environ, "STATE_DIRECTORY": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    metadata = (("authorization", f"Bearer {token}"),)

    with running_master(database, tmp_path, "first") as first:
        submitter = Submitter(first.address, metadata)
        threads = [threading.Thread(target=submitter.run, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        try:
            wait_for(
                lambda: submitter.count() >= ANSWERED_BEFORE_KILL,
                20,
                f"{ANSWERED_BEFORE_KILL} answered submissions",
            )
            first.process.kill()
            first.process.wait(timeout=10)
        finally:
            submitter.stop.set()
            for thread in threads:
                thread.join(timeout=30)
    assert submitter.failed > 0, "no submission was in flight when the master was killed"
    answered = list(submitter.answered)

    with (
        running_master(database, tmp_path, "restarted") as restarted,
        grpc.insecure_channel(restarted.address) as channel,
    ):
        stub: Any = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
        stored: dict[int, common_pb2.Job] = {}
        page_token = ""
        while True:
            page = stub.ListJobs(
                hadar_pb2.ListJobsRequest(page_size=1000, page_token=page_token),
                metadata=metadata,
                timeout=10,
            )
            stored.update((job.id, job) for job in page.jobs)
            page_token = page.next_page_token
            if not page_token:
                break
    missing = sorted({job_id for job_id, _ in answered} - set(stored))
    assert not missing, f"answered but lost: jobs {missing[:10]} ({len(missing)} in all)"
    for job_id, name in answered:
        spec = stored[job_id].spec
        assert (spec.name, dict(spec.env)) == (name, {"SUBMISSION": name}), job_id
