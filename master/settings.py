"""The master's settings: one typed object from a TOML file, HADAR_* variables and flags.

Precedence, lowest first: built-in defaults, the TOML file, the environment, flags. With no
file at all the master runs: SQLite in ./hadar.db (or under $STATE_DIRECTORY when systemd
provides one), listening on 127.0.0.1:50051, one round a minute.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from master.process.cpus import check as check_serving_cpu
from master.scheduling.churn import DEFAULT_RESTART_S
from master.scheduling.fairshare import FairShareConfig
from master.scheduling.forecast import DEFAULT_HORIZON_S, DEFAULT_MAX_ROUNDS
from master.service.admission import AdmissionLimits
from protos.durations import parse_duration

ENV_PREFIX = "HADAR_"
AuthMode = Literal["token", "none"]
LogFormat = Literal["auto", "json", "console"]
JobDataReaders = Literal["owner", "group"]
# Below this, ordinary calls (a job with a few environment variables) would not fit.
MIN_MESSAGE_BYTES = 64 * 1024
# The pause after a call to a worker failed, doubled after each further failure
# (master.nodes.workers).
DISPATCH_BACKOFF_S = 0.1


def push_budget_s(timeout_s: float, attempts: int) -> float:
    """The longest one call to a worker can take: every attempt's deadline and the pauses
    between attempts."""
    return timeout_s * attempts + DISPATCH_BACKOFF_S * ((1 << max(0, attempts - 1)) - 1)


class SettingsError(ValueError):
    """A setting with a bad value; the message names the setting and where it came from."""


def _state_dir() -> Path:
    state = os.environ.get("STATE_DIRECTORY", "")
    # systemd may pass several directories separated by ':'; the first is ours.
    return Path(state.split(":")[0]) if state else Path.cwd()


def default_database() -> str:
    return f"sqlite:///{_state_dir() / 'hadar.db'}"


def default_checkpoint_dir() -> str:
    return str(_state_dir() / "checkpoints")


@dataclass(frozen=True, slots=True)
class Settings:
    # Where the gRPC API listens (host:port; port 0 picks a free one).
    listen: str = "127.0.0.1:50051"
    # SQLAlchemy URL or a file path (SQLite); postgresql:// URLs use psycopg 3.
    database: str = field(default_factory=default_database)
    # At start, keep trying to reach the database this long (exponential backoff) before
    # giving up with one line naming the cause; systemd restarts the master after that.
    database_wait_s: float = 60.0
    # Scheduling.
    # The best measured policy (docs/results.md): lowest average JCT without a worse tail.
    policy: str = "hadare"
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    round_seconds: float = 60.0
    # Start a round soon after a submission or an exit when GPUs are idle.
    early_rounds: bool = True
    early_round_delay_s: float = 1.0
    # An early round also waits, after the last round ended, this many times as long as
    # that round took: under load (rounds of a long queue, GPUs freed every second) rounds
    # would otherwise run back to back and take the interpreter from every call. 3.0 keeps
    # rounds to at most about a quarter of the master's time; 0 turns the spacing off.
    early_round_spacing: float = 3.0
    # A lease lasts this many rounds unless extended; a worker keeps running its tasks that
    # long while the master is away (a restart, an upgrade), then stops its preemptible
    # ones. A lost node's preemptible jobs start elsewhere only once their leases are over
    # (lost_lease_hold_s): a longer lease survives a longer master outage, a shorter one
    # recovers sooner from a lost worker.
    lease_rounds: int = 5
    min_migration_gain: float = 0.1
    # Seconds one move (migration, resize, new copies) costs a running job: a checkpoint and
    # a restart. A move is made only when it wins this back within the next round.
    restart_cost_s: float = DEFAULT_RESTART_S
    # Expected start times (hctl queue --start): after a round, once `forecast_interval_s`
    # has passed since the last forecast ended (0: never), the policy is run forward over
    # the queue off the round thread, for at most `forecast_horizon_s` of simulated time,
    # `forecast_max_rounds` decided rounds and `forecast_budget_s` of computing
    # (master/scheduling/forecast.py).
    forecast_interval_s: float = 60.0
    forecast_horizon_s: float = DEFAULT_HORIZON_S
    forecast_max_rounds: int = DEFAULT_MAX_ROUNDS
    forecast_budget_s: float = 30.0
    # Once a round offers the policy this many jobs, the next rounds read the store and
    # decide in a child process (master/rounds/planner.py), off the interpreter that serves
    # the calls; 0: always on the round's thread.
    planning_process_from_jobs: int = 1000
    # The CPU every thread of `hadar-master run` keeps to, the planning and forecasting
    # processes getting the others (master/process/cpus.py): "auto" (one of them, when the
    # process may use two or more), "off", or a CPU number.
    serving_cpu: str = "auto"
    # Gavel-format throughputs JSON used before measurements exist; empty: priors only.
    throughput_profile: str = ""
    gpu_speeds: Mapping[str, float] = field(default_factory=dict)
    # Workers.
    heartbeat_interval_s: float = 5.0
    heartbeat_timeout_s: float = 30.0
    max_retries: int = 3
    # Time limits (sbatch --time), written as durations (`2h`, `7-00:00:00`; see
    # protos/durations.py). A job asking for more than `max_time_limit` is refused; one that
    # asks for none gets `default_time_limit`. Empty: no maximum, no default.
    max_time_limit: str = ""
    default_time_limit: str = ""
    # Most elements one job array may have (hctl submit --array); larger ones are refused.
    max_array_size: int = 1000
    # Fair share between users (docs/admin.md "Fair share and GPU quotas"): off by default,
    # so a cluster's policy orders jobs as documented until the admin turns it on. Shares
    # per user and per group (group -> its members; a user in one group at most); unlisted
    # users and groups have fair_share_default. Usage decays with fair_share_half_life.
    fair_share: bool = False
    fair_share_users: Mapping[str, float] = field(default_factory=dict)
    fair_share_groups: Mapping[str, Any] = field(default_factory=dict)
    fair_share_group_shares: Mapping[str, float] = field(default_factory=dict)
    fair_share_default: float = 1.0
    fair_share_half_life: str = "7d"
    # GPUs one user may hold at once, whatever fair share says (0: no limit), and
    # per-user overrides (0: no limit for that user).
    max_gpus_per_user: int = 0
    gpu_quotas: Mapping[str, float] = field(default_factory=dict)
    # How often the master looks for jobs that reached their time limit.
    time_limit_check_s: float = 5.0
    grace_s: float = 30.0
    # Webhooks told when jobs end (docs/admin.md). They are sent from the master's host.
    # `webhook_allow_hosts`: comma-separated host names a webhook URL may name (`*.example.org`
    # matches subdomains); empty allows any. `webhook_schemes`: `https` alone refuses plain
    # http. A delivery is tried `webhook_max_attempts` times, waiting `webhook_backoff_s`,
    # then twice as long each time, at most `webhook_backoff_max_s`. With a
    # `webhook_secret`, each POST carries an HMAC-SHA256 of its body (X-Hadar-Signature).
    webhooks_enabled: bool = True
    webhook_allow_hosts: str = ""
    webhook_schemes: str = "http,https"
    webhook_secret: str = ""
    webhook_timeout_s: float = 10.0
    webhook_max_attempts: int = 6
    webhook_backoff_s: float = 30.0
    webhook_backoff_max_s: float = 3600.0
    # How often the sender looks for calls due when nothing woke it sooner.
    webhook_poll_s: float = 5.0
    # Calls in flight at once, so one slow endpoint does not hold the others back.
    webhook_concurrency: int = 4
    dispatch_timeout_s: float = 5.0
    dispatch_attempts: int = 3
    # One active master per database (docs/install.md, "A standby master"): the active
    # master renews its lease every `leader_renew_s`; a standby takes over once the lease
    # has gone `leader_lease_s` without renewal (at once on SQLite, where the lock file
    # beside the database dies with its holder).
    leader_lease_s: float = 10.0
    leader_renew_s: float = 3.0
    checkpoint_dir: str = field(default_factory=default_checkpoint_dir)
    # Security: "token" checks API tokens and the cluster token; "none" (local development
    # only) trusts the x-hadar-user header, or the master's OS user, and treats everyone as
    # an admin.
    auth: AuthMode = "token"
    # Workers present it to join. Empty: the master creates one in cluster_token_file.
    cluster_token: str = ""
    cluster_token_file: str = field(default_factory=lambda: str(_state_dir() / "cluster-token"))
    # TLS for the gRPC port (PEM files). With `tls_client_ca` every caller (workers, hctl,
    # programs) must present a client certificate signed by that CA.
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    # TLS to the workers' Worker service: set `worker_ca_file` (the CA that signed the
    # workers' certificates) and the master calls every worker over TLS; it presents
    # `worker_client_cert`/`worker_client_key` to workers that require a client certificate.
    worker_ca_file: str = ""
    worker_client_cert: str = ""
    worker_client_key: str = ""
    # Who may read a job's output, command line, environment values, paths and
    # checkpoints: "owner" (and admins), or "group": also the members of the owner's
    # fair_share_groups group. Everyone may see the queue (id, user, name, state, GPUs,
    # times, placement, reason) either way.
    job_data_readers: JobDataReaders = "owner"
    # Limits per user (0: unlimited). Waiting jobs are PENDING or PREEMPTED ones; the rate is
    # a token bucket of `submit_burst_per_user` submissions refilled at this many a second.
    max_pending_jobs_per_user: int = 0
    submit_rate_per_user: float = 0.0
    submit_burst_per_user: int = 20
    # Largest gRPC message the master accepts and sends (bytes); gRPC itself refuses a larger
    # one with RESOURCE_EXHAUSTED before any of Hadar's code reads it.
    max_receive_message_bytes: int = 4 * 1024 * 1024
    max_send_message_bytes: int = 16 * 1024 * 1024
    # Observability. metrics_port: 0 picks a free port, -1 disables the endpoint.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9464
    log_format: LogFormat = "auto"
    log_level: str = "info"
    # Serving: user calls are admitted against these caps (master/service/admission.py),
    # refused past them with RESOURCE_EXHAUSTED, so that `worker_rpc_threads` of the
    # server's threads are always free for the workers' heartbeats and reports.
    # grpc_threads: user calls (not streams) served at once. A submission holds its call
    # while its group commits, so the calls in flight are the rate times the wait: at 100
    # submissions a second, a round's write of 0.2 s puts 20 in flight, none of them using
    # the interpreter meanwhile.
    grpc_threads: int = 32
    max_calls_per_user: int = 8
    # Open WatchJobs and StreamLogs calls; each holds a thread while open.
    max_streams: int = 64
    max_streams_per_user: int = 8
    # Workers' reports take at most half of these; at 200 workers about 45 arrive a second,
    # and a report waits for the job lock, which a round holds while it stores its
    # decisions: a round's write of 0.3 s holds about 14 of them waiting, one of 0.7 s
    # about 32. Threads waiting for a lock cost no CPU.
    worker_rpc_threads: int = 64

    @property
    def max_time_limit_s(self) -> int:
        """The cluster's longest time limit in seconds; 0 when there is none."""
        return parse_duration(self.max_time_limit) if self.max_time_limit.strip() else 0

    @property
    def default_time_limit_s(self) -> int:
        """The limit of a job that gives none, in seconds; 0 when there is none."""
        return parse_duration(self.default_time_limit) if self.default_time_limit.strip() else 0

    @property
    def admission(self) -> AdmissionLimits:
        """The caps user calls are admitted against (see master/service/admission.py)."""
        return AdmissionLimits(
            streams_per_user=self.max_streams_per_user,
            calls_per_user=self.max_calls_per_user,
            streams=self.max_streams,
            calls=self.grpc_threads,
            worker_threads=self.worker_rpc_threads,
        )

    @property
    def lease_s(self) -> float:
        """How long a lease lasts unless extended."""
        return self.round_seconds * self.lease_rounds

    @property
    def extension_spread_s(self) -> float:
        """How long a scheduled round may take to hand out its lease extensions (see
        master.nodes.pacing): half the round, less where the lease leaves less room. A
        lease extended last in the spread must still outlast the next round, that
        round's spread and push with every retry, and one more round of margin."""
        room = self.lease_s - 2 * self.round_seconds - self.push_budget_s
        return max(0.0, min(self.round_seconds / 2, room))

    @property
    def lease_renewal_age_s(self) -> float:
        """How long ago a worker may have acknowledged a lease that a round still leaves
        alone (master/rounds/renewals.py): half a round, less where the lease leaves less
        room. A renewal skipped at that age comes that much later than a scheduled round's
        would, so the lease must still outlast it beside everything extension_spread_s
        allows for, and a silence just short of the heartbeat timeout, the round after it
        and its spread."""
        spread = self.extension_spread_s
        room = self.lease_s - 2 * self.round_seconds - self.push_budget_s - spread
        silence = self.lease_s - self.heartbeat_timeout_s - self.round_seconds - spread
        return max(0.0, min(self.round_seconds / 2, room, silence))

    @property
    def push_budget_s(self) -> float:
        """The longest one push to a worker can take, retries included."""
        return push_budget_s(self.dispatch_timeout_s, self.dispatch_attempts)

    @property
    def lost_lease_hold_s(self) -> float:
        """How long after a node is lost its preemptible tasks may still run: the lease
        (sent at the latest as the node was lost), the worker's grace to stop them, and one
        round of margin (clock differences, a round in flight as the node was lost)."""
        return self.lease_s + self.grace_s + self.round_seconds

    def __post_init__(self) -> None:
        checks: list[tuple[bool, str]] = [
            (self.round_seconds > 0, "round_seconds must be > 0"),
            (self.heartbeat_interval_s > 0, "heartbeat_interval_s must be > 0"),
            (
                self.heartbeat_timeout_s > self.heartbeat_interval_s,
                "heartbeat_timeout_s must exceed heartbeat_interval_s",
            ),
            (self.max_retries >= 0, "max_retries must be >= 0"),
            (self.grace_s >= 0, "grace_s must be >= 0"),
            (self.max_array_size >= 1, "max_array_size must be >= 1"),
            (self.dispatch_timeout_s > 0, "dispatch_timeout_s must be > 0"),
            (self.dispatch_attempts >= 1, "dispatch_attempts must be >= 1"),
            (self.leader_renew_s > 0, "leader_renew_s must be > 0"),
            (
                self.leader_lease_s >= 2 * self.leader_renew_s,
                "leader_lease_s must be at least twice leader_renew_s (one late renewal "
                "must not cost the lease)",
            ),
            (self.lease_rounds >= 1, "lease_rounds must be >= 1"),
            (self.early_round_delay_s >= 0, "early_round_delay_s must be >= 0"),
            (self.early_round_spacing >= 0, "early_round_spacing must be >= 0"),
            (self.restart_cost_s >= 0, "restart_cost_s must be >= 0"),
            (
                self.forecast_interval_s >= 0,
                "forecast_interval_s must be >= 0 (0 turns expected start times off)",
            ),
            (self.forecast_horizon_s > 0, "forecast_horizon_s must be > 0"),
            (self.forecast_max_rounds >= 1, "forecast_max_rounds must be >= 1"),
            (self.forecast_budget_s > 0, "forecast_budget_s must be > 0"),
            (
                self.planning_process_from_jobs >= 0,
                "planning_process_from_jobs must be >= 0 (0 plans every round on its thread)",
            ),
            (self.auth in get_args(AuthMode), f"auth must be one of {get_args(AuthMode)}"),
            (check_serving_cpu(self.serving_cpu) is None, str(check_serving_cpu(self.serving_cpu))),
            (
                self.job_data_readers in get_args(JobDataReaders),
                f"job_data_readers must be one of {get_args(JobDataReaders)}",
            ),
            (
                self.log_format in get_args(LogFormat),
                f"log_format must be one of {get_args(LogFormat)}",
            ),
            (self.metrics_port >= -1, "metrics_port must be -1 (off), 0 (any) or a port"),
            (bool(self.tls_cert) == bool(self.tls_key), "tls_cert and tls_key go together"),
            (
                not self.tls_client_ca or bool(self.tls_cert),
                "tls_client_ca needs tls_cert and tls_key (client certificates need TLS)",
            ),
            (
                bool(self.worker_client_cert) == bool(self.worker_client_key),
                "worker_client_cert and worker_client_key go together",
            ),
            (
                not self.worker_client_cert or bool(self.worker_ca_file),
                "worker_client_cert needs worker_ca_file (TLS to the workers)",
            ),
            (self.grpc_threads >= 4, "grpc_threads must be >= 4"),
            (self.max_calls_per_user >= 1, "max_calls_per_user must be >= 1"),
            (self.max_streams >= 1, "max_streams must be >= 1"),
            (self.max_streams_per_user >= 1, "max_streams_per_user must be >= 1"),
            (self.worker_rpc_threads >= 2, "worker_rpc_threads must be >= 2"),
            (
                self.max_pending_jobs_per_user >= 0,
                "max_pending_jobs_per_user must be >= 0 (0: unlimited)",
            ),
            (
                self.submit_rate_per_user >= 0 and math.isfinite(self.submit_rate_per_user),
                "submit_rate_per_user must be >= 0 submissions a second (0: unlimited)",
            ),
            (self.submit_burst_per_user >= 1, "submit_burst_per_user must be >= 1"),
            (
                self.max_receive_message_bytes >= MIN_MESSAGE_BYTES,
                f"max_receive_message_bytes must be >= {MIN_MESSAGE_BYTES}",
            ),
            (
                self.max_send_message_bytes >= MIN_MESSAGE_BYTES,
                f"max_send_message_bytes must be >= {MIN_MESSAGE_BYTES}",
            ),
            (":" in self.listen, "listen must be host:port"),
        ]
        for ok, message in checks:
            if not ok:
                raise SettingsError(message)
        self._check_leases()
        self._check_time_limits()
        self._check_webhooks()

    def _check_leases(self) -> None:
        """Refuse leases that end before their renewal can arrive. Workers stop their
        preemptible tasks at lease end, so such a lease would stop healthy jobs."""
        lease = self.lease_s
        # The renewal of a lease comes with the next round's push, which may need all its
        # attempts on a slow worker.
        renewal = self.round_seconds + self.push_budget_s
        pauses = self.push_budget_s - self.dispatch_timeout_s * self.dispatch_attempts
        if lease <= renewal:
            raise SettingsError(
                f"the lease, lease_rounds x round_seconds ({self.lease_rounds} x "
                f"{self.round_seconds:g} s = {lease:g} s), must be longer than round_seconds + "
                "dispatch_timeout_s x dispatch_attempts + the pauses between attempts "
                f"({self.round_seconds:g} + {self.dispatch_timeout_s:g} x "
                f"{self.dispatch_attempts} + {pauses:g} = {renewal:g} s): it would end before "
                "a renewal retried on a slow worker arrives; raise lease_rounds, or lower "
                "dispatch_timeout_s or dispatch_attempts"
            )
        # A node silent for less than the heartbeat timeout is not lost: its leases must
        # outlast such a silence, the round before it that renewed them last and the round
        # after it that renews them again.
        silence = self.heartbeat_timeout_s + 2 * self.round_seconds
        if lease < silence:
            raise SettingsError(
                f"the lease, lease_rounds x round_seconds ({self.lease_rounds} x "
                f"{self.round_seconds:g} s = {lease:g} s), must last at least "
                f"heartbeat_timeout_s + 2 x round_seconds ({self.heartbeat_timeout_s:g} + 2 x "
                f"{self.round_seconds:g} = {silence:g} s): a worker silent for less than the "
                "heartbeat timeout is not lost, and must not stop its jobs either; raise "
                "lease_rounds or lower heartbeat_timeout_s"
            )

    @property
    def webhook_hosts(self) -> tuple[str, ...]:
        """Host patterns a webhook may name, lower case; empty allows any."""
        return tuple(h.strip().lower() for h in self.webhook_allow_hosts.split(",") if h.strip())

    @property
    def webhook_scheme_set(self) -> frozenset[str]:
        return frozenset(s.strip().lower() for s in self.webhook_schemes.split(",") if s.strip())

    def _check_webhooks(self) -> None:
        checks: list[tuple[bool, str]] = [
            (
                bool(self.webhook_scheme_set)
                and self.webhook_scheme_set <= frozenset({"http", "https"}),
                "webhook_schemes must list http, https or both",
            ),
            (self.webhook_timeout_s > 0, "webhook_timeout_s must be > 0"),
            (self.webhook_max_attempts >= 1, "webhook_max_attempts must be >= 1"),
            (self.webhook_backoff_s >= 0, "webhook_backoff_s must be >= 0"),
            (
                self.webhook_backoff_max_s >= self.webhook_backoff_s,
                "webhook_backoff_max_s must be >= webhook_backoff_s",
            ),
            (self.webhook_poll_s > 0, "webhook_poll_s must be > 0"),
            (self.webhook_concurrency >= 1, "webhook_concurrency must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise SettingsError(message)

    def _check_time_limits(self) -> None:
        limits: dict[str, int] = {}
        for name in ("max_time_limit", "default_time_limit"):
            try:
                limits[name] = getattr(self, f"{name}_s")
            except ValueError as exc:
                raise SettingsError(f"{name}: {exc}") from None
        if limits["max_time_limit"] and limits["default_time_limit"] > limits["max_time_limit"]:
            raise SettingsError(
                f"default_time_limit ({self.default_time_limit}) must not exceed "
                f"max_time_limit ({self.max_time_limit})"
            )
        if self.time_limit_check_s <= 0:
            raise SettingsError("time_limit_check_s must be > 0")
        self.fair_share_settings()  # validates

    def fair_share_config(self) -> FairShareConfig | None:
        """The shares and quotas the rounds apply; None when neither is set."""
        if not self.fair_share and not self.max_gpus_per_user and not self.gpu_quotas:
            return None
        return self.fair_share_settings()

    def fair_share_settings(self) -> FairShareConfig:
        """The fair-share settings as configured, whether or not they are on (for
        reports)."""
        groups: dict[str, tuple[str, ...]] = {}
        for group, given in self.fair_share_groups.items():
            # From the environment: members separated by '|' (vision=alice|carol).
            members = given.replace("|", " ").split() if isinstance(given, str) else given
            if not isinstance(members, list | tuple) or not all(
                isinstance(m, str) for m in members
            ):
                raise SettingsError(
                    f"fair_share groups: members of {group!r} must be a list of user names"
                )
            groups[group] = tuple(members)
        quotas: dict[str, int] = {}
        for user, quota in self.gpu_quotas.items():
            if float(quota) != int(quota):
                raise SettingsError(f"gpu_quotas: quota of {user!r} must be a whole number")
            quotas[user] = int(quota)
        try:
            return FairShareConfig(
                enabled=self.fair_share,
                user_shares={u: float(v) for u, v in self.fair_share_users.items()},
                groups=groups,
                group_shares={g: float(v) for g, v in self.fair_share_group_shares.items()},
                default_share=self.fair_share_default,
                half_life_s=float(parse_duration(self.fair_share_half_life)),
                max_gpus_per_user=self.max_gpus_per_user,
                user_quotas=quotas,
            )
        except ValueError as exc:
            raise SettingsError(f"fair share: {exc}") from None

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def _coerce(name: str, value: Any, source: str) -> Any:
    """Convert a TOML or string value to the field's type, with a precise error."""
    kind = str(_FIELDS[name].type)
    try:
        if kind == "float":
            if isinstance(value, bool):
                raise TypeError
            return float(value)
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError
            return int(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise TypeError
        if kind.startswith("Mapping"):
            if isinstance(value, str):
                return _parse_pairs(value, float if "float" in kind else _scalar)
            if not isinstance(value, Mapping):
                raise TypeError
            return dict(value)
        if not isinstance(value, str):
            raise TypeError
        return value
    except (TypeError, ValueError):
        raise SettingsError(f"{source}: bad value {value!r} for {name} ({kind})") from None


def _scalar(text: str) -> Any:
    """A policy parameter from the environment: a number or a boolean where it reads as one."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    lowered = text.lower()
    return {"true": True, "false": False}.get(lowered, text)


def _parse_pairs(text: str, kind: Callable[[str], Any]) -> dict[str, Any]:
    """`a=1,b=2` (for mappings given in the environment)."""
    out: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(item)
        out[key.strip()] = kind(value.strip())
    return out


def from_mapping(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in values.items():
        key = name.replace("-", "_")
        if key not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise SettingsError(f"{source}: unknown setting {name!r}; known: {known}")
        out[key] = _coerce(key, value, source)
    return out


def from_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SettingsError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML: {exc}") from None
    # Both a flat file and one with a [master] table are accepted.
    table = data.get("master", data)
    if not isinstance(table, Mapping):
        raise SettingsError(f"{path}: [master] must be a table")
    table = dict(table)
    # A [fair_share] table (top level or [master.fair_share]) names its keys shortly.
    section = (
        table.pop("fair_share", None) if isinstance(table.get("fair_share"), Mapping) else None
    )
    if section is None and isinstance(data.get("fair_share"), Mapping) and "master" in data:
        section = data["fair_share"]
    if section is not None:
        for key, value in section.items():
            name = FAIR_SHARE_KEYS.get(key.replace("-", "_"))
            if name is None:
                known = ", ".join(sorted(FAIR_SHARE_KEYS))
                raise SettingsError(f"{path}: unknown key {key!r} in [fair_share]; known: {known}")
            table[name] = value
    return from_mapping(table, str(path))


#: Keys of the [fair_share] table -> settings.
FAIR_SHARE_KEYS = {
    "enabled": "fair_share",
    "users": "fair_share_users",
    "groups": "fair_share_groups",
    "group_shares": "fair_share_group_shares",
    "default_share": "fair_share_default",
    "half_life": "fair_share_half_life",
    "max_gpus_per_user": "max_gpus_per_user",
    "quotas": "gpu_quotas",
}


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    values = {
        key[len(ENV_PREFIX) :].lower(): value
        for key, value in environ.items()
        if key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX) :].lower() in _FIELDS
    }
    return from_mapping(values, "environment")


def load(
    config: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Defaults < file < HADAR_* environment < overrides (flags)."""
    values: dict[str, Any] = {}
    env = os.environ if environ is None else environ
    path = config
    if path is None and env.get("HADAR_CONFIG"):
        path = Path(env["HADAR_CONFIG"])
    if path is not None:
        values.update(from_file(path))
    values.update(from_environment(env))
    values.update(
        from_mapping({k: v for k, v in (overrides or {}).items() if v is not None}, "flags")
    )
    return Settings(**values)
