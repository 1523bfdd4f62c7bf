"""The worker registry: registration with reconciliation, heartbeats, lost nodes, drains."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from master.errors import FailedPreconditionError
from master.jobs.lifecycle import StopOrder, lose_job_placement, lose_node
from master.nodes.dispatch import Dispatcher
from master.nodes.task_index import ActiveTaskIndex
from master.process.metrics import MasterMetrics
from master.process.transactions import Transactor
from master.settings import Settings
from store import UnitOfWork
from store.domain import Gpu, Node, Task
from store.states import GpuHealth, NodeState, TaskState, is_terminal

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ReportedTask:
    """A task as its worker reports it."""

    job_id: int
    task_index: int
    lease: int


@dataclass(frozen=True, slots=True)
class Registration:
    node: str
    address: str
    gpus: tuple[Gpu, ...]
    agent_version: str
    workloads: tuple[str, ...]
    tasks: tuple[ReportedTask, ...]
    # Tasks that ended on the worker, whose exit reports are still to come.
    ended: tuple[ReportedTask, ...] = ()


@dataclass(frozen=True, slots=True)
class Reconciliation:
    keep: tuple[ReportedTask, ...]
    stop: tuple[ReportedTask, ...]


class Registry:
    def __init__(
        self,
        tx: Transactor,
        dispatcher: Dispatcher,
        settings: Settings,
        metrics: MasterMetrics,
        on_change: Callable[[], None],
        on_capacity: Callable[[bool], None],
    ) -> None:
        self._tx = tx
        self._dispatcher = dispatcher
        self._settings = settings
        self._metrics = metrics
        self._on_change = on_change
        self._on_capacity = on_capacity
        # Heartbeat times reach the store in one transaction for all nodes every
        # `write_every_s` (write_heartbeats): node -> (when, its GPUs) of the newest
        # heartbeat not written yet.
        self.write_every_s = settings.heartbeat_timeout_s / 4
        self._unwritten: dict[str, tuple[datetime, tuple[Gpu, ...]]] = {}
        # When each node was last heard from (a heartbeat or a registration), as received:
        # the store's heartbeat time may be up to a quarter of the timeout older, and a
        # node is lost only a full timeout after it actually fell silent.
        self._heard: dict[str, datetime] = {}
        # Node state and GPU health as last read, so that a heartbeat with nothing to write
        # needs no database access. Every state change made here drops the entry
        # (_nodes_changed).
        self._liveness: dict[str, tuple[NodeState, dict[int, GpuHealth]]] = {}
        self._beats_lock = threading.Lock()
        self.nodes_version = 0
        # What heartbeats check their tasks against.
        self._tasks = ActiveTaskIndex(tx)

    def _nodes_changed(self, name: str) -> None:
        with self._beats_lock:
            # The next heartbeat re-reads the node's state and GPU health from the store.
            self._liveness.pop(name, None)
            self.nodes_version += 1

    def register(self, reg: Registration) -> Reconciliation:
        """Upsert the node; keep the reported tasks the master still wants there, stop the
        rest; tasks the master believed were running there but are gone lose their place,
        unless the worker says they ended: their exit reports, which follow, decide."""
        now = datetime.now(UTC)

        def change(uow: UnitOfWork) -> tuple[Reconciliation, list[StopOrder]]:
            _, previous = uow.nodes.upsert(
                reg.node,
                address=reg.address,
                gpus=reg.gpus,
                agent_version=reg.agent_version,
                workloads=reg.workloads,
                now=now,
            )
            keep, stop = self._reconcile(uow, reg.node, reg.tasks, now)
            orders: list[StopOrder] = []
            reported = {(t.job_id, t.task_index, t.lease) for t in reg.tasks}
            ended = {(t.job_id, t.task_index, t.lease) for t in reg.ended}
            for task in uow.tasks.active_on_node(reg.node):
                key = (task.job_id, task.task_index, task.lease)
                if key in reported:
                    continue
                if key in ended:
                    # It ended while its exit could not be reported (the master was down): a
                    # completion must count as one, not as a lost placement and a preemption.
                    continue
                if task.state is TaskState.ASSIGNED:
                    continue  # not sent yet, or lost in flight: it is sent again below
                # The worker restarted without it: the job's placement is broken.
                uow.tasks.set_state(task.id, TaskState.LOST, now=now)
                job = uow.jobs.get(task.job_id)
                if not is_terminal(job.state):
                    _, more = lose_job_placement(
                        uow,
                        job,
                        f"task on {reg.node} was gone when its worker registered again",
                        kind="lost",
                        now=now,
                    )
                    orders.extend(more)
            log.info(
                "worker registered",
                node=reg.node,
                address=reg.address,
                gpus=len(reg.gpus),
                previous=previous.value if previous else None,
                kept=len(keep),
                stopped=len(stop),
                ended=len(reg.ended),
            )
            return Reconciliation(tuple(keep), tuple(stop)), orders

        result, orders = self._tx.write(change)
        self._nodes_changed(reg.node)
        self._note_heard(reg.node, now)
        self._dispatcher.send_stops(orders)
        self._dispatcher.dispatch_ready_soon()
        self._on_change()
        self._on_capacity(True)
        return result

    @staticmethod
    def _reconcile(
        uow: UnitOfWork, node: str, reported: Sequence[ReportedTask], now: datetime
    ) -> tuple[list[ReportedTask], list[ReportedTask]]:
        keep: list[ReportedTask] = []
        stop: list[ReportedTask] = []
        for item in reported:
            task = uow.tasks.find(item.job_id, item.task_index, item.lease)
            wanted = (
                task is not None
                and task.node == node
                and task.active
                and task.state is not TaskState.STOPPING
            )
            if wanted and task is not None:
                job = uow.jobs.find(task.job_id)
                wanted = job is not None and not is_terminal(job.state)
            if wanted and task is not None:
                if task.state in (TaskState.ASSIGNED, TaskState.STARTING):
                    uow.tasks.set_state(task.id, TaskState.RUNNING, now=now)
                keep.append(item)
                continue
            stop.append(item)
            if (
                task is not None
                and task.node == node
                and task.state is TaskState.LOST
                and not _newer_started(uow, task)
            ):
                # Written off while its node was away, yet it still runs: until its exit is
                # reported it holds its GPUs, and the job's next start waits for it (a
                # start is not sent while an older task of the job is active), so the job
                # never runs twice and resumes from what this task checkpoints. (When a
                # newer placement already runs, the stale task's exit stays ignored.)
                uow.tasks.set_state(task.id, TaskState.STOPPING, now=now)
                uow.jobs.note(
                    task.job_id,
                    kind="stale_task",
                    reason=f"task on {node} in lease {task.lease}, written off when the node "
                    "was lost, still runs; stopping it, and the job's next start waits for "
                    "its exit",
                    at=now,
                    set_reason=False,
                )
        return keep, stop

    def heartbeat(
        self, node: str, tasks: Sequence[ReportedTask], gpus: Sequence[Gpu]
    ) -> tuple[bool, list[ReportedTask]]:
        """(re-register?, tasks to stop). Heartbeats change no job, so they do not wait for
        the job lock.

        A heartbeat that changes nothing reads and writes no database: the node's state
        and GPU health come from memory (read once after each change of the node), the
        tasks are checked against the index of active tasks, and the heartbeat's time is
        written with every other node's by write_heartbeats. Only a change of a GPU's
        health is written at once. The loss check goes by the time each heartbeat
        arrived: a node is declared lost a timeout after its last heartbeat (plus at most
        one check interval), never earlier.
        """
        now = datetime.now(UTC)
        with self._beats_lock:
            self._hear(node, now)
            unwritten = self._unwritten.get(node)
            if unwritten is None or now > unwritten[0]:
                self._unwritten[node] = (now, tuple(gpus))
            known = self._liveness.get(node)
            version = self.nodes_version
        if known is None:
            known = self._tx.read(lambda uow: uow.nodes.liveness(node))
            self._remember_liveness(node, known, version)
        if known is None or known[0] is NodeState.UNREACHABLE:
            return True, []
        state, health = known
        if any(g.index in health and health[g.index] is not g.health for g in gpus):
            written = self._tx.write(
                lambda uow: uow.nodes.heartbeat(node, now=now, gpus=gpus), jobs=False
            )
            if written is None:  # lost or gone meanwhile
                self._remember_liveness(node, None, version)
                return True, []
            merged = dict(health)
            merged.update({g.index: g.health for g in gpus if g.index in health})
            self._remember_liveness(node, (state, merged), version)
        unwanted = self._tasks.not_on(node, tasks)
        if not unwanted:
            return False, []

        def confirm(uow: UnitOfWork) -> list[ReportedTask]:
            stop: list[ReportedTask] = []
            for item in unwanted:
                task = uow.tasks.find(item.job_id, item.task_index, item.lease)
                if task is None or task.node != node or not task.active:
                    stop.append(item)
            return stop

        # Rare (a task ended or moved since the worker last heard): before a worker is told
        # to stop anything, the store confirms it within this master's term (a write
        # checks the term), as a master that lost its term unnoticed must order nothing.
        return False, self._tx.write(confirm, jobs=False)

    def _remember_liveness(
        self, node: str, known: tuple[NodeState, dict[int, GpuHealth]] | None, version: int
    ) -> None:
        with self._beats_lock:
            if known is None:
                self._liveness.pop(node, None)
            elif self.nodes_version == version:
                # (A node changed meanwhile may have changed after `known` was read.)
                self._liveness[node] = known

    def write_heartbeats(self) -> int:
        """Write the newest heartbeat time (and GPU utilization) of every node heard from
        since the last call, in one transaction. Returns how many nodes were written."""
        with self._beats_lock:
            beats, self._unwritten = self._unwritten, {}
        if not beats:
            return 0
        try:
            return self._tx.write(lambda uow: uow.nodes.heard(beats), jobs=False)
        except BaseException:
            with self._beats_lock:
                # Kept for the next call, unless a newer heartbeat replaced it meanwhile.
                for node, beat in beats.items():
                    newer = self._unwritten.get(node)
                    if newer is None or newer[0] < beat[0]:
                        self._unwritten[node] = beat
            raise

    def _note_heard(self, node: str, at: datetime) -> None:
        with self._beats_lock:
            self._hear(node, at)

    def _hear(self, node: str, at: datetime) -> None:
        previous = self._heard.get(node)
        if previous is None or at > previous:
            self._heard[node] = at

    def _last_heard(self, node: Node) -> datetime:
        """The newest of the stored heartbeat time and the last one this master received
        (the stored one alone after a start, or on a node another master heard from)."""
        with self._beats_lock:
            heard = self._heard.get(node.name)
        return max(node.last_heartbeat, heard) if heard is not None else node.last_heartbeat

    def check_lost(self, now: datetime | None = None) -> list[str]:
        """Declare nodes silent for longer than the timeout UNREACHABLE; their jobs are
        preempted (to be placed again from their checkpoints). Returns the lost nodes.

        Silent means no heartbeat received for the timeout: the stored heartbeat time is
        written only every quarter of the timeout, so on its own it would cut a node off
        up to a quarter of the timeout early. Nothing else (a push the node did not
        answer) counts against a node."""
        at = now or datetime.now(UTC)
        cutoff = at - timedelta(seconds=self._settings.heartbeat_timeout_s)
        stored = self._tx.read(lambda uow: uow.nodes.silent_since(cutoff))
        silent = [node for node in stored if self._last_heard(node) < cutoff]
        if not silent:
            return []

        def change(uow: UnitOfWork) -> tuple[list[str], list[StopOrder]]:
            lost: list[str] = []
            orders: list[StopOrder] = []
            for node in silent:
                current = uow.nodes.find(node.name)
                if current is None or self._last_heard(current) >= cutoff:
                    continue  # it came back meanwhile
                if current.state is NodeState.UNREACHABLE:
                    continue
                silent_s = (at - self._last_heard(current)).total_seconds()
                uow.nodes.set_state(
                    node.name, NodeState.UNREACHABLE, f"no heartbeat for {silent_s:.0f} s"
                )
                orders.extend(lose_node(uow, node.name, f"node {node.name} lost", now=at))
                lost.append(node.name)
            return lost, orders

        lost, orders = self._tx.write(change)
        for name in lost:
            self._nodes_changed(name)
            self._metrics.lost_nodes.inc()
            log.warning("node lost", node=name, timeout_s=self._settings.heartbeat_timeout_s)
        self._dispatcher.send_stops(orders)
        if lost:
            # Starts that waited for a task on the lost node to exit may go now.
            self._dispatcher.dispatch_ready_soon()
            self._on_change()
            self._on_capacity(True)
        return lost

    def drain(self, name: str, reason: str) -> Node:
        def change(uow: UnitOfWork) -> Node:
            node = uow.nodes.get(name)
            if node.state is NodeState.UNREACHABLE:
                raise FailedPreconditionError(f"node {name} is unreachable; it cannot be drained")
            if node.state in (NodeState.DRAINING, NodeState.DRAINED):
                return node
            busy = bool(uow.tasks.active_on_node(name))
            state = NodeState.DRAINING if busy else NodeState.DRAINED
            return uow.nodes.set_state(name, state, reason or "drained by an admin")

        node = self._tx.write(change)
        self._nodes_changed(name)
        log.info("node drained", node=name, state=node.state.value, reason=reason)
        self._on_change()
        return node

    def resume(self, name: str) -> Node:
        def change(uow: UnitOfWork) -> Node:
            node = uow.nodes.get(name)
            if node.state is NodeState.UNREACHABLE:
                raise FailedPreconditionError(
                    f"node {name} is unreachable; it becomes ready when its worker registers"
                )
            if node.state is NodeState.READY:
                return node
            return uow.nodes.set_state(name, NodeState.READY, "")

        node = self._tx.write(change)
        self._nodes_changed(name)
        log.info("node resumed", node=name)
        self._on_change()
        self._on_capacity(True)
        return node

    def nodes(self) -> tuple[list[Node], list[Task]]:
        """Every node, with the last heartbeat this master received (the store's time lags
        it by up to a quarter of the timeout), and the active tasks."""
        nodes, tasks = self._tx.read(lambda uow: (uow.nodes.all(), uow.tasks.active()))
        return [dataclasses.replace(n, last_heartbeat=self._last_heard(n)) for n in nodes], tasks


def _newer_started(uow: UnitOfWork, task: Task) -> bool:
    """Whether a later placement of the task's job was already sent to its worker."""
    return any(
        other.lease > task.lease and other.state is not TaskState.ASSIGNED
        for other in uow.tasks.active_for_job(task.job_id)
    )
