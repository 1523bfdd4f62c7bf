"""Control-plane load: many workers heartbeating plus a steady stream of submissions.

Starts `hadar-master run` as its own process (so its CPU and memory are its own), registers
N fake workers (four shared in-process Worker servers answer the master's pushes), then for
the given duration sends one heartbeat per worker per interval and submissions at a fixed
rate. Prints client-side RPC latencies, errors, round durations (from the database), and
the master's CPU time and peak RSS.

    .venv/bin/python bench/bench_control_plane.py [--duration 60] [--workers 200]
        [--submit-rate 100] [--round-seconds 10] [--policy fifo] [--database URL]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy import select

from protos.hadar.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    hadar_pb2,
    hadar_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from store import Database
from store.models import RoundRow
from store.testing import fresh_postgres_schema

REPO = Path(__file__).resolve().parents[1]
CLUSTER_TOKEN = "bench-cluster-token"
GPU_TYPES = ("v100", "k80", "rtx3090", "a100-40gb")


class SharedWorker(worker_pb2_grpc.WorkerServicer):
    """Answers every push for the nodes that registered with its address."""

    def __init__(self) -> None:
        self.assignments = 0
        self._lock = threading.Lock()

    def ApplyAssignments(self, request: Any, context: Any) -> Any:  # noqa: N802
        with self._lock:
            self.assignments += len(request.assignments)
        return worker_pb2.ApplyAssignmentsResponse(
            results=[
                worker_pb2.AssignmentResult(
                    job_id=a.job_id,
                    task_index=a.task_index,
                    lease=a.lease,
                    outcome=worker_pb2.ASSIGNMENT_OUTCOME_APPLIED,
                )
                for a in request.assignments
            ]
        )

    def StopTask(self, request: Any, context: Any) -> Any:  # noqa: N802
        return worker_pb2.StopTaskResponse(was_running=True)

    def StreamTaskLogs(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        return iter(())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss_mib(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


class Recorder:
    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, list[str]] = defaultdict(list)
        self._lock = threading.Lock()

    def call(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except grpc.RpcError as exc:
            with self._lock:
                self.errors[name].append(f"{exc.code().name}: {exc.details()}")
            return None
        elapsed = time.perf_counter() - started
        with self._lock:
            self.latencies[name].append(elapsed)
        return result


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--gpus-per-worker", type=int, default=4)
    parser.add_argument("--heartbeat-interval", type=float, default=1.0)
    parser.add_argument("--submit-rate", type=float, default=100.0, help="submissions per second")
    parser.add_argument("--round-seconds", type=float, default=10.0)
    parser.add_argument("--policy", default="fifo")
    parser.add_argument(
        "--database",
        default="",
        help="default: a temporary SQLite file; a PostgreSQL URL gets a throwaway schema",
    )
    parser.add_argument("--client-threads", type=int, default=32)
    parser.add_argument("--log-level", default="warning", help="the master's log level")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        database = args.database
        if database.startswith("postgres"):
            # A throwaway schema: the benchmark never touches the database's own tables.
            database = stack.enter_context(fresh_postgres_schema(database))
        return run(args, database)


def run(args: argparse.Namespace, database: str) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="hadar-bench-"))
    database = database or f"sqlite:///{workdir / 'hadar.db'}"
    port = free_port()
    env = dict(os.environ, STATE_DIRECTORY=str(workdir))
    python = sys.executable
    token = subprocess.run(
        [python, "-m", "master.cli", "token", "create", "--user", "bench", "--database", database],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    log_file = (workdir / "master.log").open("w")
    print(f"master log: {workdir / 'master.log'}")
    master = subprocess.Popen(
        [
            python,
            "-m",
            "master.cli",
            "run",
            "--listen",
            f"127.0.0.1:{port}",
            "--database",
            database,
            "--policy",
            args.policy,
            "--round-seconds",
            str(args.round_seconds),
            "--cluster-token",
            CLUSTER_TOKEN,
            "--metrics-port",
            "-1",
            "--log-format",
            "json",
            "--log-level",
            args.log_level,
        ],
        cwd=REPO,
        env=env,
        stderr=log_file,
    )
    servers = []
    shared = []
    for _ in range(4):
        servicer = SharedWorker()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        worker_pb2_grpc.add_WorkerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        bound = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append((server, f"127.0.0.1:{bound}"))
        shared.append(servicer)

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=60)
    coordinator: Any = coordinator_pb2_grpc.CoordinatorStub(channel)  # type: ignore[no-untyped-call]
    api: Any = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
    worker_md = (("authorization", f"Bearer {CLUSTER_TOKEN}"),)
    user_md = (("authorization", f"Bearer {token}"),)
    recorder = Recorder()

    def gpus(node: int) -> list[common_pb2.Gpu]:
        gpu_type = GPU_TYPES[node % len(GPU_TYPES)]
        return [
            common_pb2.Gpu(index=i, type=gpu_type, health=common_pb2.GPU_HEALTH_HEALTHY, fake=True)
            for i in range(args.gpus_per_worker)
        ]

    for node in range(args.workers):
        recorder.call(
            "RegisterWorker",
            coordinator.RegisterWorker,
            coordinator_pb2.RegisterWorkerRequest(
                node=f"bench-{node:03d}",
                address=servers[node % len(servers)][1],
                gpus=gpus(node),
                agent_version="bench",
                workloads=["resnet", "lstm", "transformer", "recommendation"],
            ),
            metadata=worker_md,
            timeout=30,
        )

    pool = futures.ThreadPoolExecutor(max_workers=args.client_threads)
    stop_at = time.monotonic() + args.duration
    cpu_start = proc_cpu_seconds(master.pid)
    own_start = proc_cpu_seconds(os.getpid())
    wall_start = time.monotonic()
    rss_samples: list[float] = []
    pending: list[futures.Future[Any]] = []
    workloads = ("resnet", "lstm", "transformer", "recommendation")

    def heartbeats() -> None:
        tick = time.monotonic()
        while tick < stop_at:
            for node in range(args.workers):
                pending.append(
                    pool.submit(
                        recorder.call,
                        "Heartbeat",
                        coordinator.Heartbeat,
                        coordinator_pb2.HeartbeatRequest(node=f"bench-{node:03d}"),
                        metadata=worker_md,
                        timeout=30,
                    )
                )
            tick += args.heartbeat_interval
            time.sleep(max(0.0, tick - time.monotonic()))

    def submissions() -> None:
        interval = 1.0 / args.submit_rate
        tick = time.monotonic()
        n = 0
        while tick < stop_at:
            spec = common_pb2.JobSpec(
                name=f"bench-{n}",
                num_gpus=1 + n % 4,
                iterations=1000 + n,
                workload=common_pb2.WorkloadProgram(name=workloads[n % len(workloads)]),
            )
            pending.append(
                pool.submit(
                    recorder.call,
                    "SubmitJob",
                    api.SubmitJob,
                    hadar_pb2.SubmitJobRequest(spec=spec, idempotency_key=f"bench-{n}"),
                    metadata=user_md,
                    timeout=30,
                )
            )
            n += 1
            tick += interval
            time.sleep(max(0.0, tick - time.monotonic()))

    def sample() -> None:
        while time.monotonic() < stop_at:
            rss_samples.append(proc_rss_mib(master.pid))
            time.sleep(1.0)

    threads = [threading.Thread(target=f) for f in (heartbeats, submissions, sample)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for future in list(pending):
        future.result()
    wall = time.monotonic() - wall_start
    cpu = proc_cpu_seconds(master.pid) - cpu_start
    own_cpu = proc_cpu_seconds(os.getpid()) - own_start
    peak = proc_rss_mib(master.pid, "VmHWM")
    status = api.GetClusterStatus(hadar_pb2.GetClusterStatusRequest(), metadata=user_md, timeout=30)

    master.terminate()
    exit_code = master.wait(timeout=120)
    log_file.close()
    for server, _ in servers:
        server.stop(0)
    pool.shutdown()

    db = Database(database)
    with db.session() as session:
        rounds = list(session.execute(select(RoundRow.duration_s, RoundRow.actions)))
    db.dispose()
    durations = [r[0] for r in rounds]

    print(
        f"control plane: {args.workers} workers x {args.gpus_per_worker} GPUs, heartbeat every "
        f"{args.heartbeat_interval:g} s, {args.submit_rate:g} submissions/s, {args.duration:g} s, "
        f"policy {args.policy}, rounds every {args.round_seconds:g} s, {database.split(':')[0]}"
    )
    print(f"{'rpc':<16}{'calls':>8}{'errors':>8}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    total_errors = 0
    for name in ("RegisterWorker", "Heartbeat", "SubmitJob"):
        values = recorder.latencies[name]
        errors = recorder.errors[name]
        total_errors += len(errors)
        print(
            f"{name:<16}{len(values) + len(errors):>8}{len(errors):>8}"
            f"{percentile(values, 0.5) * 1e3:>10.2f}{percentile(values, 0.99) * 1e3:>10.2f}"
            f"{(max(values) if values else float('nan')) * 1e3:>10.2f}"
        )
    for name, errors in recorder.errors.items():
        for text in sorted(set(errors))[:3]:
            print(f"  {name} error: {text}")
    if durations:
        print(
            f"rounds: {len(durations)}, duration p50 {statistics.median(durations) * 1e3:.1f} ms, "
            f"max {max(durations) * 1e3:.1f} ms, actions {sum(r[1] for r in rounds)}, "
            f"assignments pushed {sum(s.assignments for s in shared)}"
        )
    jobs = {common_pb2.JobState.Name(c.state): c.count for c in status.jobs if c.count}
    print(f"jobs at the end: {jobs}")
    print(
        f"master: CPU {cpu:.1f} s over {wall:.1f} s ({100 * cpu / wall:.0f}% of one core), "
        f"RSS peak {peak:.0f} MiB, median {statistics.median(rss_samples or [0]):.0f} MiB, "
        f"exit code after SIGTERM {exit_code}"
    )
    print(
        f"load generator (this process, fake workers included): CPU {own_cpu:.1f} s "
        f"({100 * own_cpu / wall:.0f}% of one core); machine has {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"errors: {total_errors}")
    return 0 if total_errors == 0 and exit_code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
