"""A round's lease extensions to many nodes are handed out over part of the round, each
node's at its own time, while starts and stops go at once; a master that stops hands
what still waits at once."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from master.nodes.dispatch import PACE_FROM_NODES, Dispatcher, Outgoing
from master.nodes.pacing import Pacer
from master.process.metrics import MasterMetrics
from master.settings import Settings
from protos.hadar.v1 import worker_pb2

EXTEND = worker_pb2.ASSIGNMENT_ACTION_EXTEND
STOP = worker_pb2.ASSIGNMENT_ACTION_STOP


class _Nodes:
    def addresses(self) -> dict[str, tuple[str, Any]]:
        return {}


class _Uow:
    nodes = _Nodes()


class _Tx:
    def read(self, fn: Callable[[Any], Any]) -> Any:
        return fn(_Uow())


class _Clients:
    """Answers every push at once, applied, noting when each node was called."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.called: dict[str, float] = {}
        # The rounds each node was sent, in the order sent.
        self.rounds: dict[str, list[int]] = {}

    def apply(
        self, address: str, request: worker_pb2.ApplyAssignmentsRequest
    ) -> worker_pb2.ApplyAssignmentsResponse:
        with self.lock:
            self.called[address] = time.monotonic()
            self.rounds.setdefault(address, []).append(request.round)
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


def _dispatcher(clients: _Clients, pool: ThreadPoolExecutor) -> Dispatcher:
    return Dispatcher(
        _Tx(),  # type: ignore[arg-type]
        clients,  # type: ignore[arg-type]
        Settings(),
        MasterMetrics(),
        pool,
        pool,
        lambda: None,
    )


def _set(event: threading.Event, unreached: set[str]) -> None:
    event.set()


def _item(node: str, job_id: int, action: int) -> Outgoing:
    return Outgoing(
        node,
        job_id,
        worker_pb2.TaskAssignment(job_id=job_id, lease=1, action=action),  # type: ignore[arg-type]
    )


def test_the_pacer_runs_calls_in_time_order_none_before_its_time() -> None:
    pacer = Pacer("test")
    ran: list[tuple[str, float]] = []
    done = threading.Event()
    start = time.monotonic()

    def late() -> None:
        ran.append(("late", time.monotonic()))
        done.set()

    pacer.at(start + 0.2, late)
    pacer.at(start + 0.1, lambda: ran.append(("early", time.monotonic())))
    assert done.wait(5)
    assert [name for name, _ in ran] == ["early", "late"]
    assert ran[0][1] >= start + 0.1
    assert ran[1][1] >= start + 0.2
    pacer.close()


def test_closing_the_pacer_runs_what_waits_at_once() -> None:
    pacer = Pacer("test")
    ran: list[str] = []
    pacer.at(time.monotonic() + 3600, lambda: ran.append("far"))
    pacer.close()
    assert ran == ["far"]
    pacer.at(time.monotonic() + 3600, lambda: ran.append("after close"))
    assert ran == ["far", "after close"]


def test_extensions_to_many_nodes_go_out_apart_and_stops_at_once() -> None:
    clients = _Clients()
    with ThreadPoolExecutor(8) as pool:
        dispatcher = _dispatcher(clients, pool)
        nodes = [f"node-{i:02d}" for i in range(PACE_FROM_NODES + 1)]
        outgoing = [_item(node, i, EXTEND) for i, node in enumerate(nodes)]
        outgoing.append(_item(nodes[-1], 999, STOP))  # this node gets a stop too
        outgoing.append(_item("stopping", 1000, STOP))
        sent = time.monotonic()
        push = dispatcher.send(7, outgoing, spread_s=0.5)
        done = threading.Event()
        push.then(lambda unreached: done.set())
        assert done.wait(10)
        assert push.failures() == set()
        called = clients.called
        assert set(called) == {*nodes, "stopping"}
        # A node with a stop is not held back, even for its extensions.
        assert called["stopping"] - sent < 0.2
        assert called[nodes[-1]] - sent < 0.2
        paced = sorted(called[node] for node in nodes[:-1])
        assert paced[-1] - sent >= 0.4
        assert paced[-1] - paced[0] >= 0.3
        dispatcher.close()


def test_a_few_nodes_or_no_spread_get_their_extensions_at_once() -> None:
    for count, spread in ((PACE_FROM_NODES - 1, 5.0), (PACE_FROM_NODES * 2, 0.0)):
        clients = _Clients()
        with ThreadPoolExecutor(8) as pool:
            dispatcher = _dispatcher(clients, pool)
            outgoing = [_item(f"node-{i}", i, EXTEND) for i in range(count)]
            sent = time.monotonic()
            push = dispatcher.send(1, outgoing, spread_s=spread)
            over = threading.Event()
            push.then(functools.partial(_set, over))
            assert over.wait(5)
            assert len(clients.called) == count
            assert max(clients.called.values()) - sent < 2.0
            dispatcher.close()


def test_a_paced_extension_overtaken_by_the_next_rounds_is_not_sent_after_it() -> None:
    """An early round hands its extensions before the last round's paced ones are due: each
    node gets rounds in order, never the older lease end after the newer one."""
    clients = _Clients()
    with ThreadPoolExecutor(8) as pool:
        dispatcher = _dispatcher(clients, pool)
        nodes = [f"node-{i:02d}" for i in range(PACE_FROM_NODES)]
        older = dispatcher.send(7, [_item(n, i, EXTEND) for i, n in enumerate(nodes)], spread_s=2.0)
        newer = dispatcher.send(8, [_item(n, i, EXTEND) for i, n in enumerate(nodes)])
        both = threading.Event()
        (older | newer).then(functools.partial(_set, both))
        assert both.wait(10)
        assert (older | newer).failures() == set()
        for node in nodes:
            sent = clients.rounds[node]
            assert sent == sorted(sent) and sent[-1] == 8, (node, sent)
        # Those not yet due when the next round was handed (most) were dropped.
        assert sum(sent.count(7) for sent in clients.rounds.values()) < len(nodes) / 2
        dispatcher.close()
