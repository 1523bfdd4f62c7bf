"""End-to-end fixtures: a real local cluster (master and worker processes, real training),
with token authentication: workers join with the cluster token, the tests call the API and
run ``hctl`` with the admin token of the cluster's hctl config."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path

import pytest

from clients.client import HadarClient
from clients.localcluster import LocalCluster, parse_worker_groups
from clients.types import Job, JobSpec, JobState, Program

# Short rounds keep the suite quick; the heartbeat timeout of a local cluster is 6 s.
ROUND_S = 2.0


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.3)


class Cluster:
    """A started local cluster plus the helpers the scenarios need."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        record = local.record()
        assert record is not None
        self.address = record.master_address
        self._client: HadarClient | None = None

    @property
    def client(self) -> HadarClient:
        if self._client is None:
            # The admin token `hctl local up` made for the person starting the cluster.
            self._client = self.local.client(timeout=10.0)
        return self._client

    def reconnect(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None

    def submit(self, workload: str, iterations: int, gpus: int = 1, **extra: object) -> int:
        spec = JobSpec(
            name=f"{workload}-{iterations}",
            program=Program.builtin(workload),
            iterations=iterations,
            num_gpus=gpus,
            **extra,  # type: ignore[arg-type]
        )
        return self.client.submit_job(spec).id

    def submit_argv(self, *argv: str) -> int:
        """`hctl submit --parsable ARGV...`: the new job's id (an array's first element's)."""
        result = self.hctl("submit", "--parsable", *argv)
        assert result.returncode == 0, result.stderr
        return int(result.stdout.strip())

    def submit_spec(self, spec: JobSpec) -> int:
        return self.client.submit_job(spec).id

    def job(self, job_id: int) -> Job:
        return self.client.get_job(job_id)

    def wait_state(self, job_id: int, states: Collection[JobState], timeout: float) -> Job:
        seen: list[Job] = []

        def reached() -> bool:
            seen.append(self.job(job_id))
            return seen[-1].state in states

        try:
            wait_for(reached, timeout, f"job {job_id} to be {sorted(states)}")
        except AssertionError:
            raise AssertionError(
                f"job {job_id} stayed {seen[-1].state} ({seen[-1].reason}); logs in "
                f"{self.local.state_dir}"
            ) from None
        return seen[-1]

    def hctl(
        self, *args: str, token: str = "", cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """hctl run with the cluster's config: its address and the admin token, or `token`
        (another user's); from `cwd` (a command job runs where it was submitted from)."""
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("HADAR_MASTER", "HADAR_TOKEN")},
            "HADAR_CONFIG": str(self.local.config_path),
            **({"HADAR_TOKEN": token} if token else {}),
        }
        return subprocess.run(
            [sys.executable, "-m", "clients.cli.main", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=60,
            check=False,
        )


@contextlib.contextmanager
def two_worker_cluster(state_dir: Path) -> Iterator[Cluster]:
    """A local cluster of two one-GPU workers under fifo, for a test file to share."""
    local = LocalCluster(state_dir)
    local.up(
        parse_worker_groups("v100:1;v100:1"), policy="fifo", round_seconds=ROUND_S, timeout=120
    )
    started = Cluster(local)
    try:
        yield started
    finally:
        started.reconnect()
        local.down(timeout=10)


class TwiceWatcher:
    """Samples the job processes in the background; records any job seen under two leases."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self.violations: list[tuple[int, set[int]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for job, leases in self.local.job_processes().items():
                if len(leases) > 1:
                    self.violations.append((job, leases))
            self.samples += 1
            self._stop.wait(0.2)

    def __enter__(self) -> TwiceWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def start(
        workers: str,
        policy: str = "fifo",
        settings: Mapping[str, str] | None = None,
        worker_settings: Mapping[str, str] | None = None,
        *,
        database: str | None = None,
        standby: bool = False,
    ) -> Cluster:
        # database: the masters' (SQLite in the cluster's directory unless given); standby:
        # a second master on it, standing by.
        local = LocalCluster(tmp_path / "cluster", database_url=database)
        local.up(
            parse_worker_groups(workers),
            policy=policy,
            round_seconds=ROUND_S,
            master_settings=settings,
            worker_settings=worker_settings,
            timeout=120,
            standby=standby,
        )
        cluster = Cluster(local)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.reconnect()
        cluster.local.down(timeout=10)
