"""Sustained SubmitJob rate: the highest open-loop rate a master answers with p99 < 100 ms.

Starts `hadar-master run` as its own process (its CPU is its own) on a fresh SQLite file or
a throwaway PostgreSQL schema, then offers submissions at each rate of `--rates` in turn
for `--step-seconds` each. The load is open-loop: the i-th call of a step is due at
start + i / rate and is sent then as a non-blocking gRPC future, and its latency is timed
from when it was due, so a master (or a client) that falls behind shows in the figures
instead of slowing the offered load. Every submission carries a fresh idempotency key, as
the client library's do. A step passes when every call succeeded within the deadline and
its p99 is under `--p99-ms`; the ramp stops at the first step that fails.

    .venv/bin/python bench/bench_submit.py [--database URL] [--rates 50,100,200,300]
        [--step-seconds 10] [--users 4] [--array 0] [--max-pending 0] [--profile FILE]

Prints per step: offered and answered rate, latency percentiles, errors, the master's CPU
milliseconds per submission, and the load average (the figures are only comparable at
similar load).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy import select

from protos.hadar.v1 import common_pb2, hadar_pb2, hadar_pb2_grpc
from store import Database
from store.models import JobRow
from store.testing import fresh_postgres_schema

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = ("resnet", "lstm", "transformer", "recommendation")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class Step:
    rate: float
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)
    sent: int = 0
    # Latest completion, for the answered rate.
    last_done: float = 0.0
    started: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.done = threading.Condition(self.lock)

    @property
    def finished(self) -> int:
        return len(self.latencies) + len(self.errors)


@dataclass
class Master:
    process: subprocess.Popen[bytes]
    address: str
    tokens: list[str]
    database: str


@contextlib.contextmanager
def started_master(database: str, args: argparse.Namespace) -> Iterator[Master]:
    workdir = Path(tempfile.mkdtemp(prefix="hadar-bench-submit-"))
    database = database or f"sqlite:///{workdir / 'hadar.db'}"
    env = dict(os.environ, STATE_DIRECTORY=str(workdir))
    python = sys.executable
    create = [python, "-m", "master.cli", "token", "create", "--database", database, "--user"]
    tokens = [
        subprocess.run(
            [*create, f"user{n}"],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for n in range(args.users)
    ]
    config = workdir / "master.toml"
    config.write_text(
        f"max_pending_jobs_per_user = {args.max_pending}\nmax_array_size = 100000\n"
        f"grpc_threads = {args.grpc_threads}\n"
    )
    port = free_port()
    log_path = workdir / "master.log"
    print(f"master log: {log_path}", flush=True)
    with log_path.open("w") as log_file:
        # Under --profile the master runs with every thread profiled (bench.profiled_master).
        program = ["bench.profiled_master", args.profile] if args.profile else ["master.cli"]
        command = [python, "-m", *program, "run", "--config", str(config)]
        command += ["--listen", f"127.0.0.1:{port}", "--database", database]
        command += ["--policy", "fifo", "--round-seconds", "3600", "--cluster-token", "bench"]
        command += ["--metrics-port", "-1", "--log-format", "json", "--log-level", args.log_level]
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stderr=log_file,
        )
        try:
            yield Master(process, f"127.0.0.1:{port}", tokens, database)
        finally:
            process.terminate()
            process.wait(timeout=60)


def request(n: int, array: int) -> hadar_pb2.SubmitJobRequest:
    spec = common_pb2.JobSpec(
        name=f"bench-{n}",
        num_gpus=1 + n % 4,
        iterations=1000 + n,
        workload=common_pb2.WorkloadProgram(name=WORKLOADS[n % len(WORKLOADS)]),
        env={"STEP": str(n)},
    )
    if array:
        spec.array = f"0-{array - 1}"
    return hadar_pb2.SubmitJobRequest(spec=spec, idempotency_key=f"bench-{os.getpid()}-{n}")


def run_step(
    stub: Any, metadata: list[Any], step: Step, first: int, args: argparse.Namespace
) -> None:
    total = int(step.rate * step.seconds)
    interval = 1.0 / step.rate
    requests = [request(first + i, args.array) for i in range(total)]
    step.started = time.monotonic()

    def finished(due: float, call: Any) -> None:
        now = time.monotonic()
        error = call.exception()
        with step.lock:
            if error is None:
                step.latencies.append(now - due)
                step.job_ids.append(call.result().job.id)
            else:
                step.errors.append(f"{error.code().name}: {error.details()}")
            step.last_done = max(step.last_done, now)
            step.done.notify_all()

    for i, message in enumerate(requests):
        due = step.started + i * interval
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        call = stub.SubmitJob.future(message, metadata=metadata[i % len(metadata)], timeout=30)
        call.add_done_callback(lambda c, due=due: finished(due, c))
        step.sent += 1
    with step.lock:
        step.done.wait_for(lambda: step.finished >= step.sent, timeout=60)


def group_sizes(database: str, steps: list[Step]) -> list[float]:
    """Per step, the mean number of jobs stored per transaction: a group's jobs share their
    submission time, one per transaction."""
    db = Database(database)
    try:
        with db.session() as session:
            times = dict(session.execute(select(JobRow.id, JobRow.submitted_at)).all())
    finally:
        db.dispose()
    return [
        len(step.job_ids) / max(1, len({times[i] for i in step.job_ids if i in times}))
        for step in steps
    ]


def report(step: Step, cpu_s: float) -> bool:
    lat = step.latencies
    answered = len(lat) / max(1e-9, step.last_done - step.started) if lat else 0.0
    p99 = percentile(lat, 0.99) * 1e3
    load = os.getloadavg()[0]
    print(
        f"{step.rate:>8.0f}{answered:>10.1f}{percentile(lat, 0.5) * 1e3:>9.1f}"
        f"{percentile(lat, 0.9) * 1e3:>9.1f}{p99:>9.1f}{max(lat, default=0) * 1e3:>9.1f}"
        f"{len(step.errors):>8}{cpu_s * 1e3 / max(1, step.sent):>11.2f}{load:>7.2f}",
        flush=True,
    )
    for text in sorted(set(step.errors))[:3]:
        print(f"    error: {text}")
    return not step.errors and step.finished == step.sent and p99 < step_limit_ms


step_limit_ms = 100.0


def main() -> int:
    global step_limit_ms
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database",
        default="",
        help="default: a temporary SQLite file; a PostgreSQL URL gets a throwaway schema",
    )
    parser.add_argument("--rates", default="50,100,150,200,250,300,350,400,500,600")
    parser.add_argument("--step-seconds", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--array", type=int, default=0, help="elements per submission (0: none)")
    parser.add_argument("--max-pending", type=int, default=0, help="max_pending_jobs_per_user")
    parser.add_argument("--grpc-threads", type=int, default=16)
    parser.add_argument("--p99-ms", type=float, default=100.0)
    parser.add_argument("--keep-going", action="store_true", help="run every rate")
    parser.add_argument("--log-level", default="warning", help="the master's log level")
    parser.add_argument(
        "--profile", default="", help="write the master's cProfile stats (every thread) here"
    )
    args = parser.parse_args()
    step_limit_ms = args.p99_ms
    rates = [float(r) for r in args.rates.split(",")]

    with contextlib.ExitStack() as stack:
        database = args.database
        if database.startswith("postgres"):
            database = stack.enter_context(fresh_postgres_schema(database))
        master = stack.enter_context(started_master(database, args))
        channel = stack.enter_context(grpc.insecure_channel(master.address))
        grpc.channel_ready_future(channel).result(timeout=60)
        stub: Any = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
        metadata = [[("authorization", f"Bearer {token}")] for token in master.tokens]
        # Warm up connections, token caches and the first statements.
        warm = Step(rate=50, seconds=1)
        run_step(stub, metadata, warm, 10_000_000, args)
        backend = "postgresql" if database.startswith("postgres") else "sqlite"
        print(
            f"SubmitJob, open loop, {args.step_seconds:g} s per rate, {args.users} users, "
            f"{backend}, array {args.array or 'none'}, max_pending {args.max_pending}"
        )
        print(
            f"{'offered':>8}{'answered':>10}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
            f"{'max ms':>9}{'errors':>8}{'cpu ms/sub':>11}{'load1':>7}"
        )
        best = 0.0
        first = 0
        steps: list[Step] = []
        for rate in rates:
            step = Step(rate=rate, seconds=args.step_seconds)
            cpu = proc_cpu_seconds(master.process.pid)
            run_step(stub, metadata, step, first, args)
            steps.append(step)
            first += step.sent
            passed = report(step, proc_cpu_seconds(master.process.pid) - cpu)
            if passed:
                best = max(best, rate)
            elif not args.keep_going:
                break
            time.sleep(1.0)
        print(f"highest rate with p99 < {args.p99_ms:g} ms: {best:g}/s")
        sizes = group_sizes(master.database, steps)
        shown = (f"{step.rate:g}/s: {size:.1f}" for step, size in zip(steps, sizes, strict=True))
        print("jobs per transaction: " + ", ".join(shown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
