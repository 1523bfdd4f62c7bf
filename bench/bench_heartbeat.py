"""Time per Heartbeat RPC of a worker that runs four tasks, and the SQL it costs.

Starts a master in this process (gRPC on a local port, SQLite in a temporary folder or a
throwaway PostgreSQL schema), registers `--nodes` workers with four GPUs each, gives each
a running job of four tasks (written to the store directly: no round, no pushes), then
sends `--beats` heartbeats per worker from one client thread per worker, each listing
that worker's four tasks, and prints the client-side latency and the SQL statements the
master ran per heartbeat.

    .venv/bin/python bench/bench_heartbeat.py [--beats 2000] [--nodes 1] [--database URL]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy import event

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from master.daemon import Master  # noqa: E402
from master.settings import Settings  # noqa: E402
from protos.hadar.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc  # noqa: E402
from store.domain import JobSpec, NewJob, NewTask  # noqa: E402
from store.states import ProgramKind, TaskState  # noqa: E402
from store.testing import fresh_postgres_schema  # noqa: E402

TOKEN = "bench-cluster-token"
METADATA = (("authorization", f"Bearer {TOKEN}"),)
GPUS = 4


@contextlib.contextmanager
def database_url(given: str | None, folder: Path) -> Iterator[str]:
    if given is None:
        yield f"sqlite:///{folder / 'hadar.db'}"
    elif given.startswith("postgres"):
        with fresh_postgres_schema(given) as url:
            yield url
    else:
        yield given


def gpus() -> list[common_pb2.Gpu]:
    return [
        common_pb2.Gpu(
            index=i,
            type="v100",
            memory_bytes=16 << 30,
            health=common_pb2.GPU_HEALTH_HEALTHY,
            fake=True,
        )
        for i in range(GPUS)
    ]


def place_job(master: Master, node: str) -> list[coordinator_pb2.TaskRef]:
    """A job with one running task per GPU of `node` (a heartbeat looks at tasks only)."""
    spec = JobSpec(
        name=f"bench-{node}",
        num_gpus=GPUS,
        iterations=10**6,
        program_kind=ProgramKind.WORKLOAD,
        workload="resnet",
        job_type="ResNet-18 (batch size 128)",
    )

    def write(uow: Any) -> list[coordinator_pb2.TaskRef]:
        job, _ = uow.jobs.add(NewJob(user="bench", spec=spec))
        lease = uow.next_lease()
        for index in range(GPUS):
            uow.tasks.add(
                NewTask(
                    job_id=job.id,
                    task_index=index,
                    node=node,
                    lease=lease,
                    gpu_indices=(index,),
                    gpu_type="v100",
                    rank_offset=index,
                    local_batch_sizes=(32,),
                    state=TaskState.RUNNING,
                )
            )
        return [
            coordinator_pb2.TaskRef(job_id=job.id, task_index=i, lease=lease) for i in range(GPUS)
        ]

    refs: list[coordinator_pb2.TaskRef] = master.tx.write(write)
    return refs


def bench_master(url: str, folder: Path, *, heartbeat_timeout_s: float = 60.0) -> Master:
    """A started master on `url` that takes the benchmark's cluster token and runs no
    round of its own."""
    settings = Settings(
        listen="127.0.0.1:0",
        database=url,
        policy="fifo",
        round_seconds=3600,
        early_rounds=False,
        heartbeat_timeout_s=heartbeat_timeout_s,
        auth="token",
        cluster_token=TOKEN,
        cluster_token_file=str(folder / "cluster-token"),
        checkpoint_dir=str(folder / "checkpoints"),
        metrics_port=-1,
    )
    master = Master(settings)
    master.start()
    return master


def register(stub: Any, n: int) -> str:
    """Register the `n`-th benchmark worker (four fake GPUs); its node name."""
    node = f"bench-{n:03d}"
    stub.RegisterWorker(
        coordinator_pb2.RegisterWorkerRequest(node=node, address=f"127.0.0.1:{1 + n}", gpus=gpus()),
        metadata=METADATA,
        timeout=10,
    )
    return node


class StatementCount:
    """SQL statements an engine runs inside the `with` block."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.count = 0
        self._lock = threading.Lock()

    def _counted(self, *_: Any) -> None:
        with self._lock:
            self.count += 1

    def __enter__(self) -> StatementCount:
        event.listen(self.engine, "before_cursor_execute", self._counted)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._counted)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=2000, help="heartbeats per worker")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--database", default=None, help="SQLite (default) or PostgreSQL URL")
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory() as folder,
        database_url(args.database, Path(folder)) as url,
    ):
        master = bench_master(url, Path(folder))
        lock = threading.Lock()
        metadata = METADATA
        channel = grpc.insecure_channel(master.address)
        try:
            stub: Any = coordinator_pb2_grpc.CoordinatorStub(channel)  # type: ignore[no-untyped-call]
            requests = []
            for n in range(args.nodes):
                node = register(stub, n)
                tasks = [
                    common_pb2.WorkerTask(
                        job_id=r.job_id,
                        task_index=r.task_index,
                        lease=r.lease,
                        state=common_pb2.TASK_STATE_RUNNING,
                    )
                    for r in place_job(master, node)
                ]
                requests.append(
                    coordinator_pb2.HeartbeatRequest(node=node, tasks=tasks, gpus=gpus())
                )
            for request in requests:  # warm-up: the first heartbeat of a node reads it
                assert not stub.Heartbeat(request, metadata=metadata, timeout=10).stop
            latencies: list[float] = []

            def beat(request: coordinator_pb2.HeartbeatRequest) -> None:
                mine = []
                for _ in range(args.beats):
                    started = time.perf_counter()
                    response = stub.Heartbeat(request, metadata=metadata, timeout=10)
                    mine.append(time.perf_counter() - started)
                    if response.stop or response.reregister:
                        raise SystemExit(f"unexpected answer: {response}")
                with lock:
                    latencies.extend(mine)

            with StatementCount(master.database.engine) as statements:
                cpu = time.process_time()
                wall = time.perf_counter()
                threads = [threading.Thread(target=beat, args=(r,)) for r in requests]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                wall = time.perf_counter() - wall
                cpu = time.process_time() - cpu
        finally:
            channel.close()
            master.stop(grace=0.5)

    total = len(latencies)
    ordered = sorted(latencies)
    print(
        f"heartbeat with {GPUS} tasks, {args.nodes} worker(s) x {args.beats} beats, "
        f"{master.database.dialect}, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"  per RPC: mean {statistics.fmean(latencies) * 1e6:.0f} us, "
        f"p50 {ordered[total // 2] * 1e6:.0f} us, p99 {ordered[int(total * 0.99)] * 1e6:.0f} us"
    )
    print(
        f"  throughput {total / wall:.0f} heartbeats/s, process CPU {cpu / total * 1e6:.0f} us each"
    )
    print(f"  SQL statements per heartbeat: {statements.count / total:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
