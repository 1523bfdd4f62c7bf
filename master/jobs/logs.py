"""A job's output, relayed from the workers that ran it, one attempt after another.

The output itself stays on the workers (each keeps every attempt's logs until the job has
left the node for its retention period); the store knows every attempt's tasks and nodes.
An attempt is one placement of the job: the tasks that share a lease. Every task of an
attempt is asked, whether it still runs or has ended, so a job that just finished shows
every rank, not only those of the tasks not yet reported.

Following a job follows the job, not one attempt: it waits for a pending job to be placed,
relays each attempt until its tasks have stopped on their workers (so the `hadar:` line a
worker writes when it stops a task arrives too), then waits for the next attempt, and ends
once the job has ended and its last attempt is relayed; a worker's stream that breaks while
the task still runs is read again, each byte relayed once. A follower costs the master no
thread of the serving pool beyond its own stream's (which admission caps), reads the store
only when jobs change, at most a few times a second, and a client that reads slowly only
slows its own workers' streams: the relay's queue is bounded and its threads give up once
the stream is over.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from master.errors import InvalidArgumentError, LogsNotFoundError, UnavailableError
from master.nodes.workers import WorkerClients, WorkerUnreachableError
from master.process.events import ChangeSignal
from master.process.transactions import Transactor
from protos.hadar.v1 import common_pb2, worker_pb2
from store import UnitOfWork
from store.domain import Job, JobEvent, Node, Task
from store.states import JobState, NodeState, TaskState, is_terminal

POLL_S = 1.0
# A waiting follower looks for its job's next event at most this often, however often
# jobs change, and re-reads the whole job at least this often all the same.
FOLLOW_READ_GAP_S = 0.25
FOLLOW_REREAD_S = 30.0
# How soon a worker is asked again for a task it has not started yet.
RETRY_START_S = 0.5
# How long a worker has to report a task's exit after its log stream ended, before the
# stream is taken to have broken (the worker's agent restarted) and is read again.
REPORT_GRACE_S = 3.0
# Names the threads that read one task's output from its worker.
PUMP_THREAD = "log-relay"


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    lease: int
    tasks: tuple[Task, ...]
    # Why it never started on its workers; empty when it did (or may still).
    start_failure: str = ""


def attempts_of(job: Job, tasks: Sequence[Task], events: Sequence[JobEvent]) -> list[Attempt]:
    """The job's attempts, oldest first."""
    by_lease: dict[int, list[Task]] = {}
    for task in tasks:
        by_lease.setdefault(task.lease, []).append(task)
    out: list[Attempt] = []
    for number, lease in enumerate(sorted(by_lease), start=1):
        group = tuple(sorted(by_lease[lease], key=lambda t: t.task_index))
        failure = ""
        # An attempt whose tasks are over, none acknowledged by a worker and none with an
        # exit its worker reported, never ran anywhere. A command that exits at once can
        # report its exit before its start is acknowledged: it ran.
        if all(not t.active and t.acknowledged_at is None and t.exit_kind is None for t in group):
            failure = _why_ended(job, group, events)
        out.append(Attempt(number, lease, group, failure))
    return out


def _why_ended(job: Job, group: Sequence[Task], events: Sequence[JobEvent]) -> str:
    """The reason of the event that took the job out of RUNNING after the attempt began."""
    began = min(t.created_at for t in group)
    for event in events:
        if (
            event.at >= began
            and event.from_state is JobState.RUNNING
            and event.to_state is not JobState.RUNNING
        ):
            return event.reason
    return job.reason or "its workers never started it"


def _holds_rank(task: Task, rank: int) -> bool:
    return task.rank_offset <= rank < task.rank_offset + len(task.gpu_indices)


def _trim(chunk: common_pb2.LogChunk, relayed: dict[tuple[int, int], int]) -> bool:
    """Drops from `chunk` what was relayed of its file already; False when nothing is left."""
    key = (chunk.rank, chunk.stream)
    have = relayed.get(key, 0)
    end = chunk.offset + len(chunk.data)
    if end <= have:
        return False
    if chunk.offset < have:
        chunk.data = chunk.data[have - chunk.offset :]
        chunk.offset = have
    relayed[key] = end
    return True


def _never_ran(task: Task) -> bool:
    """Taken back before its worker acknowledged or reported it: no output anywhere."""
    return not task.active and task.acknowledged_at is None and task.exit_kind is None


@dataclass(frozen=True, slots=True)
class _View:
    """What a relay reads of the store at once: the job, its attempts, the nodes."""

    job: Job
    attempts: list[Attempt]
    nodes: dict[str, Node]
    # The job's newest event: every new attempt, and the job's end, come with a later one.
    last_event_id: int


def _opening(job_id: int, attempt: Attempt, attempts: int) -> common_pb2.LogChunk:
    return common_pb2.LogChunk(
        job_id=job_id,
        attempt=attempt.number,
        lease=attempt.lease,
        start_failure=attempt.start_failure,
        attempts=attempts,
        nodes=sorted({t.node for t in attempt.tasks}),
    )


class LogRelay:
    def __init__(
        self, tx: Transactor, workers: WorkerClients, changes: ChangeSignal | None = None
    ) -> None:
        self._tx = tx
        self._workers = workers
        # Wakes a follower waiting for a job's next attempt; without it, it polls.
        self._changes = changes

    def _view(self, job_id: int) -> _View:
        def read(uow: UnitOfWork) -> _View:
            job = uow.jobs.get(job_id)
            events = uow.jobs.events(job.id)
            found = attempts_of(job, uow.tasks.for_job(job.id), events)
            last = events[-1].id if events else 0
            return _View(job, found, {n.name: n for n in uow.nodes.all()}, last)

        return self._tx.read(read)

    def _task_now(self, task: Task) -> Task | None:
        return self._tx.read(lambda uow: uow.tasks.find(task.job_id, task.task_index, task.lease))

    def _still_runs(self, task: Task, over: threading.Event) -> bool:
        """Whether the master still has the task running once its worker has had a while
        to report an exit (False as soon as it has ended, or the relay is over)."""
        deadline = time.monotonic() + REPORT_GRACE_S
        while True:
            now = self._task_now(task)
            if now is None or now.state not in (TaskState.STARTING, TaskState.RUNNING):
                return False
            if time.monotonic() >= deadline:
                return True
            if over.wait(RETRY_START_S):
                return False

    def stream(
        self,
        job_id: int,
        *,
        follow: bool,
        tail_lines: int,
        rank: int | None,
        attempt: int | None,
        active: Callable[[], bool],
    ) -> Iterator[common_pb2.LogChunk]:
        """Every attempt's output in order (or only `attempt`; when following, the current
        one and each later one until the job ends), each opened by a chunk with no data that
        names it. A task whose output cannot be read (its worker is down, or no longer has
        it) does not hold back the others: the first such failure is raised once everything
        readable has been sent."""
        if attempt is not None and attempt < 1:
            raise InvalidArgumentError("attempt", "attempts count from 1")
        if follow and attempt is None:
            yield from self._follow(job_id, tail_lines, rank, active)
            return
        view = self._view(job_id)
        attempts, nodes = view.attempts, view.nodes
        if attempt is not None:
            if attempt > len(attempts):
                raise LogsNotFoundError(
                    f"job {job_id} has no attempt {attempt} (it has had {len(attempts)})"
                )
            chosen = [attempts[attempt - 1]]
        else:
            chosen = attempts
        if (
            rank is not None
            and chosen
            and not any(_holds_rank(t, rank) for a in chosen for t in a.tasks)
        ):
            raise LogsNotFoundError(f"job {job_id} has no rank {rank}")
        failures: list[Exception] = []
        for current in chosen:
            yield _opening(job_id, current, len(attempts))
            if current.start_failure:
                continue
            tasks = [t for t in current.tasks if rank is None or _holds_rank(t, rank)]
            last = current is attempts[-1]
            for chunk in self._relay(
                job_id,
                current,
                tasks,
                nodes,
                follow and last,
                rank,
                tail_lines,
                active,
                failures,
            ):
                chunk.attempt = current.number
                yield chunk
        if failures:
            raise failures[0]

    def _follow(
        self, job_id: int, tail_lines: int, rank: int | None, active: Callable[[], bool]
    ) -> Iterator[common_pb2.LogChunk]:
        """The current attempt, then every later one as the job gets it, until the job has
        ended and its last attempt has been relayed."""
        failures: list[Exception] = []
        relayed: int | None = None
        while active():
            view = self._view(job_id)
            attempts = view.attempts
            if relayed is None:
                # Start with the current attempt (the latest), as `tail -f` starts at the end.
                relayed = max(len(attempts) - 1, 0)
                latest = attempts[-1:]
                if (
                    rank is not None
                    and latest
                    and not any(_holds_rank(t, rank) for t in latest[0].tasks)
                ):
                    raise LogsNotFoundError(f"job {job_id} has no rank {rank}")
            if relayed < len(attempts):
                current = attempts[relayed]
                relayed += 1
                yield _opening(job_id, current, len(attempts))
                if current.start_failure:
                    continue
                tasks = [t for t in current.tasks if rank is None or _holds_rank(t, rank)]
                for chunk in self._relay(
                    job_id,
                    current,
                    tasks,
                    view.nodes,
                    True,
                    rank,
                    tail_lines,
                    active,
                    failures,
                ):
                    chunk.attempt = current.number
                    yield chunk
                continue
            if is_terminal(view.job.state):
                break
            self._await_event(job_id, view.last_event_id, active)
        if failures:
            raise failures[0]

    def _await_event(self, job_id: int, after: int, active: Callable[[], bool]) -> None:
        """Returns once the job has an event after `after` (a new attempt, its end), or
        after a while regardless. Waking on every change of every job, it asks the store
        only for this job's events, a few times a second at most."""
        since = time.monotonic()
        generation = self._changes.generation if self._changes is not None else 0
        while active() and time.monotonic() - since < FOLLOW_REREAD_S:
            if self._changes is None:
                time.sleep(POLL_S)
            elif self._changes.closed:
                raise UnavailableError(
                    f"the master is stopping; follow job {job_id} again once it is back"
                )
            else:
                generation = self._changes.wait(generation, POLL_S)
            newer = self._tx.read(
                lambda uow: uow.jobs.events_after(after, job_ids=[job_id], limit=1)
            )
            if newer:
                return
            time.sleep(FOLLOW_READ_GAP_S)

    def _relay(
        self,
        job_id: int,
        attempt: Attempt,
        tasks: Sequence[Task],
        nodes: Mapping[str, Node],
        follow: bool,
        rank: int | None,
        tail_lines: int,
        active: Callable[[], bool],
        failures: list[Exception],
    ) -> Iterator[common_pb2.LogChunk]:
        """The output of the attempt's tasks, from all their workers at once; why a task's
        output could not be read is added to `failures`. Following, a task its worker has
        not started yet is asked for again until it starts or is taken back."""
        chunks: queue.Queue[common_pb2.LogChunk | Exception | None] = queue.Queue(maxsize=256)
        calls: list[Any] = []
        lock = threading.Lock()
        over = threading.Event()

        def put(item: common_pb2.LogChunk | Exception | None) -> bool:
            # Bounded: a slow reader slows its workers' streams, and once the relay is over
            # or its caller gone (whose stream may never be resumed to close the relay),
            # nothing waits here.
            while not over.is_set() and active():
                try:
                    chunks.put(item, timeout=POLL_S)
                    return True
                except queue.Full:
                    continue
            return False

        def read_task(task: Task) -> None:
            where = f"attempt {attempt.number} of job {job_id} on {task.node}"
            node = nodes.get(task.node)
            if node is None:
                raise WorkerUnreachableError(task.node, "node unknown")
            if node.state is NodeState.UNREACHABLE:
                # Asking would wait for a connection that does not come.
                put(
                    UnavailableError(
                        f"logs of {where}: node {task.node} is unreachable ({node.reason}); "
                        "its output stays there until the node is back"
                    )
                )
                return
            sub = worker_pb2.StreamTaskLogsRequest(
                job_id=job_id, follow=follow, tail_lines=tail_lines, lease=attempt.lease
            )
            if rank is not None:
                sub.rank = rank
            # Bytes relayed of each of the task's files, by (rank, stream): a stream read
            # again from the start after a break sends each byte once.
            relayed: dict[tuple[int, int], int] = {}
            while not over.is_set() and active():
                if relayed:
                    # Read again after a break: from the start, what was relayed dropped.
                    sub.tail_lines, sub.offset = 0, 0
                try:
                    self._workers.connect(node.address)
                    # A grpc call: iterated for chunks, and cancellable.
                    call: Any = self._workers.stream_logs(node.address, sub)
                    with lock:
                        calls.append(call)
                    for chunk in call:
                        if _trim(chunk, relayed) and not put(chunk):
                            call.cancel()
                            return
                    # A worker ends a follow once the task has ended there. When the master
                    # still has it running, the worker's agent went away instead (it was
                    # restarted, and adopts the task): read on from where the break was.
                    if not follow or not self._still_runs(task, over):
                        return
                except (grpc.RpcError, WorkerUnreachableError) as exc:
                    code = exc.code() if isinstance(exc, grpc.RpcError) else None
                    detail = exc.details() if isinstance(exc, grpc.RpcError) else str(exc)
                    if code == grpc.StatusCode.CANCELLED:
                        return
                    if code != grpc.StatusCode.NOT_FOUND:
                        # Following a task that still runs, a worker that does not answer
                        # (its agent restarting) is asked again until the master gives up
                        # on the task.
                        if follow and self._still_runs(task, over):
                            continue
                        put(UnavailableError(f"logs of {where}: {detail}"))
                        return
                    now = self._task_now(task) or task
                    if _never_ran(now):
                        return
                    if not now.active:
                        put(LogsNotFoundError(f"no output of {where}: {detail}"))
                        return
                    # Not started there yet (or waiting for its previous lease to stop):
                    # nothing to show so far, which is no error.
                    if not follow or over.wait(RETRY_START_S):
                        return

        def pump(task: Task) -> None:
            try:
                read_task(task)
            except WorkerUnreachableError as exc:
                where = f"attempt {attempt.number} of job {job_id} on {task.node}"
                put(UnavailableError(f"logs of {where}: {exc}"))
            finally:
                put(None)

        threads = [
            threading.Thread(
                target=pump, args=(t,), name=f"{PUMP_THREAD}-{job_id}-{t.node}", daemon=True
            )
            for t in tasks
        ]
        for thread in threads:
            thread.start()
        remaining = len(threads)
        try:
            while remaining and active():
                try:
                    item = chunks.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if item is None:
                    remaining -= 1
                elif isinstance(item, Exception):
                    failures.append(item)
                else:
                    yield item
        finally:
            over.set()
            with lock:
                for call in calls:
                    call.cancel()
