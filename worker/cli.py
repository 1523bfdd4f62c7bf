"""``hadar-worker``: the worker daemon (``run``), GPU discovery (``gpus``) and profiling
(``profile``). Settings come from flags, ``HADAR_WORKER_*`` variables and a TOML file
(``--config``); see docs/worker.md."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import structlog

from worker.gpus import GpuError, GpuInfo, GpuProvider, make_gpu_provider
from worker.settings import PEM_FIELDS, SettingsError, WorkerSettings, load_settings

if TYPE_CHECKING:
    from worker.agent.agent import WorkerAgent

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1
# `run` after SIGUSR2: left the tasks running for the next agent (systemd restarts it).
EXIT_RESTART = 75


def _settings_flags(parser: argparse.ArgumentParser, daemon: bool) -> None:
    add = parser.add_argument
    add("--config", type=Path, help="TOML settings file (also HADAR_WORKER_CONFIG)")
    add("--master", help="HOST:PORT of the master's worker-facing service")
    add(
        "--master-tls",
        action="store_true",
        default=None,
        help="connect to the master over TLS (system roots)",
    )
    add("--master-ca-file", type=Path, help="CA bundle for a TLS master (implies TLS)")
    add("--master-client-cert", type=Path, help="client certificate for the master (PEM)")
    add("--master-client-key", type=Path, help="key of --master-client-cert (PEM)")
    add("--node", help="unique node name (default: the hostname)")
    add("--fake-gpus", help="fake GPUs instead of NVML, e.g. 'v100:2,k80:4' or 'a6000:1@1.5'")
    add(
        "--fake-gpu-reference-speed",
        type=float,
        help="fake speed that runs at full host speed (default: the fastest in the table)",
    )
    add("--token", help="cluster token (prefer --token-file or HADAR_WORKER_TOKEN)")
    add("--token-file", type=Path, help="file holding the cluster token")
    add("--state-dir", type=Path, help="logs, progress and the agent's state")
    add("--rpc-timeout-s", type=float, help="timeout of each call to the master")
    if not daemon:
        return
    add("--listen", help="HOST:PORT for the Worker service (port 0: any free port)")
    add("--advertise", help="HOST:PORT the master should call (default: hostname:bound port)")
    add("--tls-cert", type=Path, help="serve the Worker service over TLS with this certificate")
    add("--tls-key", type=Path, help="key of --tls-cert (PEM)")
    add("--tls-client-ca", type=Path, help="require client certificates signed by this CA")
    add("--checkpoint-dir", type=Path, help="default checkpoint root (shared filesystem)")
    add("--jobs-dir", type=Path, help="default working directory root for jobs")
    add("--grace-s", type=float, help="seconds a stopping task has to checkpoint")
    add("--progress-interval-s", type=float, help="seconds between progress reports")
    add("--heartbeat-interval-s", type=float, help="heartbeat interval until the master says")
    add("--checkpoint-interval-s", type=float, help="periodic checkpoints inside a lease")
    add("--python", help="interpreter for built-in workloads (default: this one)")
    add("--log-retention-days", type=float, help="keep exited tasks' logs this long")


_SETTINGS_ARGS = {
    "master",
    "master_tls",
    *PEM_FIELDS,
    "node",
    "fake_gpus",
    "fake_gpu_reference_speed",
    "token",
    "token_file",
    "state_dir",
    "rpc_timeout_s",
    "listen",
    "advertise",
    "checkpoint_dir",
    "jobs_dir",
    "grace_s",
    "progress_interval_s",
    "heartbeat_interval_s",
    "checkpoint_interval_s",
    "python",
    "log_retention_days",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hadar-worker", description=__doc__)
    parser.add_argument(
        "--log-format", choices=("console", "json"), default="console", help="log output"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the worker agent (the daemon)")
    _settings_flags(run, daemon=True)

    gpus = commands.add_parser("gpus", help="print this node's GPUs as the master will see them")
    _settings_flags(gpus, daemon=False)
    gpus.add_argument("--json", action="store_true", help="JSON output")

    profile = commands.add_parser(
        "profile", help="measure the built-in workloads on this node and report to the master"
    )
    _settings_flags(profile, daemon=False)
    profile.add_argument(
        "--workloads", help="comma-separated workload names (default: all built-in ones)"
    )
    profile.add_argument(
        "--iterations", type=int, default=20, help="timed iterations per workload (default 20)"
    )
    profile.add_argument("--batch-size", type=int, help="batch size (default: each workload's)")
    profile.add_argument(
        "--dry-run", action="store_true", help="print the measurements, report nothing"
    )
    return parser


def _configure_logging(fmt: str, verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, stream=sys.stderr, format="%(message)s")
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # Resolved per logger, so a replaced sys.stderr is honoured.
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
    )


def _load(args: argparse.Namespace, require_master: bool) -> WorkerSettings:
    flags = {name: getattr(args, name) for name in _SETTINGS_ARGS if hasattr(args, name)}
    return load_settings(flags, config_path=args.config, require_master=require_master)


def _provider(settings: WorkerSettings) -> GpuProvider:
    return make_gpu_provider(
        settings.fake_gpus or None,
        settings.fake_gpu_speeds,
        settings.gpu_names,
        fake_reference_speed=settings.fake_gpu_reference_speed or None,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from worker.agent import signals, systemd
    from worker.agent.agent import WorkerAgent

    settings = _load(args, require_master=True)
    if settings.check_python:
        _check_python(settings)
    signals.handle_ignored()
    agent = WorkerAgent(settings, _provider(settings))
    agent.start()
    done = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        structlog.get_logger("hadar.worker").info("shutdown", signal=signal.Signals(signum).name)
        received.append(signum)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # Restart without stopping the jobs: the next agent adopts them.
    signal.signal(signal.SIGUSR2, on_signal)
    print(f"hadar-worker {agent.node} serving on {agent.address}", file=sys.stderr, flush=True)
    # Ready once serving, not once registered: a master that is down must not fail the
    # worker's start (it keeps trying to register meanwhile).
    if systemd.notify(f"READY=1\nSTATUS=serving on {agent.address}"):
        threading.Thread(
            target=_notify_systemd, args=(agent, done), name="worker-systemd", daemon=True
        ).start()
    done.wait()
    systemd.notify("STOPPING=1")
    restart = received[0] == signal.SIGUSR2
    agent.stop(stop_tasks=not restart)
    return EXIT_RESTART if restart else 0


def _check_python(settings: WorkerSettings) -> None:
    """Refuses to start (SettingsError) when jobs' users could not run the interpreter that
    built-in workloads run with."""
    from worker.agent.agent import job_base_env
    from worker.agent.interpreter import InterpreterError, check_job_interpreter
    from worker.agent.processes import SubprocessLauncher

    python = settings.python or sys.executable
    try:
        check_job_interpreter(python, SubprocessLauncher(), env=job_base_env())
    except InterpreterError as exc:
        if settings.python:
            raise SettingsError(f"python: {exc}") from None
        raise SettingsError(str(exc)) from None


def _notify_systemd(agent: WorkerAgent, done: threading.Event) -> None:
    """Keeps systemd's STATUS= current and, under WatchdogSec=, pings the watchdog while the
    supervision loop runs (a wedged loop stops the pings and systemd restarts the agent)."""
    from worker.agent import systemd

    watchdog = systemd.watchdog_interval_s()
    period = min(watchdog / 4, 5.0) if watchdog else 5.0
    status = ""
    while not done.wait(period):
        master = agent.settings.master
        tasks = len(agent.supervisor.running_keys())
        connection = f"registered with {master}" if agent.registered else f"no master ({master})"
        current = f"{connection}; {tasks} task(s)"
        if current != status:
            systemd.notify(f"STATUS={current}")
            status = current
        if watchdog and time.monotonic() - agent.supervised_at < watchdog / 2:
            systemd.notify("WATCHDOG=1")


def _gpu_row(gpu: GpuInfo) -> dict[str, object]:
    return {
        "index": gpu.index,
        "type": gpu.type,
        "memory_gib": round(gpu.memory_bytes / 1024**3, 1),
        "device_name": gpu.device_name,
        "uuid": gpu.uuid,
        "healthy": gpu.healthy,
        "problem": gpu.problem,
        "fake": gpu.fake,
        "fake_speed": gpu.fake_speed,
    }


def cmd_gpus(args: argparse.Namespace) -> int:
    settings = _load(args, require_master=False)
    gpus = _provider(settings).discover()
    if args.json:
        print(json.dumps([_gpu_row(g) for g in gpus], indent=2))
        return 0
    for gpu in gpus:
        what = f"fake, speed {gpu.fake_speed:g}" if gpu.fake else gpu.device_name
        health = "healthy" if gpu.healthy else f"UNHEALTHY: {gpu.problem}"
        print(
            f"{gpu.index:>3}  {gpu.type:<12} {gpu.memory_bytes / 1024**3:6.1f} GiB  "
            f"{what}  {health}"
        )
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from worker.agent.profiling import ProfileError, measure_node, report_profile

    settings = _load(args, require_master=not args.dry_run)
    names = [n.strip() for n in args.workloads.split(",")] if args.workloads else None
    try:
        entries = measure_node(
            _provider(settings).discover(),
            names,
            iterations=args.iterations,
            batch_size=args.batch_size,
        )
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for entry in entries:
        print(
            f"{entry.workload:16} {entry.gpu_type:12} {entry.iterations_per_s:10.2f} it/s  "
            f"{entry.job_type}"
        )
    if args.dry_run:
        return 0
    try:
        stored = report_profile(settings, entries)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"reported {len(entries)} measurements; the master stored {stored}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        _configure_logging(args.log_format, args.verbose)
    commands = {"run": cmd_run, "gpus": cmd_gpus, "profile": cmd_profile}
    try:
        return commands[args.command](args)
    except (SettingsError, GpuError) as exc:
        print(f"hadar-worker: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"hadar-worker: {exc}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
