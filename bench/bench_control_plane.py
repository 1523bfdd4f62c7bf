"""Control-plane load, open loop: many workers heartbeating and reporting, users submitting
at a fixed rate, watchers holding WatchJobs streams, against `hadar-master run` as its own
process.

The load is written from the protocol alone (protos/hadar/v1). N fake nodes register with
GPUs of four types; each serves the Worker API on its own port, remembers the tasks the
master pushed to it, and heartbeats them (with its GPUs' utilization) once per interval,
reports their progress every progress interval, reports their exits, and stops what the
master's answers fence off (bench/fake_nodes.py). Every call has a due time (heartbeats:
each node once per interval, the nodes' phases spread over it; submissions: Poisson or
uniform arrivals from several users, each with their own API token) and is sent then
without waiting for earlier answers; its latency is answer time minus due time
(bench/openloop.py). How late the generator sent its calls is printed too.

    .venv/bin/python bench/bench_control_plane.py [--workers 200] [--heartbeat-interval 1]
        [--submit-rate 100] [--watchers 20] [--duration 300] [--round-seconds 10]
        [--policy fifo] [--database URL] [--json]
    .venv/bin/python bench/bench_control_plane.py --find-max-rate [--workers 50]
    .venv/bin/python bench/bench_control_plane.py --list-jobs 5000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.fake_nodes import ITERATIONS_PER_S, WORKLOADS, FakeNode, NodeLoop  # noqa: E402
from bench.machine import LOOP_STEPS, python_loop_s  # noqa: E402
from bench.openloop import (  # noqa: E402
    OK,
    HistogramDeltas,
    Ledger,
    arrivals,
    histogram_series,
    latency_by_phase,
    parse_samples,
    percentile,
    round_phases,
    spread,
)
from protos.hadar.v1 import (  # noqa: E402
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    hadar_pb2,
    hadar_pb2_grpc,
    worker_pb2_grpc,
)

CLUSTER_TOKEN = "bench-cluster-token"
GPU_TYPES = ("v100", "k80", "rtx3090", "a100-40gb")
PHASES = ("read", "plan", "persist", "push")
SCRAPED = frozenset(
    {
        "hadar_round_phase_seconds_sum",
        "hadar_round_phase_seconds_count",
        "hadar_round_duration_seconds_sum",
        "hadar_round_duration_seconds_count",
        "hadar_nodes_lost_total",
    }
)
# Each channel its own connection, as separate agents and users have.
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]
# The target's bound on a call: the share of calls slower than this is shown per round phase.
SLOW_S = 0.05


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return math.nan


# -- the master as its own process -------------------------------------------------------------


@dataclass
class MasterProcess:
    process: subprocess.Popen[bytes]
    address: str
    metrics_url: str
    admin_token: str
    workdir: Path

    @property
    def log(self) -> Path:
        return self.workdir / "master.log"

    @classmethod
    def start(cls, args: argparse.Namespace, database: str) -> MasterProcess:
        workdir = Path(tempfile.mkdtemp(prefix="hadar-bench-"))
        database = database or f"sqlite:///{workdir / 'hadar.db'}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HADAR_")}
        env["STATE_DIRECTORY"] = str(workdir)
        master_cli = [sys.executable, "-m", "master.cli"]
        create = ["token", "create", "--user", "bench-admin", "--admin", "--database", database]
        admin_token = subprocess.run(
            [*master_cli, *create],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        port, metrics_port = free_port(), free_port()
        settings: dict[str, Any] = {
            "listen": f"127.0.0.1:{port}",
            "database": database,
            "policy": args.policy,
            "round_seconds": args.round_seconds,
            # Workers adopt the master's interval: the master's setting is what sets it.
            "heartbeat_interval_s": args.heartbeat_interval,
            "cluster_token": CLUSTER_TOKEN,
            "checkpoint_dir": str(workdir / "checkpoints"),
            "metrics_host": "127.0.0.1",
            "metrics_port": metrics_port,
            "log_format": "json",
            "log_level": args.log_level,
        }
        if args.heartbeat_timeout is not None:
            settings["heartbeat_timeout_s"] = args.heartbeat_timeout
        if args.grpc_threads is not None:
            settings["grpc_threads"] = args.grpc_threads
        settings.update(args.master_setting)
        config = workdir / "master.toml"
        # JSON strings and numbers are valid TOML values.
        config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
        with (workdir / "master.log").open("wb") as log:
            # Under --profile every thread of the master is profiled (bench.profiled_master).
            program = (
                [sys.executable, "-m", "bench.profiled_master", args.profile]
                if getattr(args, "profile", "")
                else master_cli
            )
            process = subprocess.Popen(
                [*program, "run", "--config", str(config)],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return cls(
            process=process,
            address=f"127.0.0.1:{port}",
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            admin_token=admin_token,
            workdir=workdir,
        )

    def stop(self) -> int:
        """SIGTERM, then the exit code; the database files go, the log stays."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            code = self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        for path in self.workdir.glob("hadar.db*"):
            path.unlink()
        return code

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


# -- the load ---------------------------------------------------------------------------------


def job_specs(job_seconds: float, rng: random.Random, count: int = 64) -> list[common_pb2.JobSpec]:
    """Job specs built once: 1 to 4 GPUs, the four built-in workloads, iterations for a run
    of 0.5x to 1.5x `job_seconds` at the fake nodes' pace."""
    return [
        common_pb2.JobSpec(
            name=f"bench-{n}",
            num_gpus=1 + n % 4,
            iterations=max(1, int(job_seconds * rng.uniform(0.5, 1.5) * ITERATIONS_PER_S)),
            workload=common_pb2.WorkloadProgram(name=WORKLOADS[(n // 4) % len(WORKLOADS)]),
        )
        for n in range(count)
    ]


async def _serve(node: FakeNode) -> grpc.aio.Server:
    """`node`'s Worker service on a port of its own (run on the nodes' loop)."""
    server = grpc.aio.server()
    worker_pb2_grpc.add_WorkerServicer_to_server(node, server)  # type: ignore[no-untyped-call]
    node.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    return server


class Load:
    """One run's load generator, on one event loop, and its fake nodes' servers, on a loop
    of their own (see bench.fake_nodes)."""

    def __init__(self, args: argparse.Namespace, master: MasterProcess, rate: float) -> None:
        self.args = args
        self.master = master
        self.rate = rate
        self.loop = asyncio.get_running_loop()
        self.ledger = Ledger()
        self.rng = random.Random(args.seed)
        self.run_id = f"{os.getpid()}-{time.time_ns()}"
        self.timeout = args.rpc_timeout
        self.pending: set[asyncio.Task[Any]] = set()
        self.sending = True
        self.worker_md = (("authorization", f"Bearer {CLUSTER_TOKEN}"),)
        self.admin_md = (("authorization", f"Bearer {master.admin_token}"),)
        self.channels: list[grpc.aio.Channel] = []
        self.nodes: list[FakeNode] = []
        self.node_stubs: dict[str, Any] = {}
        self.servers: list[grpc.aio.Server] = []
        self.node_loop = NodeLoop()
        self.users: list[str] = []
        self.user_md: list[tuple[tuple[str, str], ...]] = []
        self.user_stubs: list[Any] = []
        self.specs = job_specs(args.job_seconds, self.rng)
        self.interval_mismatch: list[float] = []
        self.heartbeats_skipped = 0
        self.watch_events = 0
        self.watch_messages = 0
        self.watch_delays: list[float] = []
        self.batch_watches = not args.unbatched_watches
        self.watch_ended: Counter[str] = Counter()
        self.phases = {phase: HistogramDeltas() for phase in PHASES}
        self.rounds = HistogramDeltas()
        self.lost_counter = math.nan
        self.scrape_errors: Counter[str] = Counter()
        self.rss_peak = math.nan
        # How late the generator's own loop woke from 1 ms sleeps: a stall delays every
        # answer it times (its fake nodes answer the master's pushes on this loop too).
        self.stalls: list[tuple[float, float]] = []

    async def watch_loop(self, stop_at: float) -> None:
        tick = 0.001
        while self.loop.time() < stop_at:
            due = self.loop.time() + tick
            await asyncio.sleep(tick)
            late = self.loop.time() - due
            if late > 0.005:
                self.stalls.append((due, late))

    def channel(self) -> grpc.aio.Channel:
        channel = grpc.aio.insecure_channel(self.master.address, options=CHANNEL_OPTIONS)
        self.channels.append(channel)
        return channel

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self.loop.create_task(coro)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def call(
        self, method: str, fn: Any, request: Any, metadata: Any, due: float
    ) -> Any | None:
        """Sends one call now and records it against its due time; None on an error."""
        self.ledger.sent(method, due, self.loop.time())
        try:
            response = await fn(request, metadata=metadata, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            self.ledger.answered(method, due, self.loop.time(), exc.code().name)
            return None
        self.ledger.answered(method, due, self.loop.time(), OK)
        return response

    # -- setup

    async def setup(self) -> None:
        admin: Any = hadar_pb2_grpc.HadarStub(self.channel())  # type: ignore[no-untyped-call]
        await asyncio.wait_for(self._ready(self.channels[0]), timeout=120)
        for i in range(self.args.users):
            user = f"bench-user-{i}"
            created = await admin.CreateToken(
                hadar_pb2.CreateTokenRequest(user=user, description="control-plane bench"),
                metadata=self.admin_md,
                timeout=30,
            )
            self.users.append(user)
            self.user_md.append((("authorization", f"Bearer {created.token}"),))
            self.user_stubs.append(hadar_pb2_grpc.HadarStub(self.channel()))  # type: ignore[no-untyped-call]
        for i in range(self.args.workers):
            node = FakeNode(
                f"bench-{i:04d}",
                GPU_TYPES[i % len(GPU_TYPES)],
                self.args.gpus_per_worker,
                self._report_exit,
            )
            self.servers.append(await self.node_loop.run(_serve(node)))
            self.nodes.append(node)
            self.node_stubs[node.name] = coordinator_pb2_grpc.CoordinatorStub(self.channel())  # type: ignore[no-untyped-call]

    async def _ready(self, channel: grpc.aio.Channel) -> None:
        while self.master.process.poll() is None:
            try:
                await asyncio.wait_for(channel.channel_ready(), timeout=1.0)
                return
            except TimeoutError:
                continue
        raise RuntimeError(
            f"the master exited ({self.master.process.returncode}):\n{self.master.log_tail()}"
        )

    # -- what nodes send

    async def register(self, node: FakeNode, due: float) -> None:
        if node.registering:
            return
        node.registering = True
        stub = self.node_stubs[node.name]
        response = await self.call(
            "RegisterWorker", stub.RegisterWorker, node.register_request(), self.worker_md, due
        )
        node.registering = False
        if response is None:
            # The agent retries with a backoff.
            if self.sending:
                self.loop.call_later(1.0, self._reregister, node)
            return
        node.registered = True
        self._check_interval(response.heartbeat_interval_s)
        node.stop_refs(list(response.stop), self.loop.time())

    def _reregister(self, node: FakeNode) -> None:
        if self.sending:
            self.spawn(self.register(node, self.loop.time()))

    async def heartbeat(self, node: FakeNode, due: float) -> None:
        if not node.registered:
            self.heartbeats_skipped += 1  # registering: the agent sends no heartbeat meanwhile
            return
        stub = self.node_stubs[node.name]
        request = node.heartbeat_request(self.loop.time())
        response = await self.call("Heartbeat", stub.Heartbeat, request, self.worker_md, due)
        if response is None:
            return
        self._check_interval(response.heartbeat_interval_s)
        node.stop_refs(list(response.stop), self.loop.time())
        if response.reregister and node.registered:
            node.registered = False
            node.reregistered += 1
            self._reregister(node)

    async def progress(self, node: FakeNode, due: float) -> None:
        if not node.registered:
            return
        request = node.progress_request(self.loop.time())
        if request is None:
            return
        stub = self.node_stubs[node.name]
        response = await self.call(
            "ReportProgress", stub.ReportProgress, request, self.worker_md, due
        )
        if response is not None:
            stale = [
                coordinator_pb2.TaskRef(job_id=a.job_id, task_index=a.task_index, lease=a.lease)
                for a in response.acks
                if a.stale
            ]
            node.stop_refs(stale, self.loop.time())

    def _report_exit(self, request: coordinator_pb2.TaskExitedRequest, due: float) -> None:
        # Called on the nodes' loop (a task's end) or this one (a stop the master ordered).
        self.loop.call_soon_threadsafe(self._send_exit, request, due)

    def _send_exit(self, request: coordinator_pb2.TaskExitedRequest, due: float) -> None:
        if self.sending:
            stub = self.node_stubs[request.node]
            self.spawn(self.call("TaskExited", stub.TaskExited, request, self.worker_md, due))

    def _check_interval(self, interval: float) -> None:
        if interval != self.args.heartbeat_interval:
            self.interval_mismatch.append(interval)

    async def submit(self, n: int, due: float) -> None:
        user = n % len(self.users)
        request = hadar_pb2.SubmitJobRequest(
            spec=self.specs[n % len(self.specs)], idempotency_key=f"{self.run_id}-{n}"
        )
        await self.call(
            "SubmitJob", self.user_stubs[user].SubmitJob, request, self.user_md[user], due
        )

    async def watch(self, i: int) -> None:
        """One reader holding a WatchJobs stream on one user's jobs for the whole run."""
        user = i % len(self.users)
        # Batched, as the client library asks: each wake-up's changes in one message.
        stream = self.user_stubs[user].WatchJobs(
            hadar_pb2.WatchJobsRequest(user=self.users[user], batch=self.batch_watches),
            metadata=self.user_md[user],
        )
        try:
            async for answer in stream:
                self.watch_messages += 1
                for update in answer.updates if self.batch_watches else (answer,):
                    self.watch_events += 1
                    if update.HasField("event"):
                        at = update.event.at.ToNanoseconds() / 1e9
                        self.watch_delays.append(time.time() - at)
            self.watch_ended["ended by the master"] += 1
        except grpc.aio.AioRpcError as exc:
            if self.sending:
                self.watch_ended[exc.code().name] += 1
        except asyncio.CancelledError:
            stream.cancel()
            raise

    # -- pacing

    async def pace(
        self, dues: Iterator[tuple[float, int]], fire: Callable[[int, float], None], stop_at: float
    ) -> None:
        """Fires each slot at its due time (at once when already late) until stop_at."""
        for due, member in dues:
            if due >= stop_at:
                return
            await asyncio.sleep(max(0.0, due - self.loop.time()))
            fire(member, due)

    async def scrape(self, stop_at: float) -> None:
        while True:
            await self.scrape_once()
            if self.loop.time() >= stop_at:
                return
            await asyncio.sleep(self.args.scrape_interval)

    async def scrape_once(self) -> None:
        # Read while the master lives: a master that exits during the run keeps its figure.
        with contextlib.suppress(OSError):
            peak = proc_status_mib(self.master.process.pid, "VmHWM")
            if not math.isnan(peak):  # NaN once it has exited (a zombie has no memory)
                self.rss_peak = peak
        url = self.master.metrics_url

        def fetch() -> str:
            with urllib.request.urlopen(url, timeout=30) as answer:
                return bytes(answer.read()).decode()

        try:
            text = await self.loop.run_in_executor(None, fetch)
        except OSError as exc:
            self.scrape_errors[type(exc).__name__] += 1
            return
        samples = parse_samples(text, SCRAPED)
        phases = histogram_series(samples, "hadar_round_phase_seconds")
        for phase, deltas in self.phases.items():
            total, count = phases.get(f'{{phase="{phase}"}}', (0.0, 0.0))
            deltas.update(total, count)
        total, count = histogram_series(samples, "hadar_round_duration_seconds").get("", (0, 0))
        self.rounds.update(total, count)
        self.lost_counter = samples.get(("hadar_nodes_lost_total", ""), math.nan)

    # -- one run

    async def run(self) -> dict[str, Any]:
        args = self.args
        # Before the master has anything to do: the machine's speed alone.
        python_loop = python_loop_s()
        await self.setup()
        pid = self.master.process.pid
        watchers = [self.loop.create_task(self.watch(i)) for i in range(args.watchers)]
        load_average_start = os.getloadavg()
        interval = args.heartbeat_interval
        t0 = self.loop.time() + 0.1
        # The first interval registers the nodes (each at its phase); the load runs after.
        start = t0 + interval
        stop_at = start + args.duration
        n = len(self.nodes)

        def beat(slot: int, due: float) -> None:
            node = self.nodes[slot]
            if due < start:
                self.spawn(self.register(node, due))
            else:
                self.spawn(self.heartbeat(node, due))

        beats = spread(t0, interval, n)
        reports = spread(start, args.progress_interval, n)
        submissions = (
            (due, k) for k, due in enumerate(arrivals(start, self.rate, args.arrivals, self.rng))
        )
        drivers = [
            self.loop.create_task(self.pace(beats, beat, stop_at)),
            self.loop.create_task(
                self.pace(
                    reports, lambda i, due: self.spawn(self.progress(self.nodes[i], due)), stop_at
                )
            ),
            self.loop.create_task(
                self.pace(submissions, lambda k, due: self.spawn(self.submit(k, due)), stop_at)
            ),
            self.loop.create_task(self.scrape(stop_at)),
            self.loop.create_task(self.watch_loop(stop_at)),
        ]
        await asyncio.sleep(max(0.0, start - self.loop.time()))
        cpu_start, own_start, wall_start = (
            proc_cpu_seconds(pid),
            time.process_time(),
            time.monotonic(),
        )
        await asyncio.sleep(max(0.0, stop_at - self.loop.time()))
        if self.master.process.poll() is None:
            await self.scrape_once()
        try:
            cpu = proc_cpu_seconds(pid) - cpu_start
        except OSError:  # it exited: its CPU time is gone with it
            cpu = math.nan
        own_cpu = time.process_time() - own_start
        wall = time.monotonic() - wall_start
        await asyncio.gather(*drivers)
        self.sending = False
        # Calls still in flight get until their deadline; what is left then is unanswered.
        if self.pending:
            await asyncio.wait(set(self.pending), timeout=self.timeout + 5)
        for task in list(self.pending):
            task.cancel()
        # The readers hang up first: each stream holds one of the master's RPC threads.
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await self.scrape_once()
        nodes = await self._admin_call("ListNodes", hadar_pb2.ListNodesRequest())
        status = await self._admin_call("GetClusterStatus", hadar_pb2.GetClusterStatusRequest())
        for channel in self.channels:
            await channel.close(None)
        for server in self.servers:
            await self.node_loop.run(server.stop(0))
        self.node_loop.close()
        if args.timeline:
            self.write_timeline(Path(args.timeline))
        return self.report(
            nodes=nodes,
            status=status,
            cpu=cpu,
            own_cpu=own_cpu,
            wall=wall,
            load_average=(load_average_start, os.getloadavg()),
            python_loop=python_loop,
        )

    def wall_offset(self) -> float:
        """Unix time minus this loop's clock: a due time plus it lines up with the master's
        log."""
        return time.time() - self.loop.time()

    def by_round_phase(self) -> dict[str, dict[str, dict[str, float]]]:
        """Heartbeat and SubmitJob latencies by the round phase under way when each was due
        (from the master's log), to tell which part of a round holds calls up."""
        try:
            with self.master.log.open() as log:
                phases = round_phases(log)
        except OSError:
            return {}
        offset = self.wall_offset()
        out = {}
        for method in ("Heartbeat", "SubmitJob"):
            stats = self.ledger.methods.get(method)
            if stats is not None:
                calls = zip((d + offset for d in stats.answered_due), stats.latencies, strict=True)
                out[method] = latency_by_phase(calls, phases, SLOW_S)
        return out

    def write_timeline(self, path: Path) -> None:
        """Every answered call as a JSON line: method, due time (Unix seconds, to line up
        with the master's log) and latency in ms."""
        offset = self.wall_offset()
        with path.open("w") as out:
            for method, stats in sorted(self.ledger.methods.items()):
                for due, latency in zip(stats.answered_due, stats.latencies, strict=True):
                    out.write(
                        json.dumps({"rpc": method, "due": due + offset, "ms": latency * 1e3}) + "\n"
                    )
            for due, late in self.stalls:
                out.write(
                    json.dumps({"rpc": "generator stall", "due": due + offset, "ms": late * 1e3})
                    + "\n"
                )

    async def _admin_call(self, method: str, request: Any) -> Any:
        stub: Any = hadar_pb2_grpc.HadarStub(self.channels[0])  # type: ignore[no-untyped-call]
        try:
            return await getattr(stub, method)(request, metadata=self.admin_md, timeout=60)
        except grpc.aio.AioRpcError as exc:
            print(f"{method} at the end failed: {exc.code().name}", file=sys.stderr)
            return None

    def report(
        self,
        *,
        nodes: hadar_pb2.ListNodesResponse | None,
        status: hadar_pb2.GetClusterStatusResponse | None,
        cpu: float,
        own_cpu: float,
        wall: float,
        load_average: tuple[tuple[float, ...], tuple[float, ...]],
        python_loop: float,
    ) -> dict[str, Any]:
        args = self.args
        states = Counter(
            common_pb2.NodeState.Name(node.state).removeprefix("NODE_STATE_").lower()
            for node in (nodes.nodes if nodes is not None else [])
        )
        jobs = {
            common_pb2.JobState.Name(c.state).removeprefix("JOB_STATE_").lower(): c.count
            for c in (status.jobs if status is not None else [])
            if c.count
        }
        lags = self.ledger.lags()
        ms = 1e3
        return {
            "config": {
                "workers": args.workers,
                "gpus_per_worker": args.gpus_per_worker,
                "heartbeat_interval_s": args.heartbeat_interval,
                "progress_interval_s": args.progress_interval,
                "submit_rate": self.rate,
                "arrivals": args.arrivals,
                "users": args.users,
                "watchers": args.watchers,
                "duration_s": args.duration,
                "round_seconds": args.round_seconds,
                "policy": args.policy,
                "database": "postgresql" if args.database.startswith("postgres") else "sqlite",
                "grpc_threads": args.grpc_threads or "default",
                "log_level": args.log_level,
                "job_seconds": args.job_seconds,
            },
            "rpcs": {name: s.summary() for name, s in sorted(self.ledger.methods.items())},
            "watch": {
                "streams": args.watchers,
                "messages": self.watch_messages,
                "updates": self.watch_events,
                "batched": self.batch_watches,
                "event_delay_p50_ms": percentile(self.watch_delays, 0.5) * ms,
                "event_delay_p99_ms": percentile(self.watch_delays, 0.99) * ms,
                "event_delay_max_ms": max(self.watch_delays, default=math.nan) * ms,
                "ended_early": dict(self.watch_ended),
            },
            "rounds": {
                "duration": self.rounds.summary(),
                "phases": {phase: d.summary() for phase, d in self.phases.items()},
            },
            "by_round_phase": self.by_round_phase(),
            "nodes": {
                "registered": sum(states.values()),
                "by_state": dict(states),
                "lost_counter": self.lost_counter,
                "told_to_register_again": sum(n.reregistered for n in self.nodes),
                "heartbeats_skipped_unregistered": self.heartbeats_skipped,
                "interval_mismatches": len(self.interval_mismatch),
            },
            "pushes": {
                "calls": sum(n.pushes for n in self.nodes),
                "assignments": sum(n.assignments for n in self.nodes),
            },
            "jobs": jobs,
            "master": {
                "cpu_s": cpu,
                "wall_s": wall,
                "cpu_percent": 100 * cpu / wall,
                "rss_peak_mib": self.rss_peak,
                # Set when the master exited before the load ended (it should not).
                "exited_during_run": self.master.process.poll(),
                "log": str(self.master.log),
            },
            "generator": {
                "cpu_s": own_cpu,
                "cpu_percent": 100 * own_cpu / wall,
                "lag_p50_ms": percentile(lags, 0.5) * ms,
                "lag_p99_ms": percentile(lags, 0.99) * ms,
                "lag_max_ms": max(lags, default=math.nan) * ms,
                "stalls_over_5ms": len(self.stalls),
                "stall_s": sum(late for _, late in self.stalls),
                "stall_max_ms": max((late for _, late in self.stalls), default=0.0) * ms,
            },
            "scrape_errors": dict(self.scrape_errors),
            "machine": {
                "cores": os.cpu_count(),
                "load_average_start": list(load_average[0]),
                "load_average_end": list(load_average[1]),
                "python_loop_s": python_loop,
            },
            "errors": self.ledger.errors() + sum(self.watch_ended.values()),
        }


# -- sessions ---------------------------------------------------------------------------------


@contextlib.contextmanager
def database_for_run(url: str) -> Iterator[str]:
    """A fresh database for one run: a temporary SQLite file (empty URL) or a throwaway
    schema of the PostgreSQL database named (runs never share tables)."""
    if not url.startswith("postgres"):
        yield url
        return
    from store.testing import fresh_postgres_schema  # setup only: the load never uses store

    with fresh_postgres_schema(url) as fresh:
        yield fresh


async def load(args: argparse.Namespace, master: MasterProcess, rate: float) -> dict[str, Any]:
    return await Load(args, master, rate).run()


def run_session(args: argparse.Namespace, rate: float) -> dict[str, Any]:
    with database_for_run(args.database) as database:
        master = MasterProcess.start(args, database)
        print(f"master log: {master.log}", file=sys.stderr)
        try:
            result = asyncio.run(load(args, master, rate))
        finally:
            code = master.stop()
        result["master"]["exit_code"] = code
        if code != 0:
            result["errors"] += 1
        return result


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.1f}"


def print_report(r: dict[str, Any]) -> None:
    c = r["config"]
    print(
        f"control plane, open loop: {c['workers']} workers x {c['gpus_per_worker']} GPUs, "
        f"heartbeat every {c['heartbeat_interval_s']:g} s, progress every "
        f"{c['progress_interval_s']:g} s, {c['submit_rate']:g} submissions/s ({c['arrivals']}, "
        f"{c['users']} users), {c['watchers']} WatchJobs streams, {c['duration_s']:g} s, "
        f"policy {c['policy']}, rounds every {c['round_seconds']:g} s, {c['database']}, "
        f"RPC threads {c['grpc_threads']}, master log level {c['log_level']}"
    )
    print("latency = answer time - due time (OK calls); lag = send time - due time")
    header = f"{'rpc':<16}{'calls':>8}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}"
    print(f"{header}{'lag p99':>9}  errors")
    for name, s in r["rpcs"].items():
        errors = ", ".join(f"{k} {v}" for k, v in s["errors"].items())
        if s["unanswered"]:
            errors += (", " if errors else "") + f"unanswered {s['unanswered']}"
        print(
            f"{name:<16}{s['calls']:>8}{_ms(s['p50_ms']):>10}{_ms(s['p99_ms']):>10}"
            f"{_ms(s['max_ms']):>10}{_ms(s['lag_p99_ms']):>9}  {errors or 0}"
        )
    w = r["watch"]
    print(
        f"WatchJobs: {w['streams']} streams{'' if w.get('batched') else ' (unbatched)'}, "
        f"{w.get('updates', w['messages'])} changes in {w['messages']} messages, event to "
        "reader p50 "
        f"{_ms(w['event_delay_p50_ms'])} ms, p99 {_ms(w['event_delay_p99_ms'])} ms, max "
        f"{_ms(w['event_delay_max_ms'])} ms; ended early: {w['ended_early'] or 0}"
    )
    rounds = r["rounds"]["duration"]
    print(
        f"rounds: {rounds['count']} (exact per-round figures for {rounds['exact']}), duration "
        f"p50 {_ms(rounds['p50_ms'])} ms, max {_ms(rounds['max_ms'])} ms; phases p50/max ms: "
        + ", ".join(
            f"{p} {_ms(s['p50_ms'])}/{_ms(s['max_ms'])}" for p, s in r["rounds"]["phases"].items()
        )
    )
    n = r["nodes"]
    print(
        f"nodes: {n['registered']} registered, by state {n['by_state']}, lost (master's counter) "
        f"{n['lost_counter']:g}, told to register again {n['told_to_register_again']}, "
        f"heartbeats not due while (re)registering {n['heartbeats_skipped_unregistered']}"
        + (
            f", heartbeat interval mismatches {n['interval_mismatches']}"
            if n["interval_mismatches"]
            else ""
        )
    )
    p = r["pushes"]
    print(f"pushes: {p['calls']} ApplyAssignments calls, {p['assignments']} assignments")
    print(f"jobs at the end: {r['jobs']}")
    m = r["master"]
    if m["exited_during_run"] is not None:
        print(
            f"THE MASTER EXITED DURING THE RUN with code {m['exited_during_run']}: see {m['log']}"
        )
    print(
        f"master: CPU {m['cpu_s']:.1f} s in {m['wall_s']:.1f} s ({m['cpu_percent']:.0f}% of one "
        f"core), RSS peak {m['rss_peak_mib']:.0f} MiB, exit code after SIGTERM "
        f"{m.get('exit_code', '?')}"
    )
    g = r["generator"]
    print(
        f"generator (fake nodes included): CPU {g['cpu_s']:.1f} s ({g['cpu_percent']:.0f}% of one "
        f"core); send lag p50 {_ms(g['lag_p50_ms'])} ms, p99 {_ms(g['lag_p99_ms'])} ms, max "
        f"{_ms(g['lag_max_ms'])} ms; its loop stalled past 5 ms {g['stalls_over_5ms']} times, "
        f"{g['stall_s']:.2f} s in all, at most {_ms(g['stall_max_ms'])} ms"
    )
    for method, phases in r["by_round_phase"].items():
        print(
            f"{method} by round phase when due (calls, p50/p99 ms, share over "
            f"{SLOW_S * 1e3:g} ms): "
            + "; ".join(
                f"{phase} {p['calls']:.0f}, {_ms(p['p50_ms'])}/{_ms(p['p99_ms'])}, "
                f"{p['slow_share']:.0%}"
                for phase, p in phases.items()
            )
        )
    mach = r["machine"]
    print(
        f"machine: {mach['cores']} cores, a {LOOP_STEPS:,}-step Python loop in "
        f"{mach['python_loop_s']:.2f} s before the load, load average at start "
        f"{'/'.join(f'{x:.1f}' for x in mach['load_average_start'])}, at end "
        f"{'/'.join(f'{x:.1f}' for x in mach['load_average_end'])}"
    )
    if r["scrape_errors"]:
        print(f"metrics scrapes failed: {r['scrape_errors']}")
    print(f"errors: {r['errors']}")


def find_max_rate(args: argparse.Namespace) -> dict[str, Any]:
    """Runs at rising submission rates (a fresh master and database each) and returns the
    highest whose SubmitJob p99 stayed under the target with no errors."""
    steps = []
    best = 0.0
    for rate in args.rates:
        print(f"-- {rate:g} submissions/s", file=sys.stderr)
        result = run_session(args, rate)
        submit = result["rpcs"].get("SubmitJob", {})
        ok = result["errors"] == 0 and submit.get("p99_ms", math.inf) < args.target_p99_ms
        steps.append(
            {
                "rate": rate,
                "passed": ok,
                "submit_p99_ms": submit.get("p99_ms"),
                "heartbeat_p99_ms": result["rpcs"].get("Heartbeat", {}).get("p99_ms"),
                "errors": result["errors"],
                "generator_lag_p99_ms": result["generator"]["lag_p99_ms"],
                "master_cpu_percent": result["master"]["cpu_percent"],
                "load_average_end": result["machine"]["load_average_end"],
            }
        )
        if not args.json:
            print_report(result)
        if not ok:
            break
        best = rate
    return {"target_p99_ms": args.target_p99_ms, "max_rate": best, "steps": steps}


async def list_jobs_figures(args: argparse.Namespace, master: MasterProcess) -> dict[str, Any]:
    """Queues `args.list_jobs` jobs (no workers: they all stay PENDING), then times reading
    all of them with ListJobs (pages of 1,000, the largest allowed), one listing at a time."""
    channel = grpc.aio.insecure_channel(master.address)
    stub: Any = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
    md = (("authorization", f"Bearer {master.admin_token}"),)
    await asyncio.wait_for(channel.channel_ready(), timeout=120)
    specs = job_specs(args.job_seconds, random.Random(args.seed))
    # Below the master's calls-in-flight cap for one user (max_calls_per_user, 8 by default).
    gate = asyncio.Semaphore(4)

    async def submit(n: int) -> None:
        async with gate:
            await stub.SubmitJob(
                hadar_pb2.SubmitJobRequest(spec=specs[n % len(specs)], idempotency_key=f"l{n}"),
                metadata=md,
                timeout=60,
            )

    await asyncio.gather(*(submit(n) for n in range(args.list_jobs)))
    timings = []
    listed = 0
    for _ in range(args.list_repeats):
        started = time.perf_counter()
        token, listed = "", 0
        while True:
            page = await stub.ListJobs(
                hadar_pb2.ListJobsRequest(page_size=1000, page_token=token),
                metadata=md,
                timeout=120,
            )
            listed += len(page.jobs)
            token = page.next_page_token
            if not token:
                break
        timings.append(time.perf_counter() - started)
    await channel.close(None)
    return {
        "jobs": listed,
        "listings": len(timings),
        "p50_ms": percentile(timings, 0.5) * 1e3,
        "max_ms": max(timings) * 1e3,
        "load_average": list(os.getloadavg()),
    }


def list_jobs(args: argparse.Namespace) -> dict[str, Any]:
    with database_for_run(args.database) as database:
        master = MasterProcess.start(args, database)
        try:
            result = asyncio.run(list_jobs_figures(args, master))
        finally:
            result_code = master.stop()
        result["master_exit_code"] = result_code
        return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=int, help="fake nodes (200; 50 with --find-max-rate)")
    parser.add_argument("--gpus-per-worker", type=int, default=4)
    parser.add_argument("--heartbeat-interval", type=float, default=1.0, help="seconds")
    parser.add_argument(
        "--heartbeat-timeout", type=float, help="master's heartbeat_timeout_s (its default: 30)"
    )
    parser.add_argument(
        "--progress-interval", type=float, default=5.0, help="seconds (the agent's default)"
    )
    parser.add_argument("--submit-rate", type=float, default=100.0, help="submissions a second")
    parser.add_argument("--arrivals", choices=["poisson", "uniform"], default="poisson")
    parser.add_argument("--users", type=int, default=8, help="submitting users, a token each")
    parser.add_argument("--watchers", type=int, default=20, help="WatchJobs streams held open")
    parser.add_argument(
        "--unbatched-watches",
        action="store_true",
        help="watch one change a message (WatchJobs without batch), as clients before it did",
    )
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--job-seconds", type=float, default=60.0, help="mean job run time")
    parser.add_argument("--round-seconds", type=float, default=10.0)
    parser.add_argument(
        "--master-setting",
        type=_master_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one of the master's settings, VALUE as JSON (e.g. early_round_spacing=0); repeatable",
    )
    parser.add_argument("--policy", default="fifo")
    parser.add_argument("--grpc-threads", type=int, help="master's grpc_threads (its default)")
    parser.add_argument("--log-level", default="info", help="master's (its default: info)")
    parser.add_argument(
        "--database",
        default="",
        help="default: a temporary SQLite file; a PostgreSQL URL gets a throwaway schema",
    )
    parser.add_argument("--rpc-timeout", type=float, default=30.0, help="deadline of each call")
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=5.0,
        help="metrics, seconds (a scrape reads the store; Prometheus: every 15 s by default)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--profile", default="", help="write the master's cProfile stats (every thread) here"
    )
    parser.add_argument(
        "--timeline",
        default="",
        help="write every answered call (method, due time, latency) here as JSON lines",
    )
    parser.add_argument(
        "--find-max-rate",
        action="store_true",
        help="step the submission rate up; report the highest with SubmitJob p99 < target",
    )
    parser.add_argument(
        "--rates",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[10.0, 20.0, 35.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0],
        help="comma-separated submission rates for --find-max-rate",
    )
    parser.add_argument("--step-duration", type=float, default=30.0, help="seconds per rate")
    parser.add_argument("--target-p99-ms", type=float, default=100.0)
    parser.add_argument(
        "--list-jobs",
        type=int,
        default=0,
        metavar="N",
        help="instead of the load: queue N jobs and time ListJobs of all of them",
    )
    parser.add_argument("--list-repeats", type=int, default=7)
    args = parser.parse_args(argv)
    if args.workers is None:
        args.workers = 50 if args.find_max_rate else 200
    if args.find_max_rate:
        args.duration = args.step_duration
    checks = [
        (args.workers >= 1, "--workers must be >= 1"),
        (args.gpus_per_worker >= 1, "--gpus-per-worker must be >= 1"),
        (args.heartbeat_interval > 0, "--heartbeat-interval must be > 0"),
        (args.progress_interval > 0, "--progress-interval must be > 0"),
        (args.submit_rate > 0, "--submit-rate must be > 0"),
        (args.users >= 1, "--users must be >= 1"),
        (args.watchers >= 0, "--watchers must be >= 0"),
        (args.duration > 0, "--duration must be > 0"),
        (args.job_seconds > 0, "--job-seconds must be > 0"),
        (args.rpc_timeout > 0, "--rpc-timeout must be > 0"),
        (args.scrape_interval > 0, "--scrape-interval must be > 0"),
        (all(r > 0 for r in args.rates), "--rates must all be > 0"),
        (args.list_jobs >= 0, "--list-jobs must be >= 0"),
        (args.list_repeats >= 1, "--list-repeats must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            parser.error(message)
    return args


def _master_setting(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list_jobs:
        result = list_jobs(args)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(
                f"ListJobs of all {result['jobs']} queued jobs (pages of 1,000), "
                f"{result['listings']} listings one at a time: p50 {result['p50_ms']:.0f} ms, "
                f"max {result['max_ms']:.0f} ms; load average "
                f"{'/'.join(f'{x:.1f}' for x in result['load_average'])}"
            )
        return 0 if result["master_exit_code"] == 0 else 1
    if args.find_max_rate:
        found = find_max_rate(args)
        if args.json:
            print(json.dumps(found, indent=2))
        else:
            for step in found["steps"]:
                print(
                    f"{step['rate']:>7g}/s  SubmitJob p99 {_ms(step['submit_p99_ms'] or math.nan)}"
                    f" ms, Heartbeat p99 {_ms(step['heartbeat_p99_ms'] or math.nan)} ms, errors "
                    f"{step['errors']}, generator lag p99 {_ms(step['generator_lag_p99_ms'])} ms, "
                    f"master CPU {step['master_cpu_percent']:.0f}%: "
                    + ("passed" if step["passed"] else "failed")
                )
            print(
                f"highest submission rate with SubmitJob p99 < {args.target_p99_ms:g} ms and no "
                f"errors at {args.workers} workers: {found['max_rate']:g}/s"
            )
        return 0
    result = run_session(args, args.submit_rate)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
