"""The master daemon: wiring, the gRPC server, APScheduler rounds, metrics, shutdown.

In-process use (tests, other tools)::

    master = Master(settings)          # nothing runs yet
    port = master.start()              # migrates, serves, schedules; port 0 picks one
    token = master.create_token("alice", admin=True)
    master.run_round()                 # one scheduling round now, synchronously
    master.leadership.role             # Role.ACTIVE once started; see master.process.leadership
    master.check_nodes(force=True)     # declare silent nodes lost now
    master.stop()                      # graceful: finishes the current round
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import secrets
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

import grpc
import structlog
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from master.jobs.control import JobControl
from master.jobs.holds import HoldEnforcer
from master.jobs.manager import JobManager
from master.jobs.timelimits import TimeLimitEnforcer
from master.jobs.webhooks import WebhookSender
from master.nodes.dispatch import Dispatcher
from master.nodes.registry import Registry
from master.nodes.workers import WorkerClients
from master.process import systemd
from master.process.events import ChangeSignal
from master.process.leadership import Leadership, NotLeaderError, idle_transaction_limit_s
from master.process.metrics import ClusterGauges, MasterMetrics
from master.process.transactions import Transactor
from master.rounds.forecaster import Forecaster
from master.rounds.runner import RoundResult, RoundRunner
from master.scheduling.policy import (
    Policy,
    UnknownPolicyError,
    forks_every_job,
    import_memory,
    make_policy,
)
from master.scheduling.throughput import ThroughputModel
from master.service.access import AccessInterceptor
from master.service.admission import Admission
from master.service.auth import Authenticator
from master.service.components import Components
from master.service.coordinator import CoordinatorServicer
from master.service.hadar import HadarServicer
from master.service.tls import server_credentials, worker_channel_credentials
from master.settings import Settings, SettingsError
from protos.hadar.v1 import coordinator_pb2, coordinator_pb2_grpc, hadar_pb2, hadar_pb2_grpc
from store import Database, UnitOfWork
from store.migrate import upgrade
from store.reachability import describe_url, wait_for_database
from store.states import GpuHealth, JobState, NodeState

log = structlog.get_logger(__name__)

VERSION = "0.1.0"
IDLE_CHECK_INTERVAL_S = 0.5
# A stop taking this long has hung: every thread's stack goes to stderr.
STOP_STACKS_AFTER_S = 60.0
SERVICES = (
    hadar_pb2.DESCRIPTOR.services_by_name["Hadar"].full_name,
    coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name,
)


def resolve_cluster_token(settings: Settings) -> str:
    """The configured cluster token, or the one kept in `cluster_token_file` (created with a
    fresh random value, readable by the master's user only, on first start)."""
    if settings.auth == "none" or settings.cluster_token:
        return settings.cluster_token
    path = Path(settings.cluster_token_file)
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    log.info("created a cluster token; give it to the workers", path=str(path))
    return token


def advertised_address(listen: str) -> str:
    """How this master is named in the lease row (what a standby reports as the active
    master): the `listen` address, with this host's name for a wildcard host."""
    host, _, port = listen.rpartition(":")
    if host.strip("[]") in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    return f"{host}:{port}"


def base_throughput_model(settings: Settings) -> ThroughputModel:
    speeds = dict(settings.gpu_speeds)
    if settings.throughput_profile:
        try:
            return ThroughputModel.from_gavel_json(settings.throughput_profile, speeds=speeds)
        except (OSError, ValueError) as exc:
            raise SettingsError(f"throughput_profile: {exc}") from None
    return ThroughputModel(speeds=speeds)


def early_round_due(
    now: datetime,
    delay_s: float,
    last_end: datetime | None,
    last_duration_s: float,
    spacing: float,
) -> datetime:
    """When an early round asked for at `now` starts: `delay_s` from now, and no sooner
    after the last round ended (`last_end`, None: no round yet) than `spacing` times as
    long as that round took."""
    due = now + timedelta(seconds=delay_s)
    if last_end is None:
        return due
    return max(due, last_end + timedelta(seconds=spacing * last_duration_s))


class Master:
    """One master: call :meth:`start`, then :meth:`stop` (or :meth:`serve_forever`)."""

    def __init__(self, settings: Settings, *, policy: Policy | None = None) -> None:
        self.settings = settings
        if policy is None:
            try:
                policy = make_policy(settings.policy, **dict(settings.policy_params))
            except UnknownPolicyError as exc:
                raise SettingsError(f"policy: {exc}") from None
            except ValueError as exc:
                raise SettingsError(f"policy_params: {exc}") from None
            if forks_every_job(policy):
                raise SettingsError(
                    f"policy_params: this variant of {settings.policy!r} forks every job into "
                    "copies whatever its owner allowed, which changes how jobs train; it is "
                    "for `hctl simulate` only (a job is forked here only when submitted with "
                    "--elastic)"
                )
        self._policy = policy
        self._base_model = base_throughput_model(settings)
        self.cluster_token = resolve_cluster_token(settings)
        self._server_credentials = server_credentials(settings)
        # A transaction of this master left open by a freeze must not hold the lease row
        # (and so keep a standby out) for longer than a lease: see master.process.leadership.
        self.database = Database(
            settings.database,
            idle_in_transaction_timeout_s=idle_transaction_limit_s(settings.leader_lease_s),
        )
        self.metrics = MasterMetrics()
        self.changes = ChangeSignal()
        self._server: grpc.Server | None = None
        # Set by a stop signal; ends a wait for the database at start.
        self._signalled = threading.Event()
        self._health = health.HealthServicer()
        self._scheduler: BackgroundScheduler | None = None
        self._metrics_server: object | None = None
        self._rpc_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="hadar-push")
        self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hadar-bg")
        self._stopped = threading.Event()
        self._stopping = False
        self._early_lock = threading.Lock()
        self._rerun = False
        self._rerun_freed = False
        self._round_running = False
        self._stalled = False
        self._last_full_at = -1e9
        # When the last scheduled round ended and how long it took (the wall clock's
        # UTC time, seconds): early rounds keep their distance from it.
        self._last_round_end: datetime | None = None
        self._last_round_s = 0.0
        self._started_at = 0.0
        self.port = 0
        self.metrics_port: int | None = None
        # Why this master lost its lease, once it has: it then acts no more and exits.
        self.deposed_reason = ""
        self._deposed = threading.Event()
        self._renewals_stop = threading.Event()
        self._renewals: threading.Thread | None = None

        self.tx = Transactor(self.database)
        self.workers = WorkerClients(
            self.cluster_token,
            timeout_s=settings.dispatch_timeout_s,
            attempts=settings.dispatch_attempts,
            credentials=worker_channel_credentials(settings),
        )
        self.dispatcher = Dispatcher(
            self.tx,
            self.workers,
            settings,
            self.metrics,
            self._rpc_pool,
            self._background,
            self.changes.notify,
        )
        self.registry = Registry(
            self.tx,
            self.dispatcher,
            settings,
            self.metrics,
            self.changes.notify,
            self.request_round,
        )
        self.jobs = JobManager(
            self.tx,
            self.dispatcher,
            settings,
            self._base_model,
            self.changes.notify,
            self.request_round,
            nodes_version=lambda: self.registry.nodes_version,
        )
        self.control = JobControl(
            self.tx,
            self.dispatcher,
            settings,
            lambda: self.jobs.facts,
            self.changes.notify,
            self.request_round,
        )
        self.rounds = RoundRunner(
            self.tx,
            policy,
            self.dispatcher,
            settings,
            self.metrics,
            self._base_model,
            self.changes.notify,
            forecaster=Forecaster(settings, self.metrics),
        )
        self.holds = HoldEnforcer(self.tx, self.changes.notify, self.rounds.memo.jobs)
        self.time_limits = TimeLimitEnforcer(
            self.tx, self.dispatcher, self.changes.notify, self.request_round
        )
        self.auth = Authenticator(self.tx, settings.auth, self.cluster_token)
        # On PostgreSQL the lease is kept over connections of its own: a renewal must not
        # wait for a connection behind a burst of calls (its term would end meanwhile).
        self._lease_database = (
            Database(
                settings.database,
                idle_in_transaction_timeout_s=idle_transaction_limit_s(settings.leader_lease_s),
            )
            if self.database.dialect == "postgresql"
            else self.database
        )
        self.leadership = Leadership(
            self._lease_database,
            address=advertised_address(settings.listen),
            lease_s=settings.leader_lease_s,
            renew_s=settings.leader_renew_s,
            on_lost=self._lost_lease,
            write_lock=self.tx.write_lock,
        )
        self.metrics.watch_leadership(lambda: (self.leadership.role.value, self.leadership.epoch))
        self.webhooks = WebhookSender(self.tx, settings, self.metrics, self.changes)

    # -- life --------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        host = self.settings.listen.rsplit(":", 1)[0].strip("[]")
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    def start(self) -> int:
        """Migrate the database, wait to become the active master, then serve and schedule
        rounds; returns the bound gRPC port (0 when stopped while still a standby).

        A standby neither listens nor schedules: it only tries for the lease every
        ``leader_renew_s``. Raises DatabaseUnreachableError when the database does not
        answer within ``database_wait_s``."""
        wait_for_database(
            self.database,
            self.settings.database_wait_s,
            sleep=self._signalled.wait,
            on_retry=lambda cause, delay: log.warning(
                "database_unreachable",
                database=describe_url(self.database.url),
                cause=cause,
                retry_in_s=round(delay, 1),
            ),
        )
        upgrade(self.database.url, engine=self.database.engine)
        self._serve_metrics()
        log.info("master waiting to become active", database=describe_url(self.database.url))
        stood_by: list[str] = []

        def standing_by(why: str) -> None:
            # Under systemd a standby is up and well: `systemctl start` returns, and
            # `systemctl status` shows why it waits.
            stood_by.append(why)
            systemd.notify(f"READY=1\nSTATUS=standby: {why}")

        if not self.leadership.wait_to_lead(self._signalled, on_standby=standing_by):
            return 0
        if stood_by:
            systemd.notify(f"STATUS=active master, epoch {self.leadership.epoch}")
        # From here every write checks the term, and every order to a worker carries it.
        self.tx.guard = self.leadership.guard
        self.workers.epoch = self.leadership.fence
        self.workers.on_fenced = self.leadership.step_down
        self._renewals = threading.Thread(
            target=self.leadership.run_renewals,
            args=(self._renewals_stop,),
            name="hadar-lease",
            daemon=True,
        )
        self._renewals.start()
        try:
            return self._serve()
        except BaseException:
            self.leadership.release()
            raise

    def _serve_metrics(self) -> None:
        self.metrics.watch_store(self._gauges)
        if self.settings.metrics_port < 0:
            return
        try:
            http, _thread = start_http_server(
                self.settings.metrics_port, self.settings.metrics_host, self.metrics.registry
            )
        except OSError as exc:
            raise SettingsError(
                f"metrics_port: cannot bind {self.settings.metrics_host}:"
                f"{self.settings.metrics_port}: {exc}"
            ) from None
        self._metrics_server = http
        self.metrics_port = int(http.server_port)

    def _serve(self) -> int:
        self._restore_policy_memory()
        self._started_at = time.monotonic()
        parts = Components(
            settings=self.settings,
            tx=self.tx,
            auth=self.auth,
            jobs=self.jobs,
            control=self.control,
            registry=self.registry,
            rounds=self.rounds,
            dispatcher=self.dispatcher,
            workers=self.workers,
            metrics=self.metrics,
            changes=self.changes,
            base_model=self._base_model,
            next_round_at=self.next_round_at,
            version=VERSION,
        )
        limits = self.settings.admission
        server = grpc.server(
            # Sized so that, with every user call the caps admit under way, the workers
            # still find `worker_rpc_threads` threads free.
            ThreadPoolExecutor(max_workers=limits.pool_threads, thread_name_prefix="hadar-rpc"),
            interceptors=[
                AccessInterceptor(
                    self.auth,
                    self.metrics,
                    active=self.leadership.acting,
                    admission=Admission(limits),
                )
            ],
            # Without this a second master on the same port would silently share it.
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", self.settings.max_receive_message_bytes),
                ("grpc.max_send_message_length", self.settings.max_send_message_bytes),
            ],
        )
        hadar_pb2_grpc.add_HadarServicer_to_server(HadarServicer(parts), server)  # type: ignore[no-untyped-call]
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(  # type: ignore[no-untyped-call]
            CoordinatorServicer(parts), server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (*SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        try:
            if self._server_credentials is not None:
                self.port = server.add_secure_port(self.settings.listen, self._server_credentials)
            else:
                self.port = server.add_insecure_port(self.settings.listen)
        except (RuntimeError, OSError) as exc:
            raise SettingsError(f"listen: cannot bind {self.settings.listen}: {exc}") from None
        if self.port == 0:
            raise SettingsError(f"listen: cannot bind {self.settings.listen}")
        server.start()
        self._server = server
        for name in ("", *SERVICES):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

        scheduler = BackgroundScheduler(timezone=UTC)
        scheduler.add_job(
            self._scheduled_round,
            IntervalTrigger(seconds=self.settings.round_seconds),
            id="round",
            name="scheduling round",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )
        scheduler.add_job(
            self._scheduled_node_check,
            IntervalTrigger(seconds=self.settings.heartbeat_interval_s),
            id="nodes",
            name="lost-node check",
            max_instances=1,
            coalesce=True,
        )
        scheduler.add_job(
            self._scheduled_heartbeat_write,
            IntervalTrigger(seconds=self.registry.write_every_s),
            id="heartbeats",
            name="heartbeat write",
            max_instances=1,
            coalesce=True,
            # Late rather than skipped: a skipped write leaves the stored times a period older.
            misfire_grace_time=None,
        )
        scheduler.add_job(
            self._scheduled_time_limit_check,
            IntervalTrigger(seconds=self.settings.time_limit_check_s),
            id="time-limits",
            name="time-limit check",
            max_instances=1,
            coalesce=True,
        )
        scheduler.start()
        self._scheduler = scheduler
        # Calls owed before a restart (the outbox) go out now; never from a round.
        self.webhooks.start()
        # Starts decided before a restart that never reached their workers go out now.
        self._background.submit(self._resume_dispatch)
        systemd.notify("READY=1")
        log.info(
            "master started",
            address=self.address,
            database=self.database.url.split("@")[-1],
            policy=self.rounds.policy_name,
            round_seconds=self.settings.round_seconds,
            auth=self.settings.auth,
            metrics_port=self.metrics_port,
            epoch=self.leadership.epoch,
        )
        return self.port

    def _restore_policy_memory(self) -> None:
        """What the policy learned before a restart (a-srpt's completed jobs), if any."""
        name = self._policy.name
        memory = self.tx.read(lambda uow: uow.memory.get(name))
        if memory is None:
            return
        try:
            restored = import_memory(self._policy, memory)
        except ValueError as exc:
            # Starting without it beats not starting; the next completion overwrites it.
            log.error(
                "the policy's stored memory is unreadable; starting without it", error=str(exc)
            )
            return
        if restored:
            log.info("policy memory restored", policy=name)

    def _lost_lease(self, reason: str) -> None:
        """The term is over: stop scheduling and refuse calls now; the process then exits
        (serve_forever) and, restarted, stands by."""
        self.deposed_reason = reason
        for name in ("", *SERVICES):
            self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.jobs.stop_accepting()
        if self._scheduler is not None:
            try:
                self._scheduler.pause()
            except Exception:  # not running yet, or shutting down
                log.debug("could not pause the scheduler")
        self._deposed.set()

    def stop(self, grace: float = 5.0) -> None:
        """Stop serving: NOT_SERVING, refuse submissions, finish the current round, exit.
        Tasks keep running on the workers; a new master adopts them."""
        if self._stopping:
            self._stopped.wait()
            return
        self._stopping = True
        systemd.notify("STOPPING=1")
        log.info("master stopping")
        # A stop that hangs (a thread that never returns) leaves what it waits for on
        # stderr, where the service's log has it, before systemd or an operator kills it.
        # A stderr with no file behind it (captured in a test) gets no dump.
        with contextlib.suppress(io.UnsupportedOperation, ValueError):
            faulthandler.dump_traceback_later(STOP_STACKS_AFTER_S, exit=False)
        self.jobs.stop_accepting()
        for name in ("", *SERVICES):
            self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
        self.webhooks.stop()
        self.changes.close()
        if self._server is not None:
            self._server.stop(grace).wait()
            if not self._deposed.is_set():
                # The heartbeats received since the last write, so that the stored times
                # are the last ones received (a master that starts next still gives every
                # worker a full timeout to come back before it counts any lost).
                self._scheduled_heartbeat_write()
        if self._metrics_server is not None:
            shutdown = getattr(self._metrics_server, "shutdown", None)
            if callable(shutdown):
                shutdown()
            close = getattr(self._metrics_server, "server_close", None)
            if callable(close):
                close()
        if self.rounds.forecaster is not None:
            self.rounds.forecaster.stop()
        self.rounds.planner.stop()
        self.dispatcher.close()
        self._background.shutdown(wait=True)
        self._rpc_pool.shutdown(wait=True)
        self.workers.close()
        self._renewals_stop.set()
        if self._renewals is not None:
            self._renewals.join(timeout=10)
        # Last: nothing this master does may follow the moment a standby can take over.
        self.leadership.release()
        self.database.dispose()
        if self._lease_database is not self.database:
            self._lease_database.dispose()
        faulthandler.cancel_dump_traceback_later()
        self._stopped.set()
        log.info("master stopped")

    def serve_forever(self) -> bool:
        """Start (standing by until active), then block until SIGTERM or SIGINT or the loss
        of the lease, then stop gracefully. False when the lease was lost."""

        self._relay_signals()
        self.start()
        while not (self._signalled.is_set() or self._deposed.is_set()):
            self._signalled.wait(0.5)
        self.stop()
        return not self._deposed.is_set()

    def _relay_signals(self) -> None:
        """SIGTERM and SIGINT set `_signalled` from a thread of their own.

        A handler that set the event itself could deadlock: it runs in the main thread,
        which may be inside that very event's wait, holding its (non-reentrant) lock. So
        the handlers do nothing and the interpreter writes each signal's number to a
        socket, which a relay thread reads."""
        receiving, sending = socket.socketpair()
        sending.setblocking(False)
        signal.set_wakeup_fd(sending.fileno(), warn_on_full_buffer=False)

        def ignore(_signum: int, _frame: FrameType | None) -> None:
            """Only for the wakeup write; the relay acts on the signal."""

        signal.signal(signal.SIGTERM, ignore)
        signal.signal(signal.SIGINT, ignore)

        def relay() -> None:
            while True:
                received = receiving.recv(1)
                if not received:
                    return
                log.info("signal received", signal=signal.Signals(received[0]).name)
                self._signalled.set()

        threading.Thread(target=relay, name="hadar-signals", daemon=True).start()
        # Kept open for the life of the process (the wakeup fd writes into it).
        self._signal_sockets = (receiving, sending)

    def create_token(self, user: str, *, admin: bool = False, description: str = "") -> str:
        """Issue an API token for `user` (created if needed); returns the plaintext."""
        issued = self.tx.write(
            lambda uow: uow.tokens.create(user, admin=admin, description=description),
            jobs=False,
        )
        return issued.plaintext

    # -- rounds --------------------------------------------------------------------------------

    def run_round(self, *, settle: bool = True) -> RoundResult:
        """One scheduling round now; returns when it is stored and, with `settle`, once
        its pushes were answered or given up. NotLeaderError on a master that is not the
        active one. Scheduled rounds do not wait for the workers."""
        self.leadership.fence()
        try:
            self.holds.check()
        except Exception:
            # The round still runs: held jobs stay out of it, the next check retries.
            log.exception("dependency check failed")
        result = self.rounds.run(settle=settle)
        if settle:
            # A worker may have refused the round's orders as coming from a deposed master.
            self.leadership.fence()
        with self._early_lock:
            # Jobs wait and the round could place none of them: more submissions will not
            # change that, only freed GPUs will (see request_round).
            self._stalled = result.waiting > 0 and not result.started
        return result

    def check_nodes(self, *, force: bool = False) -> list[str]:
        """Declare nodes silent for longer than the heartbeat timeout lost. Right after a
        start the workers get one timeout to reconnect first, unless `force`."""
        if not force and time.monotonic() - self._started_at < self.settings.heartbeat_timeout_s:
            return []
        return self.registry.check_lost()

    def next_round_at(self) -> datetime | None:
        if self._scheduler is None:
            return None
        job = self._scheduler.get_job("round")
        when = getattr(job, "next_run_time", None) if job is not None else None
        return when if isinstance(when, datetime) else None

    def request_round(self, freed: bool = False) -> None:
        """Ask for an early round when GPUs idle while jobs wait (coalesced, debounced).

        `freed`: GPUs were just released (an exit, a cancellation, a new node), so the
        previous "no idle GPU" answer no longer holds.
        """
        if not self.settings.early_rounds or self._scheduler is None or self._stopping:
            return
        with self._early_lock:
            if freed:
                self._stalled = False
            elif self._stalled:
                return
            if self._round_running:
                self._rerun = True
                self._rerun_freed = self._rerun_freed or freed
                return
            soon = early_round_due(
                datetime.now(UTC),
                self.settings.early_round_delay_s,
                self._last_round_end,
                self._last_round_s,
                self.settings.early_round_spacing,
            )
            current = self.next_round_at()
            if current is not None and current <= soon:
                return
            # The idle check reads every task: a burst of submissions into a full cluster
            # checks once per interval, not once per submission.
            now = time.monotonic()
            if not freed and now - self._last_full_at < IDLE_CHECK_INTERVAL_S:
                return
        waiting, idle = self.tx.read(_waiting_jobs_and_idle_gpus)
        if waiting and not idle:
            with self._early_lock:
                self._last_full_at = time.monotonic()
        if not (waiting and idle):
            return
        try:
            self._scheduler.modify_job("round", next_run_time=soon)
        except Exception:  # the scheduler is shutting down
            log.debug("could not move the next round forward")

    def _scheduled_round(self) -> None:
        with self._early_lock:
            self._round_running = True
            self._rerun = self._rerun_freed = False
        began = time.monotonic()
        try:
            self.run_round(settle=False)
        except Exception:
            log.exception("scheduling round failed")
        finally:
            with self._early_lock:
                self._round_running = False
                self._last_round_s = time.monotonic() - began
                self._last_round_end = datetime.now(UTC)
                rerun, freed = self._rerun, self._rerun_freed
                self._rerun = self._rerun_freed = False
            if rerun:
                self.request_round(freed)

    def _scheduled_node_check(self) -> None:
        try:
            self.check_nodes()
        except Exception:
            log.exception("lost-node check failed")

    def _scheduled_heartbeat_write(self) -> None:
        try:
            self.registry.write_heartbeats()
        except NotLeaderError:
            log.debug("heartbeat times not written: this master's term is over")
        except Exception:
            log.exception("writing heartbeat times failed")

    def _scheduled_time_limit_check(self) -> None:
        try:
            self.time_limits.check()
        except Exception:
            log.exception("time-limit check failed")

    def _resume_dispatch(self) -> None:
        try:
            self.dispatcher.dispatch_ready()
        except Exception:
            log.exception("resending pending starts failed")

    def _gauges(self) -> ClusterGauges:
        def read(uow: UnitOfWork) -> ClusterGauges:
            busy = uow.tasks.busy_gpus()
            gpus: dict[tuple[str, str], int] = {}
            for node, index, gpu_type, node_state, gpu_health in uow.nodes.gpu_slots():
                if (node, index) in busy:
                    state = "busy"
                elif node_state is NodeState.READY and gpu_health is GpuHealth.HEALTHY:
                    state = "idle"
                else:
                    state = "unavailable"
                gpus[(state, gpu_type)] = gpus.get((state, gpu_type), 0) + 1
            used = uow.usage.ended_totals()
            now = datetime.now(UTC)
            for record in uow.usage.running():
                key = (record.user, record.gpu_type)
                used[key] = used.get(key, 0.0) + record.gpu_seconds(now)
            return ClusterGauges(
                jobs_by_state={s.value: c for s, c in uow.jobs.count_by_state().items()},
                gpus=gpus,
                gpu_seconds=used,
            )

        return self.tx.read(read)


def _waiting_jobs_and_idle_gpus(uow: UnitOfWork) -> tuple[bool, bool]:
    if not uow.jobs.any_in_states((JobState.PENDING, JobState.PREEMPTED)):
        return False, False
    busy = uow.tasks.busy_gpus()
    return True, any(
        state is NodeState.READY and health is GpuHealth.HEALTHY and (node, index) not in busy
        for node, index, _, state, health in uow.nodes.gpu_slots()
    )
