"""Cluster commands: nodes, status, drain, resume, workloads."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from clients.cli import format as fmt
from clients.cli.command import CliError, Command, Context, ExitCode
from clients.cli.jobs import STATE_STYLES, now_utc
from clients.errors import NotFound, PermissionDenied
from clients.types import ClusterStatus, GpuHealth, JobState, Node, NodeState

if TYPE_CHECKING:
    # rich loads when a command prints, not when `hctl` builds its parser.
    from rich.console import RenderableType
    from rich.table import Table


NODE_STYLES: dict[NodeState, str] = {
    NodeState.READY: "green",
    NodeState.DRAINING: "yellow",
    NodeState.DRAINED: "dim",
    NodeState.UNREACHABLE: "red",
}


@contextmanager
def about_node(node: str, action: str) -> Iterator[None]:
    try:
        yield
    except NotFound:
        raise CliError(
            f"node {node} not found", ExitCode.NOT_FOUND, "list nodes with `hctl nodes`"
        ) from None
    except PermissionDenied as exc:
        raise CliError(
            f"cannot {action} node {node}: {exc.details}",
            ExitCode.PERMISSION_DENIED,
            "only admins may; check your identity with `hctl whoami`",
        ) from None


def gpu_summary(node: Node) -> str:
    """``2×v100 + 2×k80``"""
    counts = Counter(g.type for g in node.gpus)
    return " + ".join(f"{n}×{t}" for t, n in sorted(counts.items())) or "-"


# -- nodes ------------------------------------------------------------------------------------


def _configure_nodes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", action="store_true", help="one row per GPU")
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")


def nodes_table(nodes: Sequence[Node]) -> Table:
    from rich.table import Table
    from rich.text import Text

    now = now_utc()
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in ("NAME", "STATE", "GPUS", "BUSY", "HEARTBEAT", "ADDRESS", "REASON"):
        table.add_column(column, no_wrap=column != "REASON")
    for node in nodes:
        busy = sum(1 for g in node.gpus if g.job_ids)
        unhealthy = sum(1 for g in node.gpus if g.health is GpuHealth.UNHEALTHY)
        busy_text = f"{busy}/{len(node.gpus)}"
        if unhealthy:
            busy_text += f" ({unhealthy} unhealthy)"
        table.add_row(
            node.name,
            Text(node.state.value, style=NODE_STYLES.get(node.state, "")),
            gpu_summary(node),
            busy_text,
            fmt.format_age(node.last_heartbeat, now),
            node.address,
            node.reason,
        )
    return table


def gpus_table(nodes: Sequence[Node]) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in ("NODE", "GPU", "TYPE", "MEMORY", "HEALTH", "UTIL", "JOBS", "DEVICE"):
        table.add_column(column)
    for node in nodes:
        for gpu in node.gpus:
            device = "fake" if gpu.fake else gpu.device_name
            table.add_row(
                node.name,
                str(gpu.index),
                gpu.type,
                fmt.format_bytes(gpu.memory_bytes),
                gpu.health.value,
                f"{gpu.utilization:.0%}",
                ",".join(str(j) for j in gpu.job_ids) or "-",
                device,
            )
    return table


def _run_nodes(args: argparse.Namespace, ctx: Context) -> int:
    nodes = ctx.client().list_nodes()
    if args.json:
        ctx.json({"nodes": nodes})
        return ExitCode.OK
    if not nodes:
        ctx.note("no nodes registered — start `hadar-worker` on each GPU server")
        return ExitCode.OK
    ctx.show(gpus_table(nodes) if args.gpus else nodes_table(nodes))
    return ExitCode.OK


# -- status -----------------------------------------------------------------------------------


def _configure_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")


def render_status(address: str, status: ClusterStatus) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    now = now_utc()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("master", f"{address} (version {status.version or 'unknown'})")
    head.add_row("policy", f"{status.policy or '-'}, a round every {status.round_seconds:g}s")
    head.add_row("nodes", f"{status.nodes_ready} ready of {status.nodes_total}")
    counts = [
        Text(f"{status.jobs[s]} {s.value}", style=STATE_STYLES.get(s, ""))
        for s in JobState
        if status.jobs.get(s)
    ]
    jobs_text = Text(", ").join(counts) if counts else Text("none")
    jobs_text.append(f"; queue length {status.queue_length}")
    head.add_row("jobs", jobs_text)
    last = status.last_round
    if last is None:
        head.add_row("last round", "none yet")
    else:
        head.add_row(
            "last round",
            f"#{last.number} {fmt.format_age(last.started_at, now)} by {last.policy or '-'}: "
            f"{last.duration_s:.2f}s, {last.actions} action(s), "
            f"{last.dispatch_failures} dispatch failure(s)",
        )
    if status.next_round_at is not None:
        head.add_row("next round", fmt.format_age(status.next_round_at, now))
    gpus = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in ("GPU TYPE", "TOTAL", "BUSY", "IDLE", "UNAVAILABLE"):
        gpus.add_column(column, justify="left" if column == "GPU TYPE" else "right")
    for summary in status.gpus:
        gpus.add_row(
            summary.type,
            str(summary.total),
            str(summary.busy),
            str(summary.idle),
            str(summary.unavailable),
        )
    if status.gpus:
        total = [sum(getattr(s, f) for s in status.gpus) for f in ("total", "busy", "idle")]
        unavailable = sum(s.unavailable for s in status.gpus)
        gpus.add_row(
            Text("all", style="bold"), *(str(v) for v in total), str(unavailable), end_section=False
        )
    return Group(head, Text(""), gpus if status.gpus else Text("no GPUs registered"))


def _run_status(args: argparse.Namespace, ctx: Context) -> int:
    status = ctx.client().cluster_status()
    address = ctx.config().address
    if args.json:
        document = {"master": address, "status": status, "queue_length": status.queue_length}
        ctx.json(document)
        return ExitCode.OK
    ctx.show(render_status(address, status))
    return ExitCode.OK


# -- drain / resume ---------------------------------------------------------------------------


def _configure_drain(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("node", metavar="NODE", help="node name (see `hctl nodes`)")
    parser.add_argument("--reason", default="", help="shown in `hctl nodes`")


def _run_drain(args: argparse.Namespace, ctx: Context) -> int:
    with about_node(args.node, "drain"):
        node = ctx.client().drain_node(args.node, args.reason)
    if node.state is NodeState.DRAINING:
        what = "running tasks finish their lease, nothing new is placed"
    else:
        what = "nothing runs on it and nothing new is placed"
    ctx.say(f"node {node.name} is {node.state.value}: {what} — undo with `hctl resume {node.name}`")
    return ExitCode.OK


def _configure_resume(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("node", metavar="NODE", help="node name (see `hctl nodes`)")


def _run_resume(args: argparse.Namespace, ctx: Context) -> int:
    with about_node(args.node, "resume"):
        node = ctx.client().resume_node(args.node)
    ctx.say(f"node {node.name} is {node.state.value}")
    return ExitCode.OK


# -- workloads --------------------------------------------------------------------------------


def _configure_workloads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md)")


def _run_workloads(args: argparse.Namespace, ctx: Context) -> int:
    from rich.table import Table

    workloads = ctx.client().list_workloads()
    if args.json:
        ctx.json({"workloads": workloads})
        return ExitCode.OK
    if not workloads:
        ctx.note("no workloads: no registered worker offers any")
        return ExitCode.OK
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in ("NAME", "BATCH", "JOB TYPE", "DESCRIPTION"):
        table.add_column(column, no_wrap=column != "DESCRIPTION")
    for w in workloads:
        table.add_row(w.name, str(w.default_batch_size), w.job_type, w.description)
    ctx.show(table)
    return ExitCode.OK


COMMANDS = [
    Command(
        "nodes",
        "List GPU servers and their GPUs",
        _configure_nodes,
        _run_nodes,
        epilog="examples:\n  hctl nodes\n  hctl nodes --gpus\n  hctl nodes --json",
    ),
    Command(
        "status",
        "Cluster summary: GPUs by type and state, jobs, the last round",
        _configure_status,
        _run_status,
        epilog="examples:\n  hctl status\n  hctl status --master gpu-master:50051 --json",
    ),
    Command(
        "drain",
        "Admin: stop placing new tasks on a node",
        _configure_drain,
        _run_drain,
        description="Drain a node: running tasks finish their lease, nothing new is placed.",
        epilog='example:\n  hctl drain gpu-03 --reason "replacing a fan"',
    ),
    Command(
        "resume",
        "Admin: make a drained node schedulable again",
        _configure_resume,
        _run_resume,
        epilog="example:\n  hctl resume gpu-03",
    ),
    Command(
        "workloads",
        "List the built-in workloads workers can run",
        _configure_workloads,
        _run_workloads,
        epilog="examples:\n  hctl workloads\n  hctl submit --workload resnet --iterations 1000",
    ),
]
