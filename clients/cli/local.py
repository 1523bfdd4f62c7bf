"""``hctl local``: a real cluster on this machine (a master and fake-GPU workers).

``up`` starts it and waits until every worker is registered, ``status`` shows its processes
and GPUs, ``down`` stops everything it started (job processes included), and ``demo`` runs a
mix of built-in workloads on a fresh cluster from start to finish.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from clients.cli.command import CliError, Command, Context, ExitCode
from clients.config import ENV_CONFIG, ENV_MASTER, ENV_TOKEN
from protos.numbers import float_type, int_type, seconds_type

if TYPE_CHECKING:
    # The local cluster's machinery (and the client it uses) loads only for `hctl local`.
    from clients.localcluster import LocalCluster


DEFAULT_STATE_DIR = ".hadar-local"


def _state_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("HADAR_LOCAL_STATE_DIR", DEFAULT_STATE_DIR)),
        help="where the database, logs and checkpoints go (default: ./.hadar-local, or "
        "$HADAR_LOCAL_STATE_DIR)",
    )


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    from clients.localcluster import DEFAULT_WORKERS

    parser.add_argument(
        "--workers",
        default=DEFAULT_WORKERS,
        help=f"one worker per ';'-separated group of fake GPUs (default: {DEFAULT_WORKERS!r})",
    )
    parser.add_argument("--policy", default="", help="scheduling policy (default: the master's)")
    parser.add_argument(
        "--round-seconds",
        type=seconds_type(),
        default=10.0,
        help="seconds between scheduling rounds (default 10: short for a local cluster)",
    )
    parser.add_argument(
        "--port",
        type=int_type(0, 65535),
        default=0,
        help="master port on 127.0.0.1 (default: a free one)",
    )


def _configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="local_command", metavar="COMMAND", required=True)
    up = sub.add_parser(
        "up",
        help="start a master and fake-GPU workers",
        description="Start a master (SQLite in the state dir) and one worker per group of "
        "fake GPUs, wait until all are registered, and print how to use the cluster. The "
        "workers join with a cluster token (STATE_DIR/cluster-token); you get an admin API "
        "token in an hctl config (STATE_DIR/hctl.toml, for HADAR_CONFIG). Both are readable "
        "by you only.",
        epilog="example:\n  hctl local up --workers 'v100:2;p100:2;k80:4' --policy gavel",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _state_dir_argument(up)
    _cluster_arguments(up)
    up.add_argument(
        "--standby",
        action="store_true",
        help="also start a standby master (master-2) on the same database; kill the active "
        "one to watch it take over",
    )
    up.add_argument(
        "--no-dashboard",
        action="store_true",
        help="do not start the web dashboard (hadar-dashboard) beside the master",
    )
    up.add_argument(
        "--dashboard-port",
        type=int_type(0, 65535),
        default=0,
        help="the dashboard's port on 127.0.0.1 (default: a free one)",
    )
    down = sub.add_parser(
        "down",
        help="stop the local cluster and its jobs",
        epilog="example:\n  hctl local down",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _state_dir_argument(down)
    status = sub.add_parser(
        "status",
        help="show the local cluster's processes",
        epilog="example:\n  hctl local status --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _state_dir_argument(status)
    status.add_argument("--json", action="store_true", help="print JSON")
    demo = sub.add_parser(
        "demo",
        help="run a mix of built-in workloads on a fresh local cluster",
        description="Start a local cluster, submit a mix of built-in workloads (several "
        "models, 1 to 4 GPUs, most of them shareable), show the queue until all complete, print a "
        "summary and stop the cluster.",
        epilog="example:\n  hctl local demo --policy gavel",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _state_dir_argument(demo)
    _cluster_arguments(demo)
    demo.add_argument(
        "--scale",
        type=float_type(0, 1000, above=True),
        default=1.0,
        help="multiply every job's iterations by this (more than 0, up to 1000)",
    )
    demo.add_argument(
        "--keep", action="store_true", help="leave the cluster running after the demo"
    )
    demo.add_argument(
        "--timeout",
        type=seconds_type(),
        default=900.0,
        help="give up (exit 124) when the jobs have not all ended after this many seconds",
    )


def _run(args: argparse.Namespace, ctx: Context) -> int:
    from clients.localcluster import LocalCluster, LocalClusterError

    cluster = LocalCluster(args.state_dir)
    try:
        if args.local_command == "up":
            return _up(cluster, args, ctx)
        if args.local_command == "down":
            count = cluster.down()
            ctx.out.print(f"stopped the local cluster in {cluster.state_dir} ({count} processes)")
            return ExitCode.OK
        if args.local_command == "status":
            return _status(cluster, args, ctx)
        from clients.cli.demo import run_demo

        return run_demo(cluster, args, ctx)
    except LocalClusterError as exc:
        raise CliError(str(exc), ExitCode.ERROR, "see the logs in the state dir") from exc


def runnable_hctl(argv0: str, path_hctl: str | None, cwd: Path) -> str:
    """How to run this hctl from the user's shell: `hctl` when PATH finds this same
    program, else its path (relative when under the working directory, as `.venv/bin/hctl`
    after `make setup`), so that the lines printed for the user run as printed."""
    import shlex

    me = Path(argv0).resolve()
    if path_hctl is not None and Path(path_hctl).resolve() == me:
        return "hctl"
    if me.name != "hctl":
        return "hctl"  # not started as the hctl program (e.g. in-process): nothing better
    try:
        shown = str(me.relative_to(cwd.resolve()))
    except ValueError:
        shown = str(me)
    return shlex.quote(shown)


def dashboard_installed() -> bool:
    """Whether this installation has the web dashboard's packages (the 'dashboard' extra)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("starlette", "uvicorn"))


def _hctl() -> str:
    import shutil
    import sys

    return runnable_hctl(sys.argv[0] if sys.argv else "", shutil.which("hctl"), Path.cwd())


def _up(cluster: LocalCluster, args: argparse.Namespace, ctx: Context) -> int:
    from clients.localcluster import invoking_user, parse_worker_groups

    groups = parse_worker_groups(args.workers)
    dashboard = not args.no_dashboard
    if dashboard and not dashboard_installed():
        dashboard = False
        ctx.err.print(
            "the web dashboard is not installed (pip install 'hadar[dashboard]'); starting "
            "without it"
        )
    ctx.err.print(f"starting a master and {len(groups)} workers in {cluster.state_dir} ...")
    record = cluster.up(
        groups,
        policy=args.policy,
        round_seconds=args.round_seconds,
        port=args.port,
        standby=args.standby,
        dashboard=dashboard,
        dashboard_port=args.dashboard_port,
    )
    ctx.out.print(f"local cluster up: master at {record.master_address}")
    if record.dashboard is not None:
        ctx.out.print(
            f"  dashboard: {record.dashboard_url} (log in with the token in "
            f"{cluster.config_path}; log {record.dashboard.log})"
        )
    for standby in record.standbys:
        ctx.out.print(f"  {standby.name}: standby master at {standby.address} (log {standby.log})")
    for worker in record.workers:
        ctx.out.print(f"  {worker.name}: fake GPUs {worker.gpus} (log {worker.log})")
    # HADAR_MASTER and HADAR_TOKEN outrank the config file; left set, they would point
    # hctl elsewhere.
    shadowing = [name for name in (ENV_MASTER, ENV_TOKEN) if os.environ.get(name)]
    ctx.out.print(
        "\n"
        + usage_lines(_hctl(), invoking_user(), cluster.config_path, cluster.state_dir, shadowing),
        markup=False,
    )
    return ExitCode.OK


def usage_lines(
    hctl: str, user: str, config_path: Path, state_dir: Path, shadowing: list[str]
) -> str:
    """The shell lines `hctl local up` prints for using and stopping the cluster, each path
    quoted for the shell (a state directory may have spaces or quotes in its name), so
    they run as printed; `shadowing`: the variables to unset first."""
    import shlex

    unset = f"  unset {' '.join(shadowing)}\n" if shadowing else ""
    return (
        f"use it from this shell (as {user}, an admin of this cluster):\n"
        f"{unset}"
        f"  export {ENV_CONFIG}={shlex.quote(str(config_path))}\n"
        f"  {hctl} submit --workload resnet --gpus 2 --iterations 300\n"
        f"  {hctl} queue\n"
        "stop it with:\n"
        f"  {hctl} local down --state-dir {shlex.quote(str(state_dir))}"
    )


def _status(cluster: LocalCluster, args: argparse.Namespace, ctx: Context) -> int:
    record = cluster.record()
    if record is None:
        raise CliError(
            f"no local cluster in {cluster.state_dir}",
            ExitCode.NOT_FOUND,
            "start one with `hctl local up`",
        )
    procs = cluster.processes()
    if args.json:
        import json

        ctx.out.print_json(
            json.dumps(
                {
                    "state_dir": record.state_dir,
                    "master": record.master_address,
                    "dashboard": record.dashboard_url,
                    "config": str(cluster.config_path),
                    "policy": record.policy,
                    "processes": [
                        {
                            "name": p.name,
                            "pid": p.pid,
                            "alive": alive,
                            "address": p.address,
                            "gpus": p.gpus,
                            "log": p.log,
                        }
                        for p, alive in procs
                    ],
                }
            )
        )
    else:
        ctx.out.print(f"local cluster in {record.state_dir}, master at {record.master_address}")
        ctx.out.print(f"  hctl config: export {ENV_CONFIG}={cluster.config_path}")
        if record.dashboard is not None:
            ctx.out.print(f"  dashboard: {record.dashboard_url}")
        for proc, alive in procs:
            state = "running" if alive else "DEAD"
            gpus = f" gpus {proc.gpus}" if proc.gpus else ""
            ctx.out.print(f"  {proc.name:10} pid {proc.pid:<8} {state:8}{gpus}  log {proc.log}")
    return ExitCode.OK if all(alive for _, alive in procs) else ExitCode.ERROR


COMMANDS = [
    Command(
        "local",
        "run a real cluster on this machine (up, down, status, demo)",
        _configure,
        _run,
        epilog="examples:\n  hctl local up\n  hctl local status\n  hctl local down\n"
        "  hctl local demo",
        uses_master=False,
    )
]
