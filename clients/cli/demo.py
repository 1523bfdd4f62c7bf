"""``hctl local demo``: a mix of built-in workloads on a fresh local cluster, start to finish."""

from __future__ import annotations

import argparse
import shlex
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rich.console import Group
from rich.live import Live
from rich.table import Table

from clients.cli.changes import ChangeLines
from clients.cli.command import CliError, Context, ExitCode
from clients.client import HadarClient
from clients.localcluster import LocalCluster, parse_worker_groups
from clients.types import Job, JobSpec, JobState, Program


@dataclass(frozen=True, slots=True)
class DemoJob:
    name: str
    workload: str
    gpus: int
    iterations: int
    shareable: bool = False
    # May run as averaged copies on idle servers (hadare); the others run on what they ask.
    elastic: bool = False


# Several models, 1 to 4 GPUs; all but the 4-GPU job may share a GPU, and two are elastic
# (they may run as averaged copies). Sized so the whole demo takes a few minutes on a
# 2-core machine without a GPU.
DEMO_JOBS: tuple[DemoJob, ...] = (
    DemoJob("resnet-2gpu", "resnet", 2, 120, shareable=True),
    DemoJob("lstm-1gpu", "lstm", 1, 200, shareable=True, elastic=True),
    DemoJob("transformer-4gpu", "transformer", 4, 60),
    DemoJob("recsys-a", "recommendation", 1, 300, shareable=True, elastic=True),
    DemoJob("recsys-b", "recommendation", 1, 300, shareable=True),
    DemoJob("resnet-1gpu", "resnet", 1, 100, shareable=True),
    DemoJob("lstm-2gpu", "lstm", 2, 150, shareable=True),
    DemoJob("transformer-1gpu", "transformer", 1, 80, shareable=True),
)

# Policies that share GPUs need evidence that a pair gains; fake GPUs are paced sleeps on
# a CPU, so two jobs on one barely slow each other: assume a 1.1x slowdown per job.
SHARING_POLICIES = ("", "hadare", "sjf-bsbf")  # "": the master's default, hadare
FAKE_PAIR_SETTINGS = {"HADAR_POLICY_PARAMS": "assumed_pair_slowdown=1.1"}


@dataclass
class Observed:
    """What the demo saw of each job while it ran (the master keeps only the present)."""

    gpu_types: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    nodes: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    shared: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))

    def see(self, jobs: list[Job]) -> None:
        for job in jobs:
            for task in job.tasks:
                self.gpu_types[job.id].add(task.gpu_type)
                self.nodes[job.id].add(task.node)
                if task.shared_with_job_id:
                    self.shared[job.id].add(task.shared_with_job_id)


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"


def _queue_table(jobs: list[Job], started: float) -> Table:
    table = Table(title=f"hctl queue — {_fmt_s(time.time() - started)} elapsed", expand=False)
    for column in ("ID", "NAME", "STATE", "GPUS", "NODE/REASON", "PROGRESS"):
        table.add_column(column)
    for job in jobs:
        where = ",".join(
            f"{t.node}:{t.gpu_type}x{len(t.gpu_indices)}"
            + (f" (shared with {t.shared_with_job_id})" if t.shared_with_job_id else "")
            for t in job.tasks
        )
        bar_width = 20
        filled = int(job.progress * bar_width)
        progress = (
            f"[{'#' * filled}{'.' * (bar_width - filled)}] "
            f"{job.iterations_done}/{job.spec.iterations}"
        )
        table.add_row(
            str(job.id),
            job.spec.name,
            job.state.value,
            str(job.spec.num_gpus),
            where or job.reason,
            progress,
        )
    return table


def _summary_table(jobs: list[Job], observed: Observed) -> Table:
    table = Table(title="summary")
    for column in ("ID", "NAME", "STATE", "JCT", "GPU TYPES", "NODES", "PREEMPT", "SHARED WITH"):
        table.add_column(column)
    for job in jobs:
        jct = (
            (job.finished_at - job.submitted_at).total_seconds()
            if job.finished_at and job.submitted_at
            else None
        )
        table.add_row(
            str(job.id),
            job.spec.name,
            job.state.value,
            _fmt_s(jct),
            ",".join(sorted(observed.gpu_types[job.id])) or "-",
            ",".join(sorted(observed.nodes[job.id])) or "-",
            str(job.preemptions),
            ",".join(str(j) for j in sorted(observed.shared[job.id])) or "-",
        )
    return table


def _submit(client: HadarClient, scale: float) -> list[int]:
    ids = []
    for demo in DEMO_JOBS:
        spec = JobSpec(
            name=demo.name,
            program=Program.builtin(demo.workload),
            iterations=max(1, int(demo.iterations * scale)),
            num_gpus=demo.gpus,
            shareable=demo.shareable,
            forkable=demo.elastic,
        )
        ids.append(client.submit_job(spec).id)
    return ids


def _fresh_state(cluster: LocalCluster) -> None:
    """Start from an empty state dir: a previous demo's database would carry its jobs over.

    Only a directory that a local cluster made (it holds hadar.db) is cleared.
    """
    if cluster.record() is not None or not (cluster.state_dir / "hadar.db").exists():
        return
    shutil.rmtree(cluster.state_dir)


def run_demo(cluster: LocalCluster, args: argparse.Namespace, ctx: Context) -> int:
    groups = parse_worker_groups(args.workers)
    _fresh_state(cluster)
    ctx.err.print(f"starting a local cluster in {cluster.state_dir}: workers {args.workers}")
    record = cluster.up(
        groups,
        policy=args.policy,
        round_seconds=args.round_seconds,
        port=args.port,
        master_settings=FAKE_PAIR_SETTINGS if args.policy in SHARING_POLICIES else None,
    )
    ctx.err.print(f"master at {record.master_address}; submitting {len(DEMO_JOBS)} jobs")
    started = time.time()
    observed = Observed()
    try:
        with cluster.client() as client:
            ids = _submit(client, args.scale)

            def poll() -> list[Job]:
                jobs = sorted((client.get_job(i) for i in ids), key=lambda j: j.id)
                observed.see(jobs)
                return jobs

            jobs = poll()
            deadline = started + args.timeout

            def waiting() -> bool:
                if all(j.state.terminal for j in jobs):
                    return False
                if time.time() > deadline:
                    raise CliError(
                        f"the demo's jobs did not all end within {args.timeout:.0f} s",
                        ExitCode.TIMEOUT,
                        f"see `hctl queue` and the logs in {cluster.state_dir} (rerun with --keep)",
                    )
                return True

            if ctx.out.is_terminal:
                with Live(
                    _queue_table(jobs, started), console=ctx.out, refresh_per_second=2
                ) as live:
                    while waiting():
                        time.sleep(1.0)
                        jobs = poll()
                        live.update(Group(_queue_table(jobs, started)))
            else:
                # A pipe or a log file gets a line per change, not a table per refresh.
                changes = ChangeLines()
                while True:
                    for line in changes.update(jobs, datetime.now(UTC)):
                        ctx.out.print(line, highlight=False, soft_wrap=True)
                    if not waiting():
                        break
                    time.sleep(1.0)
                    jobs = poll()
            ctx.out.print(_queue_table(jobs, started))
            ctx.out.print(_summary_table(jobs, observed))
            completed = sum(j.state == JobState.COMPLETED for j in jobs)
            ctx.out.print(
                f"{completed}/{len(jobs)} jobs completed in {_fmt_s(time.time() - started)} "
                f"(policy {record.policy or 'default'}); logs in {cluster.state_dir}"
            )
            return ExitCode.OK if completed == len(jobs) else ExitCode.ERROR
    finally:
        if args.keep:
            ctx.err.print(
                f"cluster left running; stop it with `hctl local down "
                f"--state-dir {shlex.quote(str(cluster.state_dir))}`"
            )
        else:
            cluster.down()
            ctx.err.print("local cluster stopped")
