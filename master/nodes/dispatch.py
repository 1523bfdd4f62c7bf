"""Pushing decisions to workers: assignments (start, extend, stop) and out-of-round stops.

Everything sent here was committed first. Each node has its own lane: one push to it at a
time, retried a bounded number of times, its acknowledgements recorded as they come. Nobody
waits for a lane (a round hands its assignments over and is done), so a node that does not
answer delays no other node's starts, stops or lease renewals. A start
whose GPUs are still held by a stopping task (a preempted job checkpointing, the same job's
previous placement) waits until that task has exited, then goes out.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from master.jobs.lifecycle import StopOrder, fail_attempt, lose_job_placement, release_tasks
from master.nodes.pacing import Pacer
from master.nodes.workers import WorkerClients, WorkerUnreachableError
from master.process.coalesce import CoalescedRun
from master.process.groupcommit import GroupCommitter
from master.process.metrics import MasterMetrics
from master.process.transactions import Transactor
from master.service.codec import spec_to_pb, timestamp
from master.settings import Settings
from protos.hadar.v1 import worker_pb2
from store import UnitOfWork
from store.domain import Job, Task
from store.models import utcnow
from store.states import JobState, NodeState, TaskState, is_terminal

log = structlog.get_logger(__name__)

RENDEZVOUS_PORT_BASE = 20000
RENDEZVOUS_PORT_SPAN = 20000
# Fewer nodes than this to extend leases on: their pushes go out together (as many as the
# push pool runs at once, about what a burst costs nothing to).
PACE_FROM_NODES = 32


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One assignment for one node, tied to the stored task it concerns."""

    node: str
    task_id: int
    assignment: worker_pb2.TaskAssignment


# One assignment sent and the worker's answer to it (None when the answer left it out).
Answer = tuple[Outgoing, worker_pb2.AssignmentResult | None]


def rendezvous_port(lease: int) -> int:
    # Distinct per placement so a restarted group never meets a stale listener.
    return RENDEZVOUS_PORT_BASE + lease % RENDEZVOUS_PORT_SPAN


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0] if ":" in address else address


class Push:
    """Assignments handed to their nodes' lanes: one future per node, True once the node
    answered (and its answers are recorded), False once it could not be reached."""

    def __init__(self, futures: Mapping[str, Future[bool]] | None = None) -> None:
        self._futures: dict[str, Future[bool]] = dict(futures or {})

    def __or__(self, other: Push) -> Push:
        # A node in both has two futures: it counts as reached once both were.
        merged = dict(self._futures)
        for node, future in other._futures.items():
            if node in merged:
                merged[node] = _both(merged[node], future)
            else:
                merged[node] = future
        return Push(merged)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self._futures)

    def failures(self) -> set[str]:
        """Nodes not reached, so far (a push still under way counts)."""
        return {
            node
            for node, future in self._futures.items()
            if not future.done() or not future.result()
        }

    def each(self, fn: Callable[[str, bool], None]) -> None:
        """Call `fn(node, reached)` as each node's push ends."""
        for node, future in self._futures.items():
            future.add_done_callback(functools.partial(_each_done, fn, node))

    def then(self, fn: Callable[[set[str]], None]) -> Future[None]:
        """Call `fn` with the unreached nodes once every node's push is over (at once when
        there is none); the returned future is done once `fn` has run."""
        done: Future[None] = Future()
        pending = list(self._futures.values())
        remaining = [len(pending)]
        lock = threading.Lock()

        def finish() -> None:
            try:
                fn(self.failures())
            except Exception:
                log.exception("handling the end of a push failed")
            finally:
                done.set_result(None)

        def one(_: Future[bool]) -> None:
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                finish()

        if not pending:
            finish()
        for future in pending:
            future.add_done_callback(one)
        return done


def _each_done(fn: Callable[[str, bool], None], node: str, future: Future[bool]) -> None:
    try:
        fn(node, not future.cancelled() and future.exception() is None and future.result())
    except Exception:
        log.exception("handling the end of a node's push failed", node=node)


def _both(first: Future[bool], second: Future[bool]) -> Future[bool]:
    out: Future[bool] = Future()
    lock = threading.Lock()

    def one(_: Future[bool]) -> None:
        with lock:
            if out.done() or not (first.done() and second.done()):
                return
            out.set_result(first.result() and second.result())

    first.add_done_callback(one)
    second.add_done_callback(one)
    return out


class _Lane:
    """What waits to be pushed to one node; at most one push to it runs at a time."""

    def __init__(self, node: str) -> None:
        self.node = node
        # Where the node's worker listens, as of the latest hand.
        self.address = node
        self._lock = threading.Lock()
        self._busy = False
        # Keyed by (job, task, lease, action), in the order first handed: a later
        # extension of the same task replaces the earlier one (it carries a later lease
        # end), and a start handed again while one waits goes out once.
        self._waiting: dict[tuple[int, int, int, int], Outgoing] = {}
        self._futures: list[Future[bool]] = []
        self._round = 0
        # The newest round handed to this lane so far.
        self._newest = 0

    def hand(
        self,
        round_number: int,
        address: str,
        items: Sequence[Outgoing],
        executor: Executor,
        drain: Callable[[_Lane], None],
        *,
        unless_newer: bool = False,
    ) -> Future[bool]:
        """Queue `items` for the node (True once sent and answered). With `unless_newer`,
        items of a round older than one already handed here are dropped (answered True):
        a paced extension overtaken by the next round's own, whose later lease end it
        would otherwise cut back."""
        future: Future[bool] = Future()
        with self._lock:
            if unless_newer and round_number < self._newest:
                future.set_result(True)
                return future
            self._newest = max(self._newest, round_number)
            self.address = address
            for item in items:
                a = item.assignment
                self._waiting[(a.job_id, a.task_index, a.lease, a.action)] = item
            self._futures.append(future)
            self._round = max(self._round, round_number)
            start = not self._busy
            self._busy = True
        if start:
            try:
                executor.submit(drain, self)
            except RuntimeError:
                # The pool is shut down (the master is stopping): nothing will be sent.
                with self._lock:
                    self._busy = False
                    futures, self._futures, self._waiting = self._futures, [], {}
                for waiting in futures:
                    waiting.set_result(False)
        return future

    def take(self) -> tuple[int, str, list[Outgoing], list[Future[bool]]] | None:
        """What waits, to send now, and where; None (and the lane idle) when nothing does."""
        with self._lock:
            if not self._futures:
                self._busy = False
                return None
            batch = (self._round, self.address, list(self._waiting.values()), self._futures)
            self._waiting, self._futures, self._round = {}, [], 0
            return batch


class Dispatcher:
    def __init__(
        self,
        tx: Transactor,
        clients: WorkerClients,
        settings: Settings,
        metrics: MasterMetrics,
        executor: Executor,
        background: Executor,
        on_change: Callable[[], None],
    ) -> None:
        self._tx = tx
        self._clients = clients
        self._settings = settings
        self._metrics = metrics
        # RPCs to workers run on `executor`; follow-up work that itself sends RPCs runs on
        # `background`, so it never waits for a slot in the pool it is waiting on.
        self._executor = executor
        self._background = background
        self._on_change = on_change
        self._lanes: dict[str, _Lane] = {}
        self._lanes_lock = threading.Lock()
        # Every exit and registration asks for the ready starts to be dispatched; under a
        # stream of exits one run serves the requests made while it waited to start.
        self._ready_soon = CoalescedRun(self._safe_dispatch_ready, background)
        # Whether a start may be waiting for older tasks to end: what the newest read of
        # the tasks found (reads are numbered as they begin, so an older read finishing
        # later changes nothing), or set by whatever may have changed it unseen. An exit
        # then reads the tasks only while it is set: after a round's starts have gone out,
        # the assigned tasks are those whose START is on its way, and an exit frees nothing
        # for them.
        self._waiting_lock = threading.Lock()
        self._maybe_waiting = True
        self._reads_begun = 0
        self._read_seen = 0
        # The answers of pushes to many workers that come back while a transaction records
        # others are recorded together in the next one.
        self._answers: GroupCommitter[Sequence[Answer], list[StopOrder]] = GroupCommitter(
            self._record_group
        )
        self._pacer = Pacer("hadar-extend")

    def close(self) -> None:
        """Hands over at once the extensions still waiting for their time (see `send`)."""
        self._pacer.close()

    # -- building assignments ------------------------------------------------------------

    def checkpoint_dir(self, job: Job) -> str:
        return job.spec.checkpoint_dir or f"{self._settings.checkpoint_dir}/job-{job.id}"

    def _expiry(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self._settings.lease_s)

    def start(
        self,
        job: Job,
        task: Task,
        group: Sequence[Task],
        addresses: dict[str, str],
        round_number: int,
        now: datetime,
    ) -> worker_pb2.TaskAssignment:
        # One rendezvous per job, HadarE copies included (see rounds.split_tasks).
        first = min(group, key=lambda t: t.task_index)
        return worker_pb2.TaskAssignment(
            job_id=job.id,
            task_index=task.task_index,
            lease=task.lease,
            action=worker_pb2.ASSIGNMENT_ACTION_START,
            spec=spec_to_pb(job.spec),
            gpu_indices=list(task.gpu_indices),
            gpu_type=task.gpu_type,
            rendezvous=worker_pb2.Rendezvous(
                master_addr=_host(addresses.get(first.node, first.node)),
                master_port=rendezvous_port(task.lease),
                world_size=sum(len(t.gpu_indices) for t in group),
                rank_offset=task.rank_offset,
            ),
            local_batch_sizes=list(task.local_batch_sizes),
            accumulation_steps=task.accumulation_steps,
            iteration_budget=task.iteration_budget,
            iterations_done=job.iterations_done,
            lease_expires_at=timestamp(self._expiry(now)),
            num_copies=task.num_copies if task.num_copies > 1 else 0,
            copy_index=task.copy_index,
            round=round_number,
            grace_s=self._settings.grace_s,
            checkpoint_dir=self.checkpoint_dir(job),
            user=job.user,
        )

    def extend(
        self, job: Job, task: Task, round_number: int, now: datetime
    ) -> worker_pb2.TaskAssignment:
        return worker_pb2.TaskAssignment(
            job_id=job.id,
            task_index=task.task_index,
            lease=task.lease,
            action=worker_pb2.ASSIGNMENT_ACTION_EXTEND,
            gpu_indices=list(task.gpu_indices),
            gpu_type=task.gpu_type,
            local_batch_sizes=list(task.local_batch_sizes),
            accumulation_steps=task.accumulation_steps,
            iteration_budget=task.iteration_budget,
            iterations_done=job.iterations_done,
            lease_expires_at=timestamp(self._expiry(now)),
            round=round_number,
            grace_s=self._settings.grace_s,
            checkpoint_dir=self.checkpoint_dir(job),
            user=job.user,
        )

    def stop(
        self, task: Task, round_number: int, reason: str = "", *, resumes: bool = False
    ) -> worker_pb2.TaskAssignment:
        """A STOP; `reason` (the round's decision) goes into the job's output."""
        return worker_pb2.TaskAssignment(
            job_id=task.job_id,
            task_index=task.task_index,
            lease=task.lease,
            action=worker_pb2.ASSIGNMENT_ACTION_STOP,
            gpu_indices=list(task.gpu_indices),
            gpu_type=task.gpu_type,
            round=round_number,
            grace_s=self._settings.grace_s,
            reason=reason,
            resumes=resumes,
        )

    # -- starts that are ready -----------------------------------------------------------

    def ready_starts(self, uow: UnitOfWork, round_number: int) -> list[Outgoing]:
        """START assignments for every placement whose GPUs are free of older tasks."""
        # Asked for by every round, registration and lost node, and by exits while a start
        # may wait (dispatch_ready_soon); most often nothing waits to start: that is known
        # without loading every task that runs.
        read = self._begin_read()
        if not uow.tasks.any_in(TaskState.ASSIGNED):
            self._end_read(read, waiting=False)
            return []
        # What an assigned task waits for is on its own node or of its own job.
        active = uow.tasks.around_assigned()
        groups: dict[tuple[int, int], list[Task]] = defaultdict(list)
        # Every task of a placement, started or not: the rendezvous (world size, the address
        # of rank 0) spans them all, also when a START is resent to only some of them.
        placements: dict[tuple[int, int], list[Task]] = defaultdict(list)
        for task in active:
            placements[(task.job_id, task.lease)].append(task)
            if task.state is TaskState.ASSIGNED:
                groups[(task.job_id, task.lease)].append(task)
        if not groups:
            return []
        nodes = uow.nodes.addresses()
        addresses = {name: address for name, (address, _) in nodes.items()}
        older = _OlderTasks(active)
        ready = {
            key: group for key, group in groups.items() if not any(older.block(t) for t in group)
        }
        self._end_read(read, waiting=len(ready) < len(groups))
        jobs = uow.jobs.get_many({job_id for job_id, _ in ready})
        requeued = self._requeue_reasons(
            uow, [j for j in jobs.values() if j.retries or j.preemptions or j.requeues]
        )
        now = utcnow()
        out: list[Outgoing] = []
        for (job_id, lease), group in sorted(ready.items()):
            job = jobs[job_id]
            if is_terminal(job.state) or any(
                t.node not in nodes or nodes[t.node][1] is NodeState.UNREACHABLE for t in group
            ):
                continue
            placement = placements[(job_id, lease)]
            for t in group:
                start = self.start(job, t, placement, addresses, round_number, now)
                start.reason = requeued.get(job_id, "")
                out.append(Outgoing(t.node, t.id, start))
            log.debug("start ready", job_id=job_id, lease=lease)
        return out

    @staticmethod
    def _requeue_reasons(uow: UnitOfWork, jobs: Sequence[Job]) -> dict[int, str]:
        """Why each job runs again, for the `hadar:` line that opens its new attempt's
        output (the worker adds where it resumes from), when nothing wrote it into the
        last attempt's output: after a failure or a loss, or a requeue of a job that had
        ended. A stop the scheduler or a requeue ordered (a preemption, a requeue of a
        running job) has its line in the last attempt's output already."""
        events = uow.jobs.last_back_in_queue([j.id for j in jobs])
        reasons: dict[int, str] = {}
        for job_id, event in events.items():
            if event.kind == "requeued":
                if is_terminal(event.from_state):
                    reasons[job_id] = event.reason
            # Every way into PREEMPTED but the round's own ("preempted"): a retry, a
            # lost node, a worker that no longer runs the lease.
            elif event.kind != "preempted":
                reasons[job_id] = f"requeued after {event.reason}"
        return reasons

    def _begin_read(self) -> int:
        with self._waiting_lock:
            self._reads_begun += 1
            return self._reads_begun

    def _end_read(self, read: int, *, waiting: bool) -> None:
        with self._waiting_lock:
            if read > self._read_seen:
                self._read_seen = read
                self._maybe_waiting = waiting

    def dispatch_ready(self, round_number: int = 0) -> Push:
        """Send every start that can go now (without waiting for the answers)."""
        outgoing = self._tx.read(lambda uow: self.ready_starts(uow, round_number))
        return self.send(round_number, outgoing)

    def dispatch_ready_soon(self, *, after_exit: bool = False) -> None:
        """Dispatch the ready starts on the background pool (requests coalesce, see
        CoalescedRun). ``after_exit``: asked because tasks ended, which can only let go
        the starts that the last read of the tasks found waiting for older ones; with none
        waiting nothing is read. Any other cause (a node registered or lost) reads."""
        if after_exit:
            with self._waiting_lock:
                if not self._maybe_waiting:
                    return
        else:
            self.may_be_waiting()
        self._ready_soon.request()

    def may_be_waiting(self) -> None:
        """Starts may wait unseen: tasks changed (committed) in a way that no read of them
        begun before this call has seen, so none of those reads may clear the flag; the
        next exit reads the tasks, unless a read begun after this call found none
        waiting."""
        with self._waiting_lock:
            self._maybe_waiting = True
            self._read_seen = self._reads_begun

    def _safe_dispatch_ready(self) -> None:
        try:
            self.dispatch_ready()
        except Exception:
            self.may_be_waiting()
            log.exception("dispatching ready starts failed")

    # -- sending ---------------------------------------------------------------------------

    def send(
        self, round_number: int, outgoing: Sequence[Outgoing], *, spread_s: float = 0.0
    ) -> Push:
        """Hand assignments to their nodes' lanes and return at once; see :class:`Push`.

        Each node has one lane: one ApplyAssignments in flight at a time, retried up to
        the dispatch attempts, its answers recorded as they come. What is handed to a busy
        lane (a node slow to answer) waits there and goes out with the next call, an
        extension replacing the older one of the same task; other nodes' lanes never wait
        for it.

        With `spread_s`, the nodes that get only lease extensions, when there are at least
        PACE_FROM_NODES of them, are handed to their lanes evenly over that many seconds
        (the caller makes sure their leases outlast it); starts and stops go at once.
        """
        by_node: dict[str, list[Outgoing]] = defaultdict(list)
        for item in outgoing:
            by_node[item.node].append(item)
        if not by_node:
            return Push()
        # One read for every node handed to, not one per push.
        nodes = self._tx.read(lambda uow: uow.nodes.addresses())
        paced = [
            node
            for node, items in by_node.items()
            if all(i.assignment.action == worker_pb2.ASSIGNMENT_ACTION_EXTEND for i in items)
        ]
        if spread_s <= 0 or len(paced) < PACE_FROM_NODES:
            paced = []
        delays = {node: spread_s * k / len(paced) for k, node in enumerate(paced)}
        now = time.monotonic()
        futures: dict[str, Future[bool]] = {}
        for node, items in by_node.items():
            address = nodes[node][0] if node in nodes else node
            delay = delays.get(node, 0.0)
            if delay > 0:
                futures[node] = self._hand_at(now + delay, node, round_number, address, items)
            else:
                futures[node] = self._lane(node).hand(
                    round_number, address, items, self._executor, self._drain
                )
        return Push(futures)

    def _hand_at(
        self, due: float, node: str, round_number: int, address: str, items: list[Outgoing]
    ) -> Future[bool]:
        """`node`'s items handed to its lane at `due` (time.monotonic); the future is the
        lane's."""
        handed: Future[bool] = Future()

        def hand() -> None:
            try:
                lane = self._lane(node).hand(
                    round_number, address, items, self._executor, self._drain, unless_newer=True
                )
            except BaseException:
                handed.set_result(False)
                raise
            lane.add_done_callback(lambda done: handed.set_result(done.result()))

        self._pacer.at(due, hand)
        return handed

    def _lane(self, node: str) -> _Lane:
        with self._lanes_lock:
            lane = self._lanes.get(node)
            if lane is None:
                lane = self._lanes[node] = _Lane(node)
            return lane

    def _drain(self, lane: _Lane) -> None:
        """Send what waits in `lane` until nothing does (runs on the push pool)."""
        while True:
            batch = lane.take()
            if batch is None:
                return
            round_number, address, items, futures = batch
            reached = False
            try:
                reached = self._push(lane.node, address, round_number, items)
            except Exception:
                log.exception("pushing to a worker failed", node=lane.node)
            finally:
                if not reached and any(
                    i.assignment.action == worker_pb2.ASSIGNMENT_ACTION_START for i in items
                ):
                    # Those starts are still to go: the next exit sends them again.
                    self.may_be_waiting()
                for future in futures:
                    future.set_result(reached)

    def _push(self, node: str, address: str, round_number: int, items: Sequence[Outgoing]) -> bool:
        """One ApplyAssignments to `node` at `address` and its answers recorded; False when
        it could not be reached."""
        try:
            response = self._clients.apply(
                address,
                worker_pb2.ApplyAssignmentsRequest(
                    round=round_number, assignments=[i.assignment for i in items]
                ),
            )
        except WorkerUnreachableError as exc:
            self._metrics.dispatch_failures.inc()
            log.warning("worker did not acknowledge", node=node, error=str(exc))
            return False
        results = {(r.job_id, r.task_index, r.lease): r for r in response.results}
        answers: list[Answer] = []
        for item in items:
            a = item.assignment
            answers.append((item, results.get((a.job_id, a.task_index, a.lease))))
        if any(_needs_recording(item, result) for item, result in answers):
            orders = self._answers.run(answers)
            self.send_stops(orders)
            self._on_change()
        return True

    def _record_group(self, group: Sequence[Sequence[Answer]]) -> list[list[StopOrder]]:
        """The answers of several pushes in one transaction; the stops it orders go back
        with the first push of the group (whoever sends them, each is sent once)."""
        orders = self._record_answers([answer for answers in group for answer in answers])
        return [orders, *([] for _ in group[1:])]

    def _record_answers(self, answers: Sequence[Answer]) -> list[StopOrder]:
        """Store what the workers answered, job by job.

        All jobs go in one transaction. Should one job's handling raise, the transaction is
        done again with each job in a savepoint: that job alone is failed, with the error as
        its reason, and the others are recorded as usual.
        """
        by_job: dict[int, list[Answer]] = defaultdict(list)
        for answer in answers:
            by_job[answer[0].assignment.job_id].append(answer)
        try:
            return self._tx.write(lambda uow: self._record(uow, by_job, isolate=False))
        except Exception as exc:
            # The job by job pass logs the failing job's traceback.
            log.warning("recording the workers' answers failed; again job by job", error=str(exc))
        return self._tx.write(lambda uow: self._record(uow, by_job, isolate=True))

    def _record(
        self, uow: UnitOfWork, by_job: dict[int, list[Answer]], *, isolate: bool
    ) -> list[StopOrder]:
        # An applied EXTEND or STOP changes nothing here; only the rest needs its task.
        todo = {
            job_id: [(item, result) for item, result in items if _needs_recording(item, result)]
            for job_id, items in sorted(by_job.items())
        }
        tasks = uow.tasks.get_many([item.task_id for items in todo.values() for item, _ in items])
        orders: list[StopOrder] = []
        for job_id, items in todo.items():
            if not items:
                continue
            if not isolate:
                orders.extend(self._record_job(uow, items, tasks))
                continue
            try:
                with uow.savepoint():
                    more = self._record_job(uow, items, tasks)
            except Exception as exc:
                self._metrics.isolated_job_failures.labels(stage="dispatch").inc()
                log.exception("recording the workers' answers failed for a job", job_id=job_id)
                more = self._fail_unrecorded(uow, job_id, exc)
            orders.extend(more)
        return orders

    def _record_job(
        self, uow: UnitOfWork, items: Sequence[Answer], tasks: dict[int, Task]
    ) -> list[StopOrder]:
        """One job's answers; refusals end the attempt they belong to once, however many
        of its tasks were refused."""
        refused: dict[int, list[tuple[str, worker_pb2.AssignmentResult | None]]] = defaultdict(list)
        rounds: dict[int, int] = {}
        for item, result in items:
            task = tasks.get(item.task_id)
            if task is None:
                continue
            action = item.assignment.action
            outcome = result.outcome if result is not None else None
            message = result.message if result is not None else "no result for this task"
            if outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED:
                if (
                    action == worker_pb2.ASSIGNMENT_ACTION_START
                    and task.state is TaskState.ASSIGNED
                ):
                    uow.tasks.set_state(task.id, TaskState.STARTING)
                continue
            if action == worker_pb2.ASSIGNMENT_ACTION_STOP:
                # The worker does not run it (any more): nothing holds those GPUs.
                if task.active:
                    uow.tasks.set_state(task.id, TaskState.LOST)
                continue
            if not task.active:
                continue
            if task.state is TaskState.STOPPING and action == worker_pb2.ASSIGNMENT_ACTION_EXTEND:
                # Stopped since the round extended it (a time limit, a cancel): the worker
                # refuses to extend a task it is stopping, and the task still holds its GPUs
                # until the exit report that follows ends it.
                continue
            log.warning(
                "assignment refused",
                job_id=task.job_id,
                node=item.node,
                lease=task.lease,
                outcome=worker_pb2.AssignmentOutcome.Name(outcome or 0),
                message=message,
            )
            uow.tasks.set_state(task.id, TaskState.LOST)
            refused[task.lease].append((item.node, result))
            rounds[task.lease] = item.assignment.round
        orders: list[StopOrder] = []
        for lease, answers in sorted(refused.items()):
            job = uow.jobs.get(items[0][0].assignment.job_id)
            orders.extend(self._end_refused_attempt(uow, job, lease, answers, rounds[lease]))
        return orders

    def _end_refused_attempt(
        self,
        uow: UnitOfWork,
        job: Job,
        lease: int,
        answers: Sequence[tuple[str, worker_pb2.AssignmentResult | None]],
        round_number: int,
    ) -> list[StopOrder]:
        failed = [
            (node, result)
            for node, result in answers
            if result is not None and result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_FAILED
        ]
        if not failed:
            nodes = ", ".join(sorted({node for node, _ in answers}))
            _, orders = lose_job_placement(
                uow, job, f"worker {nodes} no longer runs lease {lease}", kind="lost"
            )
            return orders
        nodes = ", ".join(sorted({node for node, _ in failed}))
        unknown = sorted({r.unknown_user for _, r in failed if r.unknown_user})
        if unknown:
            # No placement can start it: the account is missing, not the node's capacity.
            reason = f"user {unknown[0]!r} has no Unix account on {nodes}"
        else:
            reason = f"could not start on {nodes}: {failed[0][1].message}"
        _, orders = fail_attempt(
            uow,
            job,
            reason=reason,
            exit_code=None,
            max_retries=self._settings.max_retries,
            retryable=not unknown,
            round=round_number,
        )
        return orders

    @staticmethod
    def _fail_unrecorded(uow: UnitOfWork, job_id: int, error: Exception) -> list[StopOrder]:
        """A job whose answers could not be recorded would keep its GPUs and be sent the
        same start every round: it ends FAILED with the error instead."""
        reason = f"the master could not record its workers' answers: {error}"
        try:
            with uow.savepoint():
                orders = release_tasks(
                    uow, uow.tasks.active_for_job(job_id), reason, checkpoint=False
                )
                if not is_terminal(uow.jobs.get(job_id).state):
                    uow.jobs.transition(job_id, JobState.FAILED, kind="failed", reason=reason)
        except Exception as exc:
            log.error(
                "could not fail the job either; it is left as it was",
                job_id=job_id,
                error=str(exc),
            )
            return []
        return orders

    def send_stops(self, orders: Sequence[StopOrder]) -> None:
        """StopTask for each order, in the background (stopping is idempotent)."""
        if not orders:
            return
        nodes = self._tx.read(lambda uow: uow.nodes.addresses())
        for order in orders:
            if order.node not in nodes:
                continue
            address = nodes[order.node][0]
            self._executor.submit(self._stop_one, address, order)

    def _stop_one(self, address: str, order: StopOrder) -> None:
        request = worker_pb2.StopTaskRequest(
            job_id=order.job_id,
            lease=order.lease,
            checkpoint=order.checkpoint,
            grace_s=self._settings.grace_s,
            reason=order.reason,
            resumes=order.resumes,
        )
        try:
            self._clients.stop(address, request)
            log.info("stop sent", job_id=order.job_id, node=order.node, lease=order.lease)
        except WorkerUnreachableError as exc:
            self._metrics.dispatch_failures.inc()
            log.warning("stop not delivered", job_id=order.job_id, node=order.node, error=str(exc))


def _needs_recording(item: Outgoing, result: worker_pb2.AssignmentResult | None) -> bool:
    """Whether a worker's answer changes what the store holds: an applied extension or stop
    changes nothing (most of a round's pushes: every running job's lease is extended), so
    such pushes take no transaction at all."""
    return (
        result is None
        or result.outcome != worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
        or item.assignment.action == worker_pb2.ASSIGNMENT_ACTION_START
    )


class _OlderTasks:
    """Which active tasks an assigned task must wait for: an older lease of its own job,
    or one on any of its GPUs other than its sharing partner's. Indexed once per read, so
    that checking every assigned task costs what its GPUs hold, not every active task."""

    def __init__(self, active: Sequence[Task]) -> None:
        self._oldest: dict[int, int] = {}
        self._on_gpu: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        for task in active:
            known = self._oldest.get(task.job_id)
            if known is None or task.lease < known:
                self._oldest[task.job_id] = task.lease
            for index in task.gpu_indices:
                self._on_gpu[(task.node, index)].append((task.lease, task.job_id))

    def block(self, task: Task) -> bool:
        if self._oldest.get(task.job_id, task.lease) < task.lease:
            return True
        return any(
            lease < task.lease and job_id not in (task.job_id, task.shared_with_job_id)
            for index in task.gpu_indices
            for lease, job_id in self._on_gpu.get((task.node, index), ())
        )
