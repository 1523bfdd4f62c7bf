"""The worker's settings: one typed object built from defaults, a TOML file, the environment
and command-line flags (later sources win).

TOML keys are the field names below (``master = "head:50051"``), plus two tables:
``[gpu_names]`` (NVML name pattern -> GPU type, tried before the built-in table) and
``[fake_gpu_speeds]`` (type -> relative speed). Environment variables are
``HADAR_WORKER_<FIELD>`` in upper case (``HADAR_WORKER_MASTER``). The cluster token is required
to run: ``HADAR_WORKER_TOKEN`` or, better, a file (``token_file``), which keeps it out of ``ps``.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import grpc

from worker.gpus import GpuError, validate_name_table

ENV_PREFIX = "HADAR_WORKER_"
DEFAULT_STATE_DIR = Path("/var/lib/hadar-worker")
# Below this, an ordinary assignment (a job with a few environment variables) would not fit.
MIN_MESSAGE_BYTES = 64 * 1024


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names it."""


TOKEN_REQUIRED = (
    "token: required (the cluster token, which the master calls the worker with and the "
    "worker presents to the master); set token_file / --token-file / "
    "HADAR_WORKER_TOKEN_FILE to a file holding it (or token / --token / HADAR_WORKER_TOKEN)"
)


def parse_host_port(value: str, what: str, allow_zero_port: bool = True) -> tuple[str, int]:
    """Splits ``host:port`` (``[v6]:port`` too); the message names the setting."""
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\s\[\]]+):(\d+)", value.strip())
    if not match:
        raise SettingsError(f"{what}: expected HOST:PORT, got {value!r}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if port > 65535 or (port == 0 and not allow_zero_port):
        raise SettingsError(f"{what}: bad port {port} in {value!r}")
    return host, port


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Everything a worker agent needs to run."""

    # host:port of the master's Coordinator service; with a standby master, both addresses
    # separated by a comma (tried in turn: the one that answers is the active master).
    master: str = ""
    # Talk to the master over TLS (the master serves TLS when it has a certificate): with the
    # system's roots, or with the CA in `master_ca_file` (which implies TLS).
    master_tls: bool = False
    master_ca_file: Path | None = None
    # Client certificate and key presented to a master that requires one (implies TLS).
    master_client_cert: Path | None = None
    master_client_key: Path | None = None
    # Serve the Worker service over TLS with this certificate and key (PEM); the master
    # must then have `worker_ca_file`. With `tls_client_ca` callers (the master) must
    # present a client certificate signed by that CA.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    # Where the Worker service listens; port 0 picks a free port.
    listen: str = "0.0.0.0:7070"
    # host:port the master should call; empty means this host's name and the bound port.
    advertise: str = ""
    # Unique node name; empty means the hostname.
    node: str = ""
    # Fake GPUs (`v100:2,k80:4`); empty means NVML.
    fake_gpus: str = ""
    fake_gpu_speeds: Mapping[str, float] = field(default_factory=dict)
    # The fake speed that runs at this host's full compute speed; 0 means the fastest in the
    # table. Must be the same on every worker of a cluster.
    fake_gpu_reference_speed: float = 0.0
    gpu_names: Mapping[str, str] = field(default_factory=dict)
    # Logs, progress files, the exit outbox and the lease ledger.
    state_dir: Path = DEFAULT_STATE_DIR
    # Default root for checkpoints (a job without its own goes to <checkpoint_dir>/job-<id>);
    # empty means <state_dir>/checkpoints.
    checkpoint_dir: Path | None = None
    # Default working directory root (<jobs_dir>/job-<id>); empty means <state_dir>/jobs.
    jobs_dir: Path | None = None
    # Cluster token (required to run): sent to the master and required on every incoming call.
    token: str = ""
    token_file: Path | None = None
    # Seconds a stopping task has to checkpoint when the master gives no grace.
    grace_s: float = 30.0
    # Seconds between progress reports to the master.
    progress_interval_s: float = 5.0
    # Heartbeat interval until the master says otherwise.
    heartbeat_interval_s: float = 10.0
    # Periodic checkpoints inside a lease (0: only at the end of a lease or on stop).
    checkpoint_interval_s: float = 0.0
    # Registration retry: exponential backoff from `initial` to `max`, with jitter.
    register_backoff_initial_s: float = 0.5
    register_backoff_max_s: float = 10.0
    # Timeout of each call to the master.
    rpc_timeout_s: float = 10.0
    # Python that runs built-in workloads (`python -m worker.workloads NAME`).
    python: str = ""
    # Logs and progress files of exited tasks are deleted after this many days.
    log_retention_days: float = 14.0
    # Lines of a failing process's output sent with its exit report.
    failure_tail_lines: int = 20
    # A root agent runs a job submitted as root (uid 0) only when this is set.
    allow_root_jobs: bool = False
    # A root agent refuses to start when `python` (or its own interpreter) is one that other
    # users cannot run: every job of theirs would fail. Off only where every job runs as
    # root (a local cluster its root user runs for themselves).
    check_python: bool = True
    # A starting agent adopts the tasks its predecessor left running (else stops them).
    adopt_on_restart: bool = True
    # Largest gRPC message the Worker service accepts and sends (bytes); gRPC refuses a
    # larger one with RESOURCE_EXHAUSTED before the agent reads it.
    max_receive_message_bytes: int = 4 * 1024 * 1024
    max_send_message_bytes: int = 16 * 1024 * 1024

    def node_name(self) -> str:
        return self.node or socket.gethostname()

    def resolved_checkpoint_dir(self) -> Path:
        return self.checkpoint_dir or self.state_dir / "checkpoints"

    def resolved_jobs_dir(self) -> Path:
        return self.jobs_dir or self.state_dir / "jobs"

    def validate(self, require_master: bool = True) -> WorkerSettings:
        """Checks every field; returns self with the token file read in. A worker that talks
        to a master (`require_master`) needs the cluster token: its Worker service never
        serves unauthenticated calls."""
        if not self.master and require_master:
            raise SettingsError(
                "master: required (HOST:PORT of the master), e.g. --master head:50051"
            )
        if self.master:
            # One address, or the active master's and its standbys' separated by commas.
            for address in self.master.split(","):
                parse_host_port(address, "master", allow_zero_port=False)
        parse_host_port(self.listen, "listen")
        if self.advertise:
            parse_host_port(self.advertise, "advertise", allow_zero_port=False)
        for name in (
            "grace_s",
            "progress_interval_s",
            "heartbeat_interval_s",
            "register_backoff_initial_s",
            "register_backoff_max_s",
            "rpc_timeout_s",
        ):
            if not getattr(self, name) > 0:
                raise SettingsError(f"{name}: must be positive, got {getattr(self, name)}")
        if self.fake_gpu_reference_speed < 0:
            raise SettingsError("fake_gpu_reference_speed: must be >= 0")
        if self.log_retention_days <= 0:
            raise SettingsError("log_retention_days: must be positive")
        if self.checkpoint_interval_s < 0:
            raise SettingsError("checkpoint_interval_s: must be >= 0")
        if self.failure_tail_lines < 0:
            raise SettingsError("failure_tail_lines: must be >= 0")
        for name in ("max_receive_message_bytes", "max_send_message_bytes"):
            if getattr(self, name) < MIN_MESSAGE_BYTES:
                raise SettingsError(f"{name}: must be >= {MIN_MESSAGE_BYTES}")
        try:
            validate_name_table(self.gpu_names)
        except GpuError as exc:
            raise SettingsError(str(exc)) from exc
        for gpu_type, speed in self.fake_gpu_speeds.items():
            if not isinstance(speed, int | float) or not speed > 0:
                raise SettingsError(f"fake_gpu_speeds.{gpu_type}: must be a positive number")
        if self.master_ca_file is not None and not self.master_ca_file.is_file():
            raise SettingsError(f"master_ca_file: {self.master_ca_file} is not a readable file")
        for first, second in (("master_client_cert", "master_client_key"), ("tls_cert", "tls_key")):
            if (getattr(self, first) is None) != (getattr(self, second) is None):
                raise SettingsError(f"{first} and {second} go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise SettingsError(
                "tls_client_ca needs tls_cert and tls_key (client certificates need TLS)"
            )
        for name in PEM_FIELDS:
            path = getattr(self, name)
            if path is not None:
                read_pem(path, name)
        token = self.token
        if not token and self.token_file is not None:
            try:
                token = self.token_file.read_text().strip()
            except OSError as exc:
                raise SettingsError(f"token_file: cannot read {self.token_file}: {exc}") from exc
            if not token:
                raise SettingsError(f"token_file: {self.token_file} is empty")
        if not token and require_master:
            raise SettingsError(TOKEN_REQUIRED)
        return replace(self, token=token)

    def server_options(self) -> list[tuple[str, int]]:
        """gRPC options of the Worker service."""
        return [
            ("grpc.max_receive_message_length", self.max_receive_message_bytes),
            ("grpc.max_send_message_length", self.max_send_message_bytes),
        ]

    def master_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials for the master's channel, or None for plaintext."""
        if self.master_ca_file is None and self.master_client_cert is None and not self.master_tls:
            return None
        roots = read_pem(self.master_ca_file, "master_ca_file") if self.master_ca_file else None
        if self.master_client_cert is None or self.master_client_key is None:
            return grpc.ssl_channel_credentials(roots)
        return grpc.ssl_channel_credentials(
            roots,
            private_key=read_pem(self.master_client_key, "master_client_key"),
            certificate_chain=read_pem(self.master_client_cert, "master_client_cert"),
        )

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """TLS for the Worker service (requiring a client certificate with `tls_client_ca`),
        or None for plaintext."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        pair = (read_pem(self.tls_key, "tls_key"), read_pem(self.tls_cert, "tls_cert"))
        if self.tls_client_ca is None:
            return grpc.ssl_server_credentials([pair])
        return grpc.ssl_server_credentials(
            [pair],
            root_certificates=read_pem(self.tls_client_ca, "tls_client_ca"),
            require_client_auth=True,
        )


def read_pem(path: Path, setting: str) -> bytes:
    """A PEM file's bytes; SettingsError naming the setting when it cannot be used."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise SettingsError(f"{setting}: {path} is not a PEM file")
    return data


#: Settings that name a PEM file (certificates and keys for TLS to and from the worker).
PEM_FIELDS = (
    "master_ca_file",
    "master_client_cert",
    "master_client_key",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
)
_PATH_FIELDS = {
    "state_dir",
    "checkpoint_dir",
    "jobs_dir",
    "token_file",
    *PEM_FIELDS,
}
_BOOL_FIELDS = {"master_tls", "allow_root_jobs", "adopt_on_restart", "check_python"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_FLOAT_FIELDS = {
    "log_retention_days",
    "fake_gpu_reference_speed",
    "grace_s",
    "progress_interval_s",
    "heartbeat_interval_s",
    "checkpoint_interval_s",
    "register_backoff_initial_s",
    "register_backoff_max_s",
    "rpc_timeout_s",
}
_INT_FIELDS = {"failure_tail_lines", "max_receive_message_bytes", "max_send_message_bytes"}
_TABLE_FIELDS = {"fake_gpu_speeds", "gpu_names"}
FIELD_NAMES = frozenset(f.name for f in fields(WorkerSettings))


def _coerce(name: str, value: Any, source: str) -> Any:
    if name not in FIELD_NAMES:
        raise SettingsError(f"{source}: unknown setting {name!r}")
    if name in _TABLE_FIELDS:
        if not isinstance(value, Mapping):
            raise SettingsError(f"{source}: {name} must be a table")
        return dict(value)
    if value is None:
        return None
    if name in _PATH_FIELDS:
        return Path(str(value)) if str(value) else None
    if name in _BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise SettingsError(f"{source}: {name} must be true or false, got {value!r}")
    try:
        if name in _FLOAT_FIELDS:
            return float(value)
        if name in _INT_FIELDS:
            return int(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{source}: {name} must be a number, got {value!r}") from exc
    if not isinstance(value, str):
        raise SettingsError(f"{source}: {name} must be a string, got {value!r}")
    return value


def values_from_toml(path: Path) -> dict[str, Any]:
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise SettingsError(f"config: cannot read {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config: {path} is not valid TOML: {exc}") from exc
    return {key: _coerce(key, value, f"config {path}") for key, value in raw.items()}


def values_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in FIELD_NAMES - _TABLE_FIELDS:
        key = ENV_PREFIX + name.upper()
        if key in environ:
            values[name] = _coerce(name, environ[key], key)
    return values


def load_settings(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
    require_master: bool = True,
) -> WorkerSettings:
    """Defaults < TOML file < environment < flags (flags that are None are unset)."""
    env = os.environ if environ is None else environ
    if config_path is None and env.get(ENV_PREFIX + "CONFIG"):
        config_path = Path(env[ENV_PREFIX + "CONFIG"])
    values: dict[str, Any] = {}
    if config_path is not None:
        values.update(values_from_toml(config_path))
    values.update(values_from_env(env))
    for name, value in flags.items():
        if value is not None:
            values[name] = _coerce(name, value, f"--{name.replace('_', '-')}")
    settings = WorkerSettings(**values)
    return settings.validate(require_master=require_master)
