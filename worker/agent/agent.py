"""The worker agent: wires GPUs, the supervisor, the master connection and the gRPC server.

Two threads do the work besides gRPC's own: the supervision thread polls the task processes
(every 0.1 s), and the master thread registers (retrying with exponential backoff and
jitter), heartbeats, relays progress in batches and sends exit reports until acknowledged.
A master that restarts or forgets the node (``reregister``) makes the master thread register
again with the tasks still running; tasks keep running meanwhile. An agent that starts on
the state directory of one that died adopts the tasks it left running.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import grpc
import structlog
from google.protobuf.timestamp_pb2 import Timestamp

from protos.hadar.v1 import common_pb2, coordinator_pb2, worker_pb2, worker_pb2_grpc
from worker.agent.clock import Clock, SystemClock
from worker.agent.fence import EpochFence
from worker.agent.master import GrpcMasterClient, MasterClient, MasterError
from worker.agent.processes import ProcessLauncher, SubprocessLauncher
from worker.agent.progressfile import ProgressTail
from worker.agent.service import TokenInterceptor, WorkerService
from worker.agent.state import RunningTaskRecord, StateStore
from worker.agent.supervisor import Supervisor, SupervisorConfig
from worker.agent.systemd import NOTIFY_VARIABLES
from worker.agent.users import SystemUsers, UserDirectory
from worker.gpus import GpuInfo, GpuProvider
from worker.settings import (
    ENV_PREFIX,
    TOKEN_REQUIRED,
    SettingsError,
    WorkerSettings,
    parse_host_port,
)

log = structlog.get_logger("hadar.worker")

SUPERVISE_INTERVAL_S = 0.1
PRUNE_INTERVAL_S = 3600.0
_EXIT_KINDS = {
    "completed": common_pb2.EXIT_KIND_COMPLETED,
    "lease_done": common_pb2.EXIT_KIND_LEASE_DONE,
    "stopped": common_pb2.EXIT_KIND_STOPPED,
}


def agent_version() -> str:
    try:
        return metadata.version("hadar")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def available_workloads() -> frozenset[str] | None:
    """Names of the built-in workloads this worker can run; None when they cannot be listed
    (then the agent tries any name and the job's process reports an unknown one)."""
    try:
        from worker.workloads.registry import WORKLOADS
    except ImportError:
        return None
    return frozenset(WORKLOADS)


def gpu_to_proto(gpu: GpuInfo, utilization: float | None = None) -> common_pb2.Gpu:
    message = common_pb2.Gpu(
        index=gpu.index,
        type=gpu.type,
        memory_bytes=gpu.memory_bytes,
        device_name=gpu.device_name,
        uuid=gpu.uuid,
        health=common_pb2.GPU_HEALTH_HEALTHY if gpu.healthy else common_pb2.GPU_HEALTH_UNHEALTHY,
        fake=gpu.fake,
    )
    if utilization is not None:
        message.utilization = utilization
    return message


def job_base_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The agent's environment minus its own settings (the cluster token must not leak) and
    systemd's notification variables (a job must not speak for the agent)."""
    env = dict(os.environ if environ is None else environ)
    return {
        k: v for k, v in env.items() if not k.startswith(ENV_PREFIX) and k not in NOTIFY_VARIABLES
    }


class JitterSource(Protocol):
    """Where registration backoff draws its jitter (random.Random in production)."""

    def uniform(self, a: float, b: float) -> float: ...


@dataclass
class _Connection:
    registered: bool = False
    connected: bool = False
    heartbeat_interval_s: float = 10.0
    last_error: str = ""
    registrations: int = 0
    # Delays waited between failed registrations since the last success.
    backoffs: list[float] = field(default_factory=list)


class WorkerAgent:
    """One node's agent. ``start()`` binds the Worker service and begins talking to the master;
    ``stop()`` stops tasks (gracefully unless told otherwise), flushes exit reports, shuts down.
    """

    def __init__(
        self,
        settings: WorkerSettings,
        gpus: GpuProvider,
        *,
        master: MasterClient | None = None,
        launcher: ProcessLauncher | None = None,
        clock: Clock | None = None,
        users: UserDirectory | None = None,
        workloads: Iterable[str] | None = None,
        rng: JitterSource | None = None,
    ) -> None:
        if not settings.token:
            # The Worker service starts and stops processes: it never serves open.
            raise SettingsError(TOKEN_REQUIRED)
        self.settings = settings
        self.node = settings.node_name()
        self._gpu_provider = gpus
        self._gpus = gpus.discover()
        self._master = master or GrpcMasterClient(
            settings.master, settings.token, settings.rpc_timeout_s, settings.master_credentials()
        )
        self._clock = clock or SystemClock()
        self._rng: JitterSource = rng or random.Random()
        self._state = StateStore(settings.state_dir)
        self.fence = EpochFence(settings.state_dir)
        for warning in (*self._state.warnings, *self.fence.warnings):
            log.warning("state_file_corrupt", detail=warning)
        known = frozenset(workloads) if workloads is not None else available_workloads()
        self._workloads = known
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads_stop = threading.Event()
        self.supervisor = Supervisor(
            SupervisorConfig(
                node=self.node,
                state_dir=settings.state_dir,
                jobs_dir=settings.resolved_jobs_dir(),
                checkpoint_root=settings.resolved_checkpoint_dir(),
                python=settings.python or sys.executable,
                grace_s=settings.grace_s,
                checkpoint_interval_s=settings.checkpoint_interval_s,
                failure_tail_lines=settings.failure_tail_lines,
                allow_root_jobs=settings.allow_root_jobs,
                workloads=known,
                base_env=job_base_env(),
            ),
            self._gpus,
            launcher or SubprocessLauncher(),
            self._clock,
            self._state,
            users or SystemUsers(),
            on_exit=self._wake.set,
            master_state=self._master_state,
        )
        self._conn = _Connection(heartbeat_interval_s=settings.heartbeat_interval_s)
        self._conn_lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._threads: list[threading.Thread] = []
        self._started_at = Timestamp()
        # When the supervision loop last completed a pass (monotonic), for the watchdog.
        self._supervised_at = time.monotonic()
        self.port = 0
        self.address = ""

    # -- life

    def start(self) -> None:
        self._started_at.FromSeconds(int(time.time()))
        self._recover_tasks()
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="worker-rpc"),
            interceptors=[TokenInterceptor(self.settings.token)],
            options=self.settings.server_options(),
        )
        worker_pb2_grpc.add_WorkerServicer_to_server(  # type: ignore[no-untyped-call]
            WorkerService(self, self._stopping), server
        )
        host, port = parse_host_port(self.settings.listen, "listen")
        bind = f"[{host}]" if ":" in host else host
        credentials = self.settings.server_credentials()
        self.port = (
            server.add_secure_port(f"{bind}:{port}", credentials)
            if credentials is not None
            else server.add_insecure_port(f"{bind}:{port}")
        )
        if self.port == 0:
            raise OSError(f"cannot listen on {self.settings.listen}")
        server.start()
        self._server = server
        if self.settings.advertise:
            self.address = self.settings.advertise
        else:
            public = socket.getfqdn() if host in ("0.0.0.0", "::", "") else host
            self.address = f"{public}:{self.port}"
        log.info("worker_listening", node=self.node, address=self.address, gpus=len(self._gpus))
        for name, target in (("supervise", self._supervise_loop), ("master", self._master_loop)):
            thread = threading.Thread(target=target, name=f"worker-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, stop_tasks: bool = True, grace_s: float | None = None) -> None:
        """Shuts down. With stop_tasks, asks tasks to checkpoint and waits for their exits
        (and a last attempt to report them); without, leaves them running for the next agent
        on this state directory to adopt (a restart, or a test of a crashed agent)."""
        if stop_tasks and self._threads:
            grace = grace_s if grace_s is not None else self.settings.grace_s
            self.supervisor.stop_all(graceful=True, grace_s=grace, reason="worker shutting down")
            deadline = time.monotonic() + grace + 5.0
            while self.supervisor.running_keys() and time.monotonic() < deadline:
                time.sleep(0.05)
            self._wake.set()
            deadline = time.monotonic() + min(2.0, self.settings.rpc_timeout_s)
            while self._state.pending_exits() and self.connected and time.monotonic() < deadline:
                time.sleep(0.05)
        self._stopping.set()
        self._threads_stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=self.settings.rpc_timeout_s + 5.0)
        self._threads.clear()
        if self._server is not None:
            self._server.stop(grace=1.0).wait()
            self._server = None
        self._master.close()

    # -- what the service calls

    def apply(self, assignment: worker_pb2.TaskAssignment) -> worker_pb2.AssignmentResult:
        result = self.supervisor.apply(assignment)
        log.info(
            "assignment",
            job=assignment.job_id,
            task=assignment.task_index,
            lease=assignment.lease,
            action=worker_pb2.AssignmentAction.Name(assignment.action),
            outcome=worker_pb2.AssignmentOutcome.Name(result.outcome),
            message=result.message,
        )
        return result

    def stop_task(
        self,
        job_id: int,
        lease: int,
        graceful: bool,
        grace_s: float,
        reason: str,
        *,
        note: str = "",
        resumes: bool = False,
    ) -> bool:
        log.info("stop_task", job=job_id, lease=lease, graceful=graceful, reason=reason)
        return self.supervisor.stop(
            job_id,
            lease=lease,
            graceful=graceful,
            grace_s=grace_s,
            reason=reason,
            note=note,
            resumes=resumes,
        )

    def status(self) -> worker_pb2.GetWorkerStatusResponse:
        utilization = self._gpu_provider.utilization()
        return worker_pb2.GetWorkerStatusResponse(
            node=self.node,
            gpus=[gpu_to_proto(g, utilization.get(g.index)) for g in self._gpus],
            tasks=self.supervisor.snapshot(),
            agent_version=agent_version(),
            started_at=self._started_at,
            master_address=self.settings.master,
            connected=self.connected,
        )

    # -- connection state, for callers and tests

    def _master_state(self) -> str:
        """Why the master may not have renewed a lease, for the reason a task stops with;
        empty while the master answers."""
        with self._conn_lock:
            if self._conn.connected:
                return ""
            error = self._conn.last_error
        detail = error.strip().splitlines()[0][:200] if error.strip() else ""
        return "the master was unreachable" + (f" ({detail})" if detail else "")

    @property
    def connected(self) -> bool:
        with self._conn_lock:
            return self._conn.connected

    @property
    def registered(self) -> bool:
        with self._conn_lock:
            return self._conn.registered

    @property
    def registrations(self) -> int:
        with self._conn_lock:
            return self._conn.registrations

    @property
    def backoffs(self) -> list[float]:
        """Delays waited between the failed registrations since the last success."""
        with self._conn_lock:
            return list(self._conn.backoffs)

    def pending_exits(self) -> list[coordinator_pb2.TaskExitedRequest]:
        return self._state.pending_exits()

    @property
    def supervised_at(self) -> float:
        """time.monotonic() of the supervision loop's last completed pass."""
        return self._supervised_at

    def wait_registered(self, timeout_s: float, at_least: int = 1) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.registered and self.registrations >= at_least:
                return True
            time.sleep(0.02)
        return False

    # -- supervision thread

    def _supervise_loop(self) -> None:
        next_prune = 0.0
        while not self._threads_stop.is_set():
            try:
                self.supervisor.poll()
                if time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + PRUNE_INTERVAL_S
                    removed = self.supervisor.prune_task_dirs(
                        self.settings.log_retention_days * 86_400, time.time()
                    )
                    if removed:
                        log.info("task_logs_pruned", count=len(removed))
            except Exception:
                log.exception("supervise_failed")
            else:
                self._supervised_at = time.monotonic()
            self._threads_stop.wait(SUPERVISE_INTERVAL_S)

    # -- master thread

    def _master_loop(self) -> None:
        backoff = self.settings.register_backoff_initial_s
        next_heartbeat = 0.0
        next_progress = 0.0
        while not self._threads_stop.is_set():
            self._wake.clear()
            if not self.registered:
                if self._register():
                    backoff = self.settings.register_backoff_initial_s
                    next_heartbeat = time.monotonic() + self._heartbeat_interval()
                    next_progress = 0.0
                else:
                    delay = min(backoff, self.settings.register_backoff_max_s)
                    delay *= self._rng.uniform(0.5, 1.5)
                    with self._conn_lock:
                        self._conn.backoffs.append(delay)
                    backoff = min(backoff * 2, self.settings.register_backoff_max_s)
                    self._threads_stop.wait(delay)
                    continue
            now = time.monotonic()
            if now >= next_heartbeat:
                self._heartbeat()
                next_heartbeat = time.monotonic() + self._heartbeat_interval()
                if not self.registered:
                    continue
            if now >= next_progress:
                if not self._relay_progress():
                    continue
                next_progress = time.monotonic() + self.settings.progress_interval_s
            if not self._flush_exits():
                continue
            wait = max(0.0, min(next_heartbeat, next_progress) - time.monotonic())
            self._wake.wait(min(wait, 1.0))

    def _heartbeat_interval(self) -> float:
        with self._conn_lock:
            return self._conn.heartbeat_interval_s

    def _lost(self, error: MasterError, during: str) -> None:
        with self._conn_lock:
            was = self._conn.connected
            self._conn.connected = False
            self._conn.registered = False
            self._conn.last_error = str(error)
        if was:
            log.warning("master_lost", during=during, error=str(error))

    def _register(self) -> bool:
        tasks = self.supervisor.snapshot()
        # Read after the snapshot: the supervisor forgets a task and records its exit in one
        # step under its lock, so a task missing from the snapshot whose exit the master has
        # not answered is among these, and the master does not take it for lost.
        ended = [
            coordinator_pb2.TaskRef(job_id=r.job_id, task_index=r.task_index, lease=r.lease)
            for r in self._state.pending_exits()
        ]
        request = coordinator_pb2.RegisterWorkerRequest(
            node=self.node,
            address=self.address,
            gpus=[gpu_to_proto(g) for g in self._refresh_gpus()],
            agent_version=agent_version(),
            workloads=sorted(self._workloads or ()),
            tasks=tasks,
            ended=ended,
        )
        try:
            response = self._master.register(request)
        except MasterError as exc:
            with self._conn_lock:
                self._conn.connected = False
                self._conn.last_error = str(exc)
            log.info("register_failed", master=self.settings.master, error=str(exc))
            return False
        with self._conn_lock:
            self._conn.registered = True
            self._conn.connected = True
            self._conn.registrations += 1
            self._conn.backoffs.clear()
            if response.heartbeat_interval_s > 0:
                self._conn.heartbeat_interval_s = response.heartbeat_interval_s
        for ref in response.stop:
            self.supervisor.stop(ref.job_id, lease=ref.lease, reason="fenced by the master")
        log.info(
            "registered",
            master=self.settings.master,
            tasks=len(request.tasks),
            ended=len(request.ended),
            keep=len(response.keep),
            stop=len(response.stop),
        )
        return True

    def _refresh_gpus(self) -> list[GpuInfo]:
        try:
            gpus = self._gpu_provider.discover()
        except Exception as exc:
            log.warning("gpu_discovery_failed", error=str(exc))
            return self._gpus
        self._gpus = gpus
        self.supervisor.update_gpus(gpus)
        return gpus

    def _heartbeat(self) -> None:
        utilization = self._gpu_provider.utilization()
        request = coordinator_pb2.HeartbeatRequest(
            node=self.node,
            tasks=self.supervisor.snapshot(),
            gpus=[gpu_to_proto(g, utilization.get(g.index)) for g in self._refresh_gpus()],
        )
        try:
            response = self._master.heartbeat(request)
        except MasterError as exc:
            self._lost(exc, "heartbeat")
            return
        with self._conn_lock:
            self._conn.connected = True
            if response.heartbeat_interval_s > 0:
                self._conn.heartbeat_interval_s = response.heartbeat_interval_s
            if response.reregister:
                self._conn.registered = False
        for ref in response.stop:
            self.supervisor.stop(ref.job_id, lease=ref.lease, reason="stale lease (heartbeat)")
        if response.reregister:
            log.info("reregister_requested")

    def _relay_progress(self) -> bool:
        reports = self.supervisor.collect_progress()
        if not reports:
            return True
        try:
            response = self._master.report_progress(
                coordinator_pb2.ReportProgressRequest(node=self.node, reports=reports)
            )
        except MasterError as exc:
            if exc.permanent:
                # Newer records replace these; resending the refused batch cannot help.
                log.error("progress_refused", error=str(exc))
                self.supervisor.mark_reported(reports)
                return True
            if exc.busy:
                # The master serves as many reports as it may: these go with the next ones.
                log.info("progress_deferred", error=str(exc))
                return True
            self._lost(exc, "progress")
            return False
        self.supervisor.mark_reported(reports)
        for ack in response.acks:
            if ack.stale:
                self.supervisor.stop(ack.job_id, lease=ack.lease, reason="stale lease (progress)")
        return True

    def _flush_exits(self) -> bool:
        for report in self._state.pending_exits():
            try:
                response = self._master.task_exited(report)
            except MasterError as exc:
                if exc.permanent:
                    # Kept, it would block every later report; the log keeps what it said.
                    log.error(
                        "exit_report_refused",
                        job=report.job_id,
                        lease=report.lease,
                        kind=common_pb2.ExitKind.Name(report.kind),
                        error=str(exc),
                    )
                    self._state.ack_exit((report.job_id, report.task_index, report.lease))
                    continue
                if exc.busy:
                    # Kept: sent again on the next pass, heartbeats going on meanwhile.
                    log.info("exit_report_deferred", job=report.job_id, error=str(exc))
                    return True
                self._lost(exc, "exit report")
                return False
            # Accepted or ignored as stale, the master has seen it: nothing to resend.
            self._state.ack_exit((report.job_id, report.task_index, report.lease))
            log.info(
                "exit_reported",
                job=report.job_id,
                lease=report.lease,
                kind=common_pb2.ExitKind.Name(report.kind),
                accepted=response.accepted,
            )
        return True

    # -- recovery after an agent restart

    def _recover_tasks(self) -> None:
        """Takes over the tasks a previous agent on this state directory left: adopts them
        (``adopt_on_restart``), so they run on and are reported as if never interrupted;
        stops those it cannot or may not adopt."""
        orphans: list[RunningTaskRecord] = []
        for record in self._state.running():
            if self.settings.adopt_on_restart and self.supervisor.adopt(record):
                log.info("task_adopted", job=record.job_id, lease=record.lease, pids=record.pids)
            else:
                orphans.append(record)
        if orphans:
            self._reap_orphans(orphans)

    def _reap_orphans(self, records: list[RunningTaskRecord]) -> None:
        """Stops the processes of tasks a previous agent left behind and reports their exits.

        They are asked to checkpoint (SIGTERM), killed after the grace period, and
        reported; the master then places the job again from its checkpoint."""
        alive: dict[tuple[int, int], list[int]] = {}
        for record in records:
            pids = [p for p in record.pids if _is_task_process(p, record)]
            alive[(record.job_id, record.lease)] = pids
            for pid in pids:
                _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.grace_s
        while any(_exists(p) for pids in alive.values() for p in pids):
            if time.monotonic() >= deadline:
                for pids in alive.values():
                    for pid in pids:
                        _signal_group(pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        for record in records:
            last = ProgressTail(Path(record.progress_file)).read_last()
            report = coordinator_pb2.TaskExitedRequest(
                node=self.node,
                job_id=record.job_id,
                task_index=record.task_index,
                lease=record.lease,
                iterations_done=last.checkpoint_iterations if last else 0,
            )
            if last is not None and last.event == "exit" and last.exit_reason in _EXIT_KINDS:
                report.kind = _EXIT_KINDS[last.exit_reason]
            else:
                report.kind = common_pb2.EXIT_KIND_KILLED
                report.message = "the worker agent restarted while the task ran"
            self._state.add_exit(report)
            self._state.record_lease_exit(record.job_id, record.lease, report.kind)
            self._state.remove_running(record.job_id, record.lease)
            log.warning("orphan_task_stopped", job=record.job_id, lease=record.lease)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Our own zombie children do not count; others' are reaped by init.
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _is_task_process(pid: int, record: RunningTaskRecord) -> bool:
    """Whether `pid` is still the task's process (not a reused pid): its environment names
    the job and lease."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        f"HADAR_JOB_ID={record.job_id}".encode() in environ
        and f"HADAR_LEASE={record.lease}".encode() in environ
    )


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# The cluster token of in-process test workers (and of the tests' fake masters and callers):
# made afresh for each test process, so no test worker serves open or with a known token.
TEST_CLUSTER_TOKEN = secrets.token_urlsafe(24)


def settings_for_test(
    master: str, state_dir: Path, fake_gpus: str = "v100:2", **overrides: Any
) -> WorkerSettings:
    """Settings for an in-process worker in tests: listen on 127.0.0.1 port 0, short timers,
    the cluster token TEST_CLUSTER_TOKEN (unless overridden); jobs may run as root (tests
    submit them as whoever runs the tests)."""
    values: dict[str, object] = {
        "master": master,
        "token": TEST_CLUSTER_TOKEN,
        "listen": "127.0.0.1:0",
        "node": "test-node",
        "fake_gpus": fake_gpus,
        "state_dir": state_dir,
        "grace_s": 5.0,
        "progress_interval_s": 0.2,
        "heartbeat_interval_s": 0.5,
        "register_backoff_initial_s": 0.05,
        "register_backoff_max_s": 0.5,
        "rpc_timeout_s": 2.0,
        "allow_root_jobs": True,
    }
    values.update(overrides)
    return WorkerSettings(**values).validate()  # type: ignore[arg-type]


__all__: Sequence[str] = [
    "TEST_CLUSTER_TOKEN",
    "WorkerAgent",
    "agent_version",
    "available_workloads",
    "gpu_to_proto",
    "settings_for_test",
]
