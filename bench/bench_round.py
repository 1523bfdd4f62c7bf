"""One scheduling round's cost at a large queue: read, plan, persist and push, timed.

Fills a store (a temporary SQLite file, or a throwaway schema of the PostgreSQL database
given with ``--database``) with ``--jobs`` queued jobs of mixed specs (1-8 GPUs, four job
types, some limited to GPU types, priorities, array elements under a running cap, jobs
waiting for another job) and ``--nodes`` nodes of 4-8 GPUs, then runs rounds in process
with the daemon's own pieces (RoundRunner, Dispatcher, HoldEnforcer, JobManager) and
workers faked at the RPC client: every assignment is applied at once. A first round places
what fits (a few hundred tasks, then acknowledged and reporting progress); then it times

- steady rounds: nothing changed since the last round;
- rounds after changes: submissions (``--submissions``, 5 by default), a cancellation and
  progress reports.

Per phase it prints the median and the maximum of the wall time: ``holds`` (the dependency
check the daemon runs before each round), then the round's ``read``, ``plan``, ``persist``
and ``push`` (RoundRunner's own split) and the round's ``total``; ``cpu`` is the process's
CPU time over the round (its threads recording the workers' answers included), which
other load on the machine disturbs less than the wall time; ``gc`` the garbage collector's
share of the round (it stops every thread); ``rows`` how many job rows the round (the
dependency check included) loaded from the store.

    .venv/bin/python bench/bench_round.py [--jobs 5000] [--nodes 200] [--rounds 8]
        [--policy fifo] [--database URL] [--profile read] [--planning-process-from-jobs N]
        [--submissions 5]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import gc
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import event

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from master.daemon import base_throughput_model  # noqa: E402
from master.jobs.holds import HoldEnforcer  # noqa: E402
from master.jobs.manager import Caller, JobManager, ProgressUpdate  # noqa: E402
from master.nodes.dispatch import Dispatcher  # noqa: E402
from master.nodes.workers import WorkerClients  # noqa: E402
from master.process.metrics import MasterMetrics  # noqa: E402
from master.process.transactions import Transactor  # noqa: E402
from master.rounds.runner import RoundRunner  # noqa: E402
from master.rounds.snapshot import read_round_input  # noqa: E402
from master.scheduling.policy import make_policy  # noqa: E402
from master.service.codec import spec_to_pb  # noqa: E402
from master.settings import Settings  # noqa: E402
from protos.hadar.v1 import worker_pb2  # noqa: E402
from store import Database, UnitOfWork  # noqa: E402
from store.domain import Gpu, JobSpec, NewJob  # noqa: E402
from store.migrate import upgrade  # noqa: E402
from store.models import JobRow  # noqa: E402
from store.states import JobState, ProgramKind, TaskState  # noqa: E402
from store.testing import fresh_postgres_schema  # noqa: E402

GPU_TYPES = ("v100", "p100", "k80")
JOB_TYPES = (
    "ResNet-18 (batch size 64)",
    "ResNet-50 (batch size 64)",
    "Transformer (batch size 64)",
    "LM (batch size 20)",
)
USERS = ("alice", "bob", "carol", "dave", "erin", "frank")
PHASES = ("holds", "read", "plan", "persist", "push", "total", "cpu", "gc", "rows")


class CollectorTime:
    """Seconds the garbage collector ran (it stops every thread of the process)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


COLLECTOR = CollectorTime()


class JobRowLoads:
    """Job rows the ORM built objects from: the part of reading jobs that grows with what
    is read."""

    def __init__(self) -> None:
        self.count = 0
        event.listen(JobRow, "load", self._loaded)

    def _loaded(self, _target: JobRow, _context: Any) -> None:
        self.count += 1


JOB_ROWS = JobRowLoads()


class AnsweringClients(WorkerClients):
    """Workers that apply every assignment at once, without a network."""

    def __init__(self) -> None:
        super().__init__("", timeout_s=1.0, attempts=1)

    def apply(
        self, address: str, request: worker_pb2.ApplyAssignmentsRequest
    ) -> worker_pb2.ApplyAssignmentsResponse:
        return worker_pb2.ApplyAssignmentsResponse(
            results=[
                worker_pb2.AssignmentResult(
                    job_id=a.job_id,
                    task_index=a.task_index,
                    lease=a.lease,
                    outcome=worker_pb2.ASSIGNMENT_OUTCOME_APPLIED,
                )
                for a in request.assignments
            ]
        )

    def stop(
        self, address: str, request: worker_pb2.StopTaskRequest
    ) -> worker_pb2.StopTaskResponse:
        return worker_pb2.StopTaskResponse(was_running=True)


def job_spec(rng: random.Random, index: int) -> JobSpec:
    num_gpus = rng.choice((1, 1, 1, 2, 2, 4, 8))
    return JobSpec(
        name=f"bench-{index}",
        num_gpus=num_gpus,
        iterations=rng.randrange(10_000, 500_000),
        program_kind=ProgramKind.WORKLOAD,
        workload="resnet",
        batch_size=64,
        priority=rng.choice((1.0, 1.0, 1.0, 2.0, 0.5)),
        allowed_gpu_types=rng.choice(((), (), ("v100",), ("v100", "p100"))),
        preemptible=rng.random() > 0.1,
        shareable=rng.random() > 0.5,
        forkable=rng.random() > 0.8,
        job_type=rng.choice(JOB_TYPES),
        env=(("SEED", str(index)),),
    )


def fill(db: Database, jobs: int, nodes: int, seed: int) -> None:
    """`nodes` nodes of 4-8 GPUs and `jobs` PENDING jobs: about 10% elements of arrays of
    20 capped at 4 running, 5% waiting for an earlier job, the rest plain."""
    rng = random.Random(seed)
    with db.transaction() as uow:
        for n in range(nodes):
            gpu_type = GPU_TYPES[n % len(GPU_TYPES)]
            uow.nodes.upsert(
                f"node-{n:03d}",
                address=f"127.0.0.1:{20000 + n}",
                gpus=[
                    Gpu(index=i, type=gpu_type, memory_bytes=16 << 30)
                    for i in range(rng.randrange(4, 9))
                ],
                workloads=("resnet", "lstm"),
            )
    added = 0
    ids: list[int] = []
    with db.transaction() as uow:
        while added < jobs:
            user = rng.choice(USERS)
            kind = rng.random()
            spec = job_spec(rng, added)
            if kind < 0.005 and jobs - added >= 20:
                elements, _ = uow.jobs.add_array(
                    NewJob(
                        user=user,
                        spec=dataclasses.replace(spec, array="0-19%4", array_max_running=4),
                    ),
                    list(range(20)),
                )
                ids.extend(j.id for j in elements)
                added += 20
                continue
            if kind < 0.10 and ids:
                spec = dataclasses.replace(spec, dependencies=(("afterok", rng.choice(ids)),))
            job, _ = uow.jobs.add(NewJob(user=user, spec=spec))
            ids.append(job.id)
            added += 1


class Bench:
    """The daemon's round pieces on one database, with answering workers."""

    def __init__(self, database: str, policy: str, planning_from_jobs: int | None = None) -> None:
        self.settings = Settings(
            database=database, policy=policy, round_seconds=60.0, metrics_port=-1
        )
        if planning_from_jobs is not None:
            self.settings = dataclasses.replace(
                self.settings, planning_process_from_jobs=planning_from_jobs
            )
        self.db = Database(database)
        self.tx = Transactor(self.db)
        self.pool = ThreadPoolExecutor(max_workers=8)
        self.background = ThreadPoolExecutor(max_workers=1)
        metrics = MasterMetrics()
        model = base_throughput_model(self.settings)
        self.dispatcher = Dispatcher(
            self.tx,
            AnsweringClients(),
            self.settings,
            metrics,
            self.pool,
            self.background,
            lambda: None,
        )
        self.rounds = RoundRunner(
            self.tx,
            make_policy(policy),
            self.dispatcher,
            self.settings,
            metrics,
            model,
            lambda: None,
        )
        self.holds = HoldEnforcer(self.tx, lambda: None, self.rounds.memo.jobs)
        self.jobs = JobManager(
            self.tx, self.dispatcher, self.settings, model, lambda: None, lambda _: None
        )

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.background.shutdown(wait=True)
        self.db.dispose()

    def round(self) -> dict[str, float]:
        """One round as the daemon runs it (dependency check, then the round), waited
        for until its pushes are answered; its phases in seconds."""
        started = time.monotonic()
        cpu = time.process_time()
        collecting = COLLECTOR.seconds
        loaded = self._rows_loaded()
        self.holds.check()
        holds_s = time.monotonic() - started
        result = self.rounds.run(datetime.now(UTC), settle=True)
        return {
            "holds": holds_s,
            "read": result.read_s,
            "plan": result.plan_s,
            "persist": result.persist_s,
            "push": result.push_s,
            "total": time.monotonic() - started,
            "cpu": time.process_time() - cpu,
            "gc": COLLECTOR.seconds - collecting,
            "rows": float(self._rows_loaded() - loaded),
            "actions": float(result.actions),
        }

    def _rows_loaded(self) -> int:
        """Job rows read in full so far: built into ORM objects, or read through the
        rounds' memo as plain columns."""
        return JOB_ROWS.count + self.rounds.memo.jobs.rows_loaded

    def run_placed(self, iterations: int) -> int:
        """Every placed task reports progress (`iterations` done): acknowledged ones run."""
        placed = self.tx.read(lambda uow: uow.tasks.active())
        by_node: dict[str, list[ProgressUpdate]] = {}
        for task in placed:
            if task.state not in (TaskState.STARTING, TaskState.RUNNING):
                continue
            by_node.setdefault(task.node, []).append(
                ProgressUpdate(
                    job_id=task.job_id,
                    task_index=task.task_index,
                    lease=task.lease,
                    iterations_done=iterations,
                    iterations_per_s=10.0,
                    checkpoint_iterations=iterations,
                    gpu_type=task.gpu_type,
                )
            )
        for node, updates in by_node.items():
            self.jobs.report_progress(node, updates)
        return sum(len(u) for u in by_node.values())

    def change(self, rng: random.Random, round_index: int, submissions: int = 5) -> None:
        """What happens between two rounds of a busy cluster: `submissions` submissions,
        one cancelled waiting job, progress from ten running tasks."""
        admin = Caller("bench", admin=True)
        for i in range(submissions):
            spec = job_spec(rng, 100_000 + 100_000 * round_index + i)
            # Stored directly, the queue may hold what a submission is refused for.
            spec = dataclasses.replace(spec, forkable=spec.forkable and spec.preemptible)
            self.jobs.submit(Caller(rng.choice(USERS)), spec_to_pb(spec))
        waiting = self.tx.read(lambda uow: uow.jobs.query(states=[JobState.PENDING], limit=50))
        if waiting:
            self.jobs.cancel(admin, rng.choice(waiting).id, "bench")
        running = [
            t for t in self.tx.read(lambda uow: uow.tasks.active()) if t.state is TaskState.RUNNING
        ]
        for task in rng.sample(running, min(10, len(running))):
            self.jobs.report_progress(
                task.node,
                [
                    ProgressUpdate(
                        job_id=task.job_id,
                        task_index=task.task_index,
                        lease=task.lease,
                        iterations_done=1000 + round_index,
                        iterations_per_s=10.0,
                        checkpoint_iterations=1000 + round_index,
                        gpu_type=task.gpu_type,
                    )
                ],
            )


def summary(label: str, samples: list[dict[str, float]]) -> None:
    print(f"\n{label} ({len(samples)} rounds)")
    print(f"{'phase':<8} {'p50':>8} {'max':>8}")
    for phase in PHASES:
        values = [s[phase] for s in samples]
        digits = 0 if phase == "rows" else 3
        print(f"{phase:<8} {statistics.median(values):>8.{digits}f} {max(values):>8.{digits}f}")


def profile(bench: Bench, what: str) -> None:
    settings = bench.settings
    model = base_throughput_model(settings)

    def read() -> None:
        bench.tx.read(
            lambda uow: read_round_input(
                uow,
                model,
                settings.round_seconds,
                lost_hold_s=settings.lost_lease_hold_s,
                now=datetime.now(UTC),
                restart_s=settings.restart_cost_s,
                memo=bench.rounds.memo,
            )
        )

    targets: dict[str, Callable[[], Any]] = {
        "read": read,
        "round": lambda: bench.rounds.run(datetime.now(UTC), settle=True),
        "holds": bench.holds.check,
    }
    profiler = cProfile.Profile()
    profiler.enable()
    targets[what]()
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(35)
    stats.sort_stats("tottime").print_stats(20)
    if what == "round":
        stats.sort_stats("cumulative").print_callees("_persist|_apply|read_round_input")


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=8, help="rounds of each kind timed")
    parser.add_argument("--policy", default="fifo")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--submissions",
        type=int,
        default=5,
        help="submissions between two changed rounds (the target load: about 1000)",
    )
    parser.add_argument(
        "--planning-process-from-jobs",
        type=int,
        default=None,
        help="the master's setting (default: its default); 0 plans every round in process",
    )
    parser.add_argument(
        "--database",
        default="",
        help="default: a temporary SQLite file; a PostgreSQL URL gets a throwaway schema",
    )
    parser.add_argument(
        "--profile",
        choices=("read", "round", "holds"),
        default="",
        help="after the timings, profile one more of these and print the hot spots",
    )
    args = parser.parse_args()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(40), cache_logger_on_first_use=False
    )
    with contextlib.ExitStack() as stack:
        database = args.database
        if database.startswith("postgres"):
            # A throwaway schema: the benchmark never touches the database's own tables.
            database = stack.enter_context(fresh_postgres_schema(database))
        elif not database:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="hadar-bench-"))
            database = f"sqlite:///{folder}/hadar.db"
        return run(args, database)


def run(args: argparse.Namespace, database: str) -> int:
    print(f"load average before: {load_average()}")
    upgrade(database)
    started = time.monotonic()
    filling = Database(database)
    fill(filling, args.jobs, args.nodes, args.seed)
    filling.dispose()
    print(f"filled {args.jobs} jobs on {args.nodes} nodes in {time.monotonic() - started:.1f} s")
    bench = Bench(database, args.policy, args.planning_process_from_jobs)
    with _closing(bench):
        first = bench.round()
        reported = bench.run_placed(100)
        counts = bench.tx.read(_counts)
        print(
            f"first round: {first['total']:.2f} s, {int(first['actions'])} actions; "
            f"{reported} tasks report progress; {counts}"
        )
        steady = [bench.round() for _ in range(args.rounds)]
        rng = random.Random(args.seed + 1)
        changed = []
        for i in range(args.rounds):
            bench.change(rng, i, args.submissions)
            changed.append(bench.round())
        summary(f"steady rounds, {args.policy}", steady)
        summary(
            f"rounds after {args.submissions} submissions, a cancel, 10 progress reports, "
            f"{args.policy}",
            changed,
        )
        if args.profile:
            profile(bench, args.profile)
    print(f"\nload average after: {load_average()}")
    return 0


def _counts(uow: UnitOfWork) -> str:
    by_state = uow.jobs.count_by_state()
    tasks = uow.tasks.active()
    return (
        f"{by_state[JobState.PENDING]} pending, {by_state[JobState.RUNNING]} running jobs, "
        f"{len(tasks)} active tasks"
    )


@contextlib.contextmanager
def _closing(bench: Bench) -> Iterator[Bench]:
    try:
        yield bench
    finally:
        bench.close()


if __name__ == "__main__":
    raise SystemExit(main())
