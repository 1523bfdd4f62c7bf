"""A whole Hadar cluster on one machine: one master and a worker per group of fake GPUs.

Everything lives in one state directory: the master's SQLite database, one log file per
process, each worker's state, the shared checkpoint directory, and ``cluster.json``, which
records the processes so that ``hctl local status`` and ``hctl local down`` work from any
later shell. The processes run in sessions of their own, so they outlive the command that
started them.

Every process of a local cluster, and every job process a worker starts, carries
``HADAR_LOCAL_CLUSTER=<state dir>`` in its environment; ``down`` uses it to find stragglers
(a job process whose worker was killed) so nothing is left running.

A local cluster authenticates like a lab's: the workers join with a cluster token kept in
``cluster-token``, and the person who started it gets an admin API token, written with the
master's address to ``hctl.toml`` (``export HADAR_CONFIG=<state dir>/hctl.toml`` points
``hctl`` at it). Both files are readable by their owner only.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import math
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from clients.config import ENV_CONFIG, ClientConfig, ConfigError, load_file, resolve
from clients.errors import HadarError
from clients.types import NodeState

if TYPE_CHECKING:
    from clients.client import HadarClient

MARKER_ENV = "HADAR_LOCAL_CLUSTER"
CLUSTER_FILE = "cluster.json"
CLUSTER_TOKEN_FILE = "cluster-token"
CLIENT_CONFIG_FILE = "hctl.toml"
DATABASE_FILE = "hadar.db"
DEFAULT_WORKERS = "v100:2;p100:2;k80:4"
# The timers of a local cluster's master: quick to notice a dead worker, and calls to
# workers on this machine that give up soon.
HEARTBEAT_INTERVAL_S = 1.0
HEARTBEAT_TIMEOUT_S = 6.0
DISPATCH_TIMEOUT_S = 2.0
DISPATCH_ATTEMPTS = 2
_GROUP = re.compile(r"[a-z0-9][a-z0-9._-]*:[1-9][0-9]*")


class LocalClusterError(RuntimeError):
    """The local cluster could not be started, found or stopped; the message says why."""


@dataclass(frozen=True, slots=True)
class WorkerGroup:
    """One worker process and the fake GPUs it offers (``v100:2`` or ``v100:1,k80:2``)."""

    node: str
    gpus: str

    @property
    def gpu_count(self) -> int:
        return sum(int(part.split(":")[1]) for part in self.gpus.split(","))


def parse_worker_groups(text: str) -> list[WorkerGroup]:
    """Parse ``"v100:2;p100:2;k80:4"``: one worker per ``;``-separated group."""
    groups: list[WorkerGroup] = []
    for number, raw in enumerate((g.strip() for g in text.split(";")), start=1):
        if not raw:
            continue
        parts = [p.strip().lower() for p in raw.split(",")]
        for part in parts:
            if not _GROUP.fullmatch(part):
                raise LocalClusterError(
                    f"--workers: bad group {raw!r}: expected TYPE:COUNT[,TYPE:COUNT...] "
                    f"such as 'v100:2' (groups separated by ';')"
                )
        groups.append(WorkerGroup(node=f"local-{number}", gpus=",".join(parts)))
    if not groups:
        raise LocalClusterError("--workers: no worker group given, e.g. 'v100:2;k80:4'")
    return groups


@dataclass(slots=True)
class ProcessRecord:
    """A process of the local cluster, as recorded in ``cluster.json``."""

    name: str
    pid: int
    log: str
    address: str
    gpus: str = ""


@dataclass(slots=True)
class ClusterRecord:
    """What ``cluster.json`` holds."""

    state_dir: str
    master: ProcessRecord
    workers: list[ProcessRecord] = field(default_factory=list)
    # Standby masters on the same database (``up(standby=True)``), named master-2, ...
    standbys: list[ProcessRecord] = field(default_factory=list)
    policy: str = ""
    round_seconds: float = 0.0
    started_at: float = 0.0
    master_settings: dict[str, str] = field(default_factory=dict)
    # The web dashboard beside the master (``up(dashboard=True)``); its address is HOST:PORT.
    dashboard: ProcessRecord | None = None

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.dashboard.address}" if self.dashboard is not None else ""

    @property
    def master_address(self) -> str:
        return self.master.address

    @property
    def masters(self) -> list[ProcessRecord]:
        return [self.master, *self.standbys]

    @property
    def worker_master_setting(self) -> str:
        """What workers dial: every master's address, tried in turn."""
        return ",".join(m.address for m in self.masters)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ClusterRecord:
        raw = json.loads(text)
        return cls(
            state_dir=raw["state_dir"],
            master=ProcessRecord(**raw["master"]),
            workers=[ProcessRecord(**w) for w in raw["workers"]],
            standbys=[ProcessRecord(**m) for m in raw.get("standbys", [])],
            policy=raw.get("policy", ""),
            round_seconds=float(raw.get("round_seconds", 0.0)),
            started_at=float(raw.get("started_at", 0.0)),
            master_settings=dict(raw.get("master_settings", {})),
            dashboard=ProcessRecord(**raw["dashboard"]) if raw.get("dashboard") else None,
        )


def lease_rounds(round_seconds: float) -> int:
    """Rounds a local cluster's lease lasts: five, or more where rounds are so short that
    the master would refuse the lease as shorter than its renewal can take (a push's
    retries after a round) or than a silence the master does not count as a loss (the
    heartbeat timeout and the rounds around it)."""
    push = DISPATCH_TIMEOUT_S * DISPATCH_ATTEMPTS + 0.1 * ((1 << (DISPATCH_ATTEMPTS - 1)) - 1)
    needed = max(HEARTBEAT_TIMEOUT_S + 2 * round_seconds, round_seconds + push + 0.01)
    return max(5, math.ceil(needed / round_seconds))


def free_port() -> int:
    """A port that was free a moment ago on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); it is dead for our purposes.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.2
) -> None:
    """Poll ``condition`` until it holds; raise naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() >= deadline:
            raise LocalClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name in parentheses may hold spaces; the ppid follows the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable and writable by its owner only (mode 0600), also
    when the file already exists with a wider mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)


def invoking_user() -> str:
    """The Unix user the local cluster's admin token is made for."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "hadar"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class LocalCluster:
    """Start, inspect and stop a local cluster rooted at ``state_dir``."""

    def __init__(self, state_dir: Path | str, database_url: str | None = None) -> None:
        """``database_url``: the masters' database (default: a SQLite file in the state
        directory), e.g. a PostgreSQL schema made for a test."""
        self.state_dir = Path(state_dir).resolve()
        self._database_url = database_url

    # -- the record ---------------------------------------------------------------------

    @property
    def record_path(self) -> Path:
        return self.state_dir / CLUSTER_FILE

    def record(self) -> ClusterRecord | None:
        try:
            return ClusterRecord.from_json(self.record_path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise LocalClusterError(f"{self.record_path} is corrupt: {exc}") from exc

    def _save(self, record: ClusterRecord) -> None:
        tmp = self.record_path.with_suffix(".tmp")
        tmp.write_text(record.to_json())
        tmp.replace(self.record_path)

    @property
    def cluster_token_path(self) -> Path:
        return self.state_dir / CLUSTER_TOKEN_FILE

    @property
    def config_path(self) -> Path:
        """The hctl config (master address and the admin token) of this cluster."""
        return self.state_dir / CLIENT_CONFIG_FILE

    @property
    def database_url(self) -> str:
        return self._database_url or f"sqlite:///{self.state_dir / DATABASE_FILE}"

    def client_config(self, timeout: float = 10.0) -> ClientConfig:
        """What ``hctl`` reads with ``HADAR_CONFIG`` naming this cluster's config; the
        caller's own HADAR_MASTER and HADAR_TOKEN play no part."""
        if self.record() is None:
            raise LocalClusterError(f"no local cluster in {self.state_dir}")
        try:
            return resolve(timeout_s=timeout, env={ENV_CONFIG: str(self.config_path)})
        except ConfigError as exc:
            raise LocalClusterError(f"cannot use {self.config_path}: {exc}") from exc

    def client(self, timeout: float = 10.0) -> HadarClient:
        # gRPC loads here: `hctl local --help` and `hctl local down` need none of it.
        from clients.client import HadarClient

        return HadarClient(config=self.client_config(timeout))

    # -- credentials --------------------------------------------------------------------

    def _cluster_token(self) -> str:
        """The token workers join with: the one in the state dir, else a new random one."""
        with contextlib.suppress(FileNotFoundError):
            token = self.cluster_token_path.read_text(encoding="utf-8").strip()
            if token:
                return token
        token = secrets.token_urlsafe(32)
        write_private(self.cluster_token_path, token + "\n")
        return token

    def _saved_admin_token(self) -> str | None:
        """The admin token of an earlier start, when its database is still there."""
        if self._database_url is None and not (self.state_dir / DATABASE_FILE).exists():
            return None
        try:
            token = load_file(self.config_path).get("token")
        except ConfigError:
            return None
        return token if isinstance(token, str) and token else None

    def _create_admin_token(self) -> str:
        """``hadar-master token create --admin`` for the invoking user, against the local
        database (which it creates and migrates) before the master starts."""
        user = invoking_user()
        argv = [
            sys.executable,
            "-m",
            "master.cli",
            "token",
            "create",
            "--database",
            self.database_url,
            "--user",
            user,
            "--admin",
            "--description",
            f"local cluster in {self.state_dir}",
        ]
        done = subprocess.run(
            argv,
            env=self._environment({}),
            cwd=self.state_dir,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        lines = done.stdout.split()
        if done.returncode != 0 or not lines:
            raise LocalClusterError(
                f"could not create an admin token for {user} in {self.database_url} "
                f"(exit {done.returncode}):\n{done.stderr.strip() or done.stdout.strip()}"
            )
        return lines[0]

    def _write_client_config(self, address: str, token: str) -> None:
        write_private(
            self.config_path,
            f"# hctl settings for the local cluster in {self.state_dir}:\n"
            f"#   export {ENV_CONFIG}={self.config_path}\n"
            f"# The token is an admin token of {invoking_user()}; keep this file private.\n"
            f'master = "{address}"\n'
            f'token = "{token}"\n',
        )

    def prepare_credentials(self, address: str) -> None:
        """Cluster token for the master and workers; an admin token and the hctl config for
        the person starting the cluster."""
        self._cluster_token()
        token = self._saved_admin_token() or self._create_admin_token()
        self._write_client_config(address, token)

    # -- starting -----------------------------------------------------------------------

    def _environment(self, extra: Mapping[str, str]) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            # A shell that talks to another cluster must not steer this one (HADAR_CONFIG
            # may name this cluster's hctl config, which is no master settings file).
            if not k.startswith(
                ("HADAR_MASTER", "HADAR_TOKEN", "HADAR_CLUSTER_TOKEN", "HADAR_WORKER_")
            )
            and k != ENV_CONFIG
        }
        env[MARKER_ENV] = str(self.state_dir)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra)
        return env

    def _spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> ProcessRecord:
        log = self.state_dir / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=self.state_dir,
                start_new_session=True,
            )
        return ProcessRecord(name=name, pid=proc.pid, log=str(log), address="")

    def start_master(
        self,
        port: int,
        policy: str,
        round_seconds: float,
        settings: Mapping[str, str] | None = None,
        name: str = "master",
    ) -> ProcessRecord:
        address = f"127.0.0.1:{port}"
        argv = [
            sys.executable,
            "-m",
            "master.cli",
            "run",
            "--listen",
            address,
            "--database",
            self.database_url,
            "--round-seconds",
            str(round_seconds),
        ]
        if policy:
            argv += ["--policy", policy]
        env = self._environment(
            {
                # Tokens as on a lab's cluster: the workers' from the state dir, the API's
                # from the database (see prepare_credentials).
                "HADAR_AUTH": "token",
                "HADAR_CLUSTER_TOKEN_FILE": str(self.cluster_token_path),
                "HADAR_METRICS_PORT": "-1",
                "HADAR_CHECKPOINT_DIR": str(self.state_dir / "checkpoints"),
                "HADAR_HEARTBEAT_INTERVAL_S": f"{HEARTBEAT_INTERVAL_S:g}",
                "HADAR_HEARTBEAT_TIMEOUT_S": f"{HEARTBEAT_TIMEOUT_S:g}",
                "HADAR_DISPATCH_TIMEOUT_S": f"{DISPATCH_TIMEOUT_S:g}",
                "HADAR_DISPATCH_ATTEMPTS": str(DISPATCH_ATTEMPTS),
                "HADAR_LEASE_ROUNDS": str(lease_rounds(round_seconds)),
                "HADAR_GRACE_S": "10",
                **(settings or {}),
            }
        )
        record = self._spawn(name, argv, env)
        record.address = address
        return record

    def start_worker(
        self,
        group: WorkerGroup,
        master: str,
        settings: Mapping[str, str] | None = None,
        *,
        listen: str | None = None,
        advertise: str | None = None,
    ) -> ProcessRecord:
        """Start one worker dialing ``master``; it listens on ``listen`` (a free port by
        default) and tells the master to dial ``advertise`` (``listen`` by default)."""
        address = listen or f"127.0.0.1:{free_port()}"
        worker_dir = self.state_dir / group.node
        argv = [
            sys.executable,
            "-m",
            "worker.cli",
            "run",
            "--master",
            master,
            "--listen",
            address,
            "--advertise",
            advertise or address,
            "--node",
            group.node,
            "--fake-gpus",
            group.gpus,
            "--state-dir",
            str(worker_dir),
            "--checkpoint-dir",
            str(self.state_dir / "checkpoints"),
        ]
        env = self._environment(
            {
                "HADAR_WORKER_TOKEN_FILE": str(self.cluster_token_path),
                "HADAR_WORKER_PROGRESS_INTERVAL_S": "1",
                # One person's cluster: jobs run as that person, root included, so no
                # other user needs to run this interpreter.
                "HADAR_WORKER_ALLOW_ROOT_JOBS": "true",
                "HADAR_WORKER_CHECK_PYTHON": "false",
                "HADAR_WORKER_CHECKPOINT_INTERVAL_S": "5",
                # Reconnect quickly after a master restart: well within the 6 s timeout.
                "HADAR_WORKER_REGISTER_BACKOFF_MAX_S": "1",
                # v100 runs at this machine's full speed; slower types are paced.
                "HADAR_WORKER_FAKE_GPU_REFERENCE_SPEED": "1",
                # Fake GPUs share this machine's cores: one thread per job process keeps
                # several jobs from thrashing each other.
                "OMP_NUM_THREADS": "1",
                **(settings or {}),
            }
        )
        record = self._spawn(group.node, argv, env)
        record.address = address
        record.gpus = group.gpus
        return record

    def start_dashboard(self, record: ClusterRecord, port: int = 0, timeout: float = 30.0) -> str:
        """Start the web dashboard (``hadar-dashboard``) beside the master on 127.0.0.1
        (a free port by default), wait until it answers, and return its URL."""
        address = f"127.0.0.1:{port or free_port()}"
        argv = [
            sys.executable,
            "-m",
            "dashboard.cli",
            "--listen",
            address,
            "--master",
            record.master_address,
        ]
        proc = self._spawn("dashboard", argv, self._environment({}))
        proc.address = address
        record.dashboard = proc
        self._save(record)

        def answers() -> bool:
            self._check_alive(proc)
            try:
                with urllib.request.urlopen(f"http://{address}/healthz", timeout=1.0) as reply:
                    return bool(reply.status == 200)
            except OSError:
                return False

        wait_until(answers, timeout, f"the dashboard at {address} to answer")
        return record.dashboard_url

    def up(
        self,
        groups: Sequence[WorkerGroup],
        policy: str,
        round_seconds: float = 10.0,
        port: int = 0,
        timeout: float = 90.0,
        master_settings: Mapping[str, str] | None = None,
        worker_settings: Mapping[str, str] | None = None,
        standby: bool = False,
        dashboard: bool = False,
        dashboard_port: int = 0,
    ) -> ClusterRecord:
        """Start a master and the workers, and wait until every node is registered and READY.

        With ``standby`` a second master (``master-2``) runs on the same database and stands
        by; the workers and the hctl config list both masters' addresses, as a lab's would.

        On failure everything started is stopped again and the error quotes the log of the
        process that failed. ``master_settings`` are extra HADAR_* variables for the master
        (its settings from the environment), e.g. ``{"HADAR_MAX_RETRIES": "1"}``;
        ``worker_settings`` likewise HADAR_WORKER_* variables for every worker. With
        ``dashboard`` the web dashboard starts too (on ``dashboard_port``, default a free
        one); ``record.dashboard_url`` is where it serves.
        """
        existing = self.record()
        if existing is not None and self._alive(existing):
            raise LocalClusterError(
                f"a local cluster already runs from {self.state_dir} (master at "
                f"{existing.master_address}); stop it with `hctl local down`"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "checkpoints").mkdir(exist_ok=True)
        port = port or free_port()
        standby_port = free_port() if standby else 0
        # hctl dials both addresses (clients.config): it connects to the one that listens,
        # which is the active master (a standby listens on nothing).
        self.prepare_credentials(
            f"127.0.0.1:{port},127.0.0.1:{standby_port}" if standby else f"127.0.0.1:{port}"
        )
        master = self.start_master(port, policy, round_seconds, master_settings)
        record = ClusterRecord(
            state_dir=str(self.state_dir),
            master=master,
            policy=policy,
            round_seconds=round_seconds,
            started_at=time.time(),
            master_settings=dict(master_settings or {}),
        )
        self._save(record)
        try:
            self._wait_master(record, timeout)
            if standby:
                record.standbys.append(
                    self.start_master(
                        standby_port, policy, round_seconds, master_settings, name="master-2"
                    )
                )
                self._save(record)
            for group in groups:
                record.workers.append(
                    self.start_worker(group, record.worker_master_setting, worker_settings)
                )
                self._save(record)
            self._wait_nodes(record, [g.node for g in groups], timeout)
            if dashboard:
                self.start_dashboard(record, dashboard_port, timeout)
        except BaseException:
            self.down()
            raise
        return record

    def add_worker(
        self,
        group: WorkerGroup,
        *,
        master: str | None = None,
        listen: str | None = None,
        advertise: str | None = None,
        settings: Mapping[str, str] | None = None,
        timeout: float = 90.0,
    ) -> ProcessRecord:
        """Start one more worker in the running cluster and wait until it is READY.

        ``master`` and ``advertise`` replace the addresses the worker and the master dial
        (the master's own, and ``listen``), for workers reached through a relay.
        """
        record = self._require()
        if any(w.name == group.node for w in record.workers):
            raise LocalClusterError(f"the local cluster already has a worker {group.node!r}")
        worker = self.start_worker(
            group,
            master or record.worker_master_setting,
            settings,
            listen=listen,
            advertise=advertise,
        )
        record.workers.append(worker)
        self._save(record)
        self._wait_nodes(record, [group.node], timeout)
        return worker

    def restart_master(
        self, timeout: float = 60.0, name: str = "master", *, wait: bool = True
    ) -> ProcessRecord:
        """Start a master (``master`` or a standby's name) again on the same address and
        database, after a crash; ``wait`` for it to answer (a master that comes back while
        another is active stands by and answers nothing)."""
        record = self._require()
        old = self.process(name)
        port = int(old.address.rsplit(":", 1)[1])
        new = self.start_master(
            port, record.policy, record.round_seconds, record.master_settings, name=name
        )
        if name == "master":
            record.master = new
        else:
            record.standbys = [new if m.name == name else m for m in record.standbys]
        self._save(record)
        if wait:
            self._wait_master(record, timeout)
        return new

    def restart_worker(
        self, name: str, settings: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> ProcessRecord:
        """Start worker ``name`` again with its GPUs, address and state directory (after a
        crash), so it adopts the tasks its predecessor left running; waits until READY."""
        record = self._require()
        position = next((i for i, w in enumerate(record.workers) if w.name == name), None)
        if position is None:
            raise LocalClusterError(f"no worker {name!r} in the local cluster")
        old = record.workers[position]
        if pid_alive(old.pid):
            raise LocalClusterError(f"worker {name!r} still runs (pid {old.pid})")
        worker = self.start_worker(
            WorkerGroup(node=name, gpus=old.gpus),
            record.master.address,
            settings,
            listen=old.address,
        )
        record.workers[position] = worker
        self._save(record)
        self._wait_nodes(record, [name], timeout)
        return worker

    def _check_alive(self, proc: ProcessRecord) -> None:
        if not pid_alive(proc.pid):
            raise LocalClusterError(
                f"{proc.name} exited during start-up; last lines of {proc.log}:\n"
                f"{_tail(Path(proc.log))}"
            )

    def _wait_master(self, record: ClusterRecord, timeout: float) -> None:
        def answers() -> bool:
            if not any(pid_alive(m.pid) for m in record.masters):
                self._check_alive(record.master)
            try:
                with self.client(timeout=2.0) as client:
                    client.cluster_status()
            except HadarError:
                return False
            return True

        wait_until(answers, timeout, f"the master at {record.master_address} to answer")

    def _wait_nodes(self, record: ClusterRecord, names: Sequence[str], timeout: float) -> None:
        def registered() -> bool:
            for worker in record.workers:
                self._check_alive(worker)
            try:
                with self.client(timeout=2.0) as client:
                    nodes = {n.name: n for n in client.list_nodes()}
            except HadarError:
                return False
            return all(name in nodes and nodes[name].state == NodeState.READY for name in names)

        wait_until(registered, timeout, f"workers {', '.join(names)} to register")

    # -- inspecting and stopping --------------------------------------------------------

    def _require(self) -> ClusterRecord:
        record = self.record()
        if record is None:
            raise LocalClusterError(
                f"no local cluster in {self.state_dir}; start one with `hctl local up`"
            )
        return record

    def _alive(self, record: ClusterRecord) -> bool:
        return any(pid_alive(p.pid) for p in [*record.masters, *record.workers])

    def processes(self) -> list[tuple[ProcessRecord, bool]]:
        record = self._require()
        extra = [record.dashboard] if record.dashboard is not None else []
        return [(p, pid_alive(p.pid)) for p in [*record.masters, *record.workers, *extra]]

    def process(self, name: str) -> ProcessRecord:
        """The process named ``name``: ``master``, a standby (``master-2``) or a worker."""
        for proc in self._require().masters:
            if proc.name == name:
                return proc
        return self.worker(name)

    def worker(self, name: str) -> ProcessRecord:
        for proc in self._require().workers:
            if proc.name == name:
                return proc
        raise LocalClusterError(f"no worker {name!r} in the local cluster")

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to one process of the cluster (``master``, a standby such as
        ``master-2``, or a worker's node name)."""
        proc = self.process(name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)

    def crash(self, name: str) -> None:
        """SIGKILL a worker and every process it started, as if its machine died."""
        victims = [self.worker(name).pid]
        for pid in victims:  # grows while we walk it: descendants of descendants
            victims.extend(_children(pid))
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def job_processes(self) -> dict[int, set[int]]:
        """Job id -> the leases its live processes run under (more than one: running twice)."""
        leases: dict[int, set[int]] = {}
        for _pid, environ in self._marked():
            job = environ.get(b"HADAR_JOB_ID")
            lease = environ.get(b"HADAR_LEASE")
            if job is not None and lease is not None:
                leases.setdefault(int(job), set()).add(int(lease))
        return leases

    def _marked(self) -> Iterator[tuple[int, dict[bytes, bytes]]]:
        marker = str(self.state_dir).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                raw = (entry / "environ").read_bytes()
            except OSError:
                continue
            environ = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
            if environ.get(MARKER_ENV.encode()) == marker:
                yield int(entry.name), environ

    def marked_processes(self) -> Iterator[int]:
        """Pids of every process, job processes included, that belongs to this cluster."""
        for pid, _ in self._marked():
            yield pid

    def down(self, timeout: float = 20.0) -> int:
        """Stop the workers, the master and any job process left; return how many were stopped.

        Workers and the master get SIGTERM first (a graceful shutdown), then everything of
        the cluster still alive after ``timeout`` seconds gets SIGKILL.
        """
        record = self.record()
        procs = [] if record is None else [*record.workers, *record.masters]
        if record is not None and record.dashboard is not None:
            procs.append(record.dashboard)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(LocalClusterError):
            wait_until(
                lambda: not any(pid_alive(p.pid) for p in procs), timeout, "processes to exit"
            )
        stopped = 0
        for pid in [*(p.pid for p in procs if pid_alive(p.pid)), *self.marked_processes()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                stopped += 1
        with contextlib.suppress(LocalClusterError):
            wait_until(lambda: not any(True for _ in self.marked_processes()), 10.0, "exit")
        if record is not None:
            self.record_path.unlink(missing_ok=True)
        return len(procs) + stopped
