"""A job's output, relayed from the workers that ran it, one attempt after another.

The output itself stays on the workers (each keeps every attempt's logs until the job has
left the node for its retention period); the store knows every attempt's tasks and nodes.
An attempt is one placement of the job: the tasks that share a lease. Every task of an
attempt is asked, whether it still runs or has ended, so a job that just finished shows
every rank, not only those of the tasks not yet reported.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from master.errors import InvalidArgumentError, LogsNotFoundError, UnavailableError
from master.nodes.workers import WorkerClients, WorkerUnreachableError
from master.process.transactions import Transactor
from protos.hadar.v1 import common_pb2, worker_pb2
from store import UnitOfWork
from store.domain import Job, JobEvent, Task
from store.states import JobState

POLL_S = 1.0


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


class LogRelay:
    def __init__(self, tx: Transactor, workers: WorkerClients) -> None:
        self._tx = tx
        self._workers = workers

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
        """Every attempt's output in order (or only `attempt`; only the current one when
        following), each opened by a chunk with no data that names it. A task whose output
        cannot be read (its worker is down, or no longer has it) does not hold back the
        others: the first such failure is raised once everything readable has been sent."""
        if attempt is not None and attempt < 1:
            raise InvalidArgumentError("attempt", "attempts count from 1")

        def read(uow: UnitOfWork) -> tuple[list[Attempt], dict[str, str]]:
            job = uow.jobs.get(job_id)
            found = attempts_of(job, uow.tasks.for_job(job.id), uow.jobs.events(job.id))
            return found, {n.name: n.address for n in uow.nodes.all()}

        attempts, addresses = self._tx.read(read)
        if attempt is not None:
            if attempt > len(attempts):
                raise LogsNotFoundError(
                    f"job {job_id} has no attempt {attempt} (it has had {len(attempts)})"
                )
            chosen = [attempts[attempt - 1]]
        elif follow:
            chosen = attempts[-1:]
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
            yield common_pb2.LogChunk(
                job_id=job_id,
                attempt=current.number,
                lease=current.lease,
                start_failure=current.start_failure,
                attempts=len(attempts),
            )
            if current.start_failure:
                continue
            tasks = [t for t in current.tasks if rank is None or _holds_rank(t, rank)]
            last = current is attempts[-1]
            for chunk in self._relay(
                job_id,
                current,
                tasks,
                addresses,
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

    def _relay(
        self,
        job_id: int,
        attempt: Attempt,
        tasks: Sequence[Task],
        addresses: Mapping[str, str],
        follow: bool,
        rank: int | None,
        tail_lines: int,
        active: Callable[[], bool],
        failures: list[Exception],
    ) -> Iterator[common_pb2.LogChunk]:
        """The output of the attempt's tasks, from all their workers at once; why a task's
        output could not be read is added to `failures`."""
        chunks: queue.Queue[common_pb2.LogChunk | Exception | None] = queue.Queue(maxsize=256)
        calls: list[Any] = []
        lock = threading.Lock()

        def pump(task: Task) -> None:
            try:
                address = addresses.get(task.node)
                if address is None:
                    raise WorkerUnreachableError(task.node, "node unknown")
                sub = worker_pb2.StreamTaskLogsRequest(
                    job_id=job_id, follow=follow, tail_lines=tail_lines, lease=attempt.lease
                )
                if rank is not None:
                    sub.rank = rank
                call = self._workers.stream_logs(address, sub)
                with lock:
                    calls.append(call)
                for chunk in call:
                    chunks.put(chunk)
            except grpc.RpcError as exc:
                code = exc.code()
                where = f"attempt {attempt.number} of job {job_id} on {task.node}"
                if code == grpc.StatusCode.NOT_FOUND and task.active:
                    # Not started there yet (or waiting for its previous lease to stop):
                    # nothing to show, which is no error.
                    pass
                elif code == grpc.StatusCode.NOT_FOUND:
                    chunks.put(LogsNotFoundError(f"no output of {where}: {exc.details()}"))
                elif code != grpc.StatusCode.CANCELLED:
                    chunks.put(UnavailableError(f"logs of {where}: {exc.details()}"))
            except WorkerUnreachableError as exc:
                where = f"attempt {attempt.number} of job {job_id} on {task.node}"
                chunks.put(UnavailableError(f"logs of {where}: {exc}"))
            finally:
                chunks.put(None)

        threads = [threading.Thread(target=pump, args=(t,), daemon=True) for t in tasks]
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
            with lock:
                for call in calls:
                    call.cancel()
