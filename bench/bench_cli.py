"""hctl's start-up and a long queue: what a person at a terminal waits for.

Starts `hadar-master run` as its own process on a SQLite file holding N queued jobs (written
through the store before the master starts: a quarter the caller's own, the rest three other
users' commands with private parts the caller may not read), then times, as processes:
`hctl --version`, `hctl queue` (every active job, printed to a pipe) and `hctl submit`
(median of several runs each), and from this process the listing `hctl queue` asks for:
ListJobs of every active job, all pages of 1000, as the master answers it (raw messages; the
first listing after the master starts, then p50 and p99 of the following ones), and as the
Python client returns it (converted to its dataclasses).

    .venv/bin/python bench/bench_cli.py [--jobs 5000] [--runs 7] [--list-runs 50]

Hadar's packages are compiled to bytecode first, as an installed package ships them: where
PYTHONDONTWRITEBYTECODE is set, an editable install would otherwise compile every module
it imports on every run, and that is not what a user of hctl waits for.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from clients.client import HadarClient
from clients.types import ACTIVE_JOB_STATES
from protos.hadar.v1 import common_pb2, hadar_pb2, hadar_pb2_grpc
from store import Database
from store.domain import JobSpec, NewJob
from store.migrate import upgrade
from store.states import ProgramKind

REPO = Path(__file__).resolve().parents[1]
USER = "bench"
OTHERS = ("alice", "bob", "carol")
WORKLOADS = ("resnet", "lstm", "transformer", "recommendation")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def fill(database: str, jobs: int) -> None:
    """`jobs` PENDING jobs: every fourth the caller's workload, the rest other users'
    commands with an environment, paths and a webhook (hidden from the caller)."""
    db = Database(database)
    upgrade(db.url, engine=db.engine)
    with db.transaction() as uow:
        for n in range(jobs):
            if n % 4 == 0:
                spec = JobSpec(
                    name=f"train-{n}",
                    num_gpus=1 + n % 4,
                    iterations=1000 + n,
                    program_kind=ProgramKind.WORKLOAD,
                    workload=WORKLOADS[n % len(WORKLOADS)],
                )
                user = USER
            else:
                spec = JobSpec(
                    name=f"sweep-{n}",
                    num_gpus=1 + n % 8,
                    iterations=5000,
                    program_kind=ProgramKind.COMMAND,
                    argv=("python", "train.py", "--lr", f"0.{n}"),
                    env=(("SEED", str(n)), ("WANDB_KEY", "secret")),
                    workdir=f"/home/u/run-{n}",
                    checkpoint_dir=f"/scratch/ckpt/{n}",
                    output="out-%j.log",
                    notify_url="https://hooks.example.org/T000/secret",
                )
                user = OTHERS[n % len(OTHERS)]
            uow.jobs.add(NewJob(user=user, spec=spec))
    db.dispose()


ACTIVE = [
    common_pb2.JOB_STATE_PENDING,
    common_pb2.JOB_STATE_RUNNING,
    common_pb2.JOB_STATE_PREEMPTED,
]


def rpc_listing(stub: Any, api_token: str) -> int:
    """ListJobs of every active job, page after page as the client asks; how many came."""
    metadata = (("authorization", f"Bearer {api_token}"),)
    page, count = "", 0
    while True:
        request = hadar_pb2.ListJobsRequest(states=ACTIVE, page_size=1000, page_token=page)
        response = stub.ListJobs(request, metadata=metadata, timeout=60)
        count += len(response.jobs)
        page = response.next_page_token
        if not page:
            return count


def timed_runs(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Wall seconds of each run of `argv` as a process, stdout to a pipe that is read."""
    times: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode()}")
    return times


def start_master(python: str, database: str, workdir: Path, port: int) -> subprocess.Popen[bytes]:
    log = (workdir / "master.log").open("w")
    return subprocess.Popen(
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
            "fifo",
            "--round-seconds",
            "3600",
            "--cluster-token",
            "bench-cluster-token",
            "--metrics-port",
            "-1",
            "--log-format",
            "json",
            "--log-level",
            "warning",
        ],
        cwd=REPO,
        env=dict(os.environ, STATE_DIRECTORY=str(workdir)),
        stderr=log,
    )


def start_filled_master(
    python: str, workdir: Path, jobs: int
) -> tuple[subprocess.Popen[bytes], int, str]:
    """A master on a SQLite file in `workdir` holding `jobs` queued jobs: its process, its
    port and an API token of USER."""
    database = f"sqlite:///{workdir / 'hadar.db'}"
    fill(database, jobs)
    token = subprocess.run(
        [python, "-m", "master.cli", "token", "create", "--user", USER, "--database", database],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    port = free_port()
    return start_master(python, database, workdir, port), port, token


def wait_answering(client: HadarClient, master: subprocess.Popen[bytes]) -> None:
    """Until the master answers `client` (a minute at most, or until its process ends)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            client.whoami()
            return
        except Exception:
            if time.monotonic() > deadline or master.poll() is not None:
                raise
            time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000, help="queued jobs (default 5000)")
    parser.add_argument("--runs", type=int, default=7, help="runs of each hctl command")
    parser.add_argument("--list-runs", type=int, default=50, help="listings timed in-process")
    args = parser.parse_args()

    python = sys.executable
    hctl = str(Path(python).with_name("hctl"))
    packages = ("clients", "protos", "master", "store")
    subprocess.run([python, "-m", "compileall", "-q", *packages], cwd=REPO, check=True)
    workdir = Path(tempfile.mkdtemp(prefix="hadar-bench-cli-"))
    master, port, token = start_filled_master(python, workdir, args.jobs)
    env = dict(os.environ, HADAR_MASTER=f"127.0.0.1:{port}", HADAR_TOKEN=token)
    env.pop("HADAR_CONFIG", None)
    client = HadarClient(f"127.0.0.1:{port}", token=token, timeout=30)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
    try:
        wait_answering(client, master)
        started = time.perf_counter()
        answered = rpc_listing(stub, token)
        first = time.perf_counter() - started
        if answered != args.jobs:
            raise RuntimeError(f"the master lists {answered} jobs, not {args.jobs}")
        rpcs: list[float] = []
        for _ in range(args.list_runs):
            started = time.perf_counter()
            rpc_listing(stub, token)
            rpcs.append(time.perf_counter() - started)
        listings: list[float] = []
        for _ in range(max(1, args.list_runs // 2)):
            started = time.perf_counter()
            listed = client.list_jobs(states=ACTIVE_JOB_STATES)
            listings.append(time.perf_counter() - started)
        hidden = sum(1 for j in listed if j.private_hidden)
        version = timed_runs([hctl, "--version"], env, args.runs)
        queue = timed_runs([hctl, "queue"], env, args.runs)
        submit = timed_runs(
            [hctl, "submit", "--workload", "resnet", "--iterations", "100", "--parsable"],
            env,
            args.runs,
        )
    finally:
        client.close()
        channel.close()
        master.terminate()
        master.wait(timeout=60)

    print(
        f"hctl against a master on SQLite with {args.jobs} queued jobs ({hidden} of them other "
        f"users', private parts hidden); {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    print(f"{'what':<44}{'p50 ms':>10}{'p99 ms':>10}{'min ms':>10}")
    rows = (
        (f"ListJobs, all {args.jobs}, first after start", [first]),
        (f"ListJobs, all {args.jobs} (raw messages)", rpcs),
        (f"client.list_jobs, all {args.jobs}", listings),
        ("hctl --version (process)", version),
        (f"hctl queue, {args.jobs} rows (process)", queue),
        ("hctl submit (process)", submit),
    )
    for what, values in rows:
        print(
            f"{what:<44}{statistics.median(values) * 1e3:>10.1f}"
            f"{percentile(values, 0.99) * 1e3:>10.1f}{min(values) * 1e3:>10.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
