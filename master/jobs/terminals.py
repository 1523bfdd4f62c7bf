"""The terminal of an interactive job (hctl run --pty), relayed between its owner and the
worker that runs it.

The session's command runs under a pseudo-terminal on the worker of the job's first task;
the master only passes bytes: what is typed (and window sizes) to the worker's AttachTask,
what the terminal shows back, and the command's exit at the end. The relay holds the
caller's stream (which admission caps) and nothing else of the master's pool: gRPC's
client thread forwards the input, so a terminal that is slow, idle or gone holds up only
itself, and a sleeping thread looks the session's task up every few seconds, so that a
worker that vanished without a word (its node lost) ends the call with UNAVAILABLE.
When the caller goes away the worker's call is cancelled, and the worker hangs the session
up: nobody can reconnect to it, and the job ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from master.errors import FailedPreconditionError, UnavailableError
from master.nodes.workers import WorkerClients, WorkerUnreachableError
from master.process.transactions import Transactor
from protos.hadar.v1 import common_pb2
from store import UnitOfWork
from store.domain import Job, Node, Task
from store.states import JobState, NodeState, TaskState, is_terminal

# How long a placed session's worker has to acknowledge its start before attaching fails.
START_WAIT_S = 30.0
POLL_S = 0.25
# How often an open session's task is looked up in the store: a worker that vanished
# without closing the stream (its node lost) must not leave the caller waiting for ever.
WATCH_S = 2.0
# How long the command's exit may take to come down the stream once the store has the task
# ended (the worker reports the exit on another connection).
EXIT_GRACE_S = 3.0


@dataclass(frozen=True, slots=True)
class _Target:
    job: Job
    task: Task | None
    node: Node | None


class TerminalRelay:
    def __init__(self, tx: Transactor, workers: WorkerClients) -> None:
        self._tx = tx
        self._workers = workers

    def _target(self, job_id: int) -> _Target:
        def read(uow: UnitOfWork) -> _Target:
            job = uow.jobs.get(job_id)
            tasks = uow.tasks.active_for_job(job_id)
            if not tasks:
                return _Target(job, None, None)
            newest = max(t.lease for t in tasks)
            first = min((t for t in tasks if t.lease == newest), key=lambda t: t.task_index)
            return _Target(job, first, uow.nodes.find(first.node))

        return self._tx.read(read)

    def _started(self, job_id: int, active: Callable[[], bool]) -> tuple[Task, Node]:
        """The running session's first task, once its worker has acknowledged its start."""
        deadline = time.monotonic() + START_WAIT_S
        while True:
            target = self._target(job_id)
            job = target.job
            if not job.spec.interactive:
                raise FailedPreconditionError(
                    f"job {job_id} is not an interactive session (it was not submitted with "
                    f"--pty); read its output with `hctl logs {job_id}`"
                )
            if is_terminal(job.state):
                raise FailedPreconditionError(
                    f"job {job_id} has ended ({job.state.value}); its session is over"
                )
            if job.state is not JobState.RUNNING:
                raise FailedPreconditionError(
                    f"job {job_id} is {job.state.value}: its terminal opens once it runs "
                    f"(`hctl run --pty` waits for that; see `hctl show {job_id}`)"
                )
            task, node = target.task, target.node
            if task is not None and node is not None and task.state is not TaskState.ASSIGNED:
                return task, node
            if time.monotonic() >= deadline or not active():
                where = f" on {task.node}" if task is not None else ""
                raise UnavailableError(
                    f"the session of job {job_id} has not started{where} within "
                    f"{START_WAIT_S:g} s; see `hctl show {job_id}`"
                )
            time.sleep(POLL_S)

    def attach(
        self,
        job_id: int,
        first: common_pb2.TerminalInput,
        inputs: Iterator[common_pb2.TerminalInput],
        active: Callable[[], bool],
        on_end: Callable[[Callable[[], Any]], Any],
    ) -> Iterator[common_pb2.TerminalOutput]:
        """The session's terminal: `first` (its window size, any bytes) and then `inputs`
        relayed to its worker, and what it shows back until the command has exited. The
        worker's call is cancelled through `on_end` (told the callback to run when the
        caller's call ends) as soon as the caller goes away."""
        task, node = self._started(job_id, active)
        where = f"the terminal of job {job_id} on {node.name}"
        if node.state is NodeState.UNREACHABLE:
            raise UnavailableError(
                f"{where}: the node is unreachable ({node.reason}); cancel the session with "
                f"`hctl cancel {job_id}`"
            )
        try:
            self._workers.connect(node.address)
        except WorkerUnreachableError as exc:
            raise UnavailableError(f"{where}: {exc}") from exc

        def requests() -> Iterator[common_pb2.TerminalInput]:
            opening = common_pb2.TerminalInput()
            opening.CopyFrom(first)
            opening.job_id, opening.lease = job_id, task.lease
            yield opening
            yield from inputs

        call: Any = self._workers.attach_task(node.address, requests())
        over = threading.Event()

        def end() -> None:
            # The caller's call is over, whether or not this generator is resumed again.
            over.set()
            call.cancel()

        on_end(end)
        gone: list[str] = []

        def watch() -> None:
            # A thread of its own, sleeping mostly: the session's task as the store has it.
            while not over.wait(WATCH_S):
                now = self._tx.read(lambda uow: uow.tasks.find(job_id, task.task_index, task.lease))
                if now is not None and now.active:
                    continue
                if over.wait(EXIT_GRACE_S):
                    return
                state = now.state.value if now is not None else "gone"
                gone.append(
                    f"{where}: its task is {state} there and its worker no longer answers; "
                    f"see `hctl show {job_id}`"
                )
                call.cancel()
                return

        threading.Thread(target=watch, name=f"terminal-watch-{job_id}", daemon=True).start()
        try:
            for output in call:
                yield output
                if output.exited:
                    return
            # The worker ended the stream without the command's exit: it is going away.
            raise UnavailableError(f"{where}: the worker ended the session without an exit")
        except grpc.RpcError as exc:
            code, detail = exc.code(), exc.details()
            if code is grpc.StatusCode.CANCELLED:
                if gone:
                    raise UnavailableError(gone[0]) from exc
                return
            if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                raise FailedPreconditionError(f"{where}: {detail}") from exc
            raise UnavailableError(
                f"{where}: the connection to its worker broke ({code.name}: {detail}); the "
                "worker hangs the session up"
            ) from exc
        finally:
            over.set()
            call.cancel()
