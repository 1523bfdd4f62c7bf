"""Nodes (worker agents) and their GPUs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import bindparam, case, select, text, update
from sqlalchemy.orm import Session

from store.domain import Gpu, Node
from store.errors import NotFoundError
from store.models import GpuRow, NodeRow, utcnow
from store.repositories import convert
from store.states import GpuHealth, NodeState

# States in which a node counts as alive (its heartbeat is watched).
WATCHED_NODE_STATES = (NodeState.READY, NodeState.DRAINING, NodeState.DRAINED)


class NodeRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def _row(self, name: str) -> NodeRow:
        row = self._session.get(NodeRow, name)
        if row is None:
            raise NotFoundError("node", name)
        return row

    def get(self, name: str) -> Node:
        return convert.node(self._row(name))

    def find(self, name: str) -> Node | None:
        row = self._session.get(NodeRow, name)
        return convert.node(row) if row is not None else None

    def all(self) -> list[Node]:
        """Every node with its GPUs, by name. Read as plain columns, not as ORM objects:
        every round reads every node, and at 200 nodes of 4 GPUs building the objects
        cost four times the read."""
        gpus: defaultdict[str, list[Gpu]] = defaultdict(list)
        for (
            node_name,
            index,
            gpu_type,
            memory,
            device,
            uuid,
            health,
            use,
            fake,
        ) in self._session.execute(
            select(
                GpuRow.node_name,
                GpuRow.index,
                GpuRow.type,
                GpuRow.memory_bytes,
                GpuRow.device_name,
                GpuRow.uuid,
                GpuRow.health,
                GpuRow.utilization,
                GpuRow.fake,
            ).order_by(GpuRow.node_name, GpuRow.index)
        ):
            gpus[node_name].append(
                Gpu(
                    index=index,
                    type=gpu_type,
                    memory_bytes=memory,
                    device_name=device,
                    uuid=uuid,
                    health=GpuHealth(health),
                    utilization=use,
                    fake=fake,
                )
            )
        query = select(
            NodeRow.name,
            NodeRow.address,
            NodeRow.state,
            NodeRow.reason,
            NodeRow.agent_version,
            NodeRow.workloads,
            NodeRow.registered_at,
            NodeRow.last_heartbeat,
        ).order_by(NodeRow.name)
        return [
            Node(
                name=name,
                address=address,
                state=NodeState(state),
                reason=reason,
                agent_version=agent_version,
                workloads=tuple(workloads or ()),
                gpus=tuple(gpus.get(name, ())),
                registered_at=registered_at,
                last_heartbeat=last_heartbeat,
            )
            for name, address, state, reason, agent_version, workloads, registered_at, (
                last_heartbeat
            ) in self._session.execute(query)
        ]

    def capacity(self) -> tuple[list[tuple[str, int]], set[str]]:
        """The GPUs (type, memory) and workloads of every node not lost, as plain columns:
        read for each submission's validation, so no node or GPU objects are built."""
        alive = NodeRow.state != NodeState.UNREACHABLE.value
        gpus = self._session.execute(
            select(GpuRow.type, GpuRow.memory_bytes)
            .join(NodeRow, GpuRow.node_name == NodeRow.name)
            .where(alive)
        )
        workloads: set[str] = set()
        for (names,) in self._session.execute(select(NodeRow.workloads).where(alive)):
            workloads.update(names or ())
        return [(gpu_type, memory) for gpu_type, memory in gpus], workloads

    def gpu_slots(self) -> list[tuple[str, int, str, NodeState, GpuHealth]]:
        """(node, index, type, node state, health) of every GPU, read as plain columns: for
        the checks and gauges that look at every GPU often and need nothing else."""
        query = select(
            GpuRow.node_name, GpuRow.index, GpuRow.type, NodeRow.state, GpuRow.health
        ).join(NodeRow, GpuRow.node_name == NodeRow.name)
        return [
            (node, index, gpu_type, NodeState(state), GpuHealth(health))
            for node, index, gpu_type, state, health in self._session.execute(query)
        ]

    def addresses(self) -> dict[str, tuple[str, NodeState]]:
        """name -> (address, state) of every node, without loading GPUs."""
        rows = self._session.execute(select(NodeRow.name, NodeRow.address, NodeRow.state))
        return {name: (address, NodeState(state)) for name, address, state in rows}

    def liveness(self, name: str) -> tuple[NodeState, dict[int, GpuHealth]] | None:
        """A node's state and its GPUs' health, or None if unknown (cheap, for heartbeats)."""
        state = self._session.execute(
            select(NodeRow.state).where(NodeRow.name == name)
        ).scalar_one_or_none()
        if state is None:
            return None
        health = self._session.execute(
            select(GpuRow.index, GpuRow.health).where(GpuRow.node_name == name)
        )
        return NodeState(state), {index: GpuHealth(h) for index, h in health}

    def upsert(
        self,
        name: str,
        *,
        address: str,
        gpus: Sequence[Gpu],
        agent_version: str = "",
        workloads: Sequence[str] = (),
        now: datetime | None = None,
    ) -> tuple[Node, NodeState | None]:
        """Register or re-register a node; returns it and its state before (None if new).

        A drained or draining node stays so across re-registration (an admin decided); an
        unreachable one becomes READY again.
        """
        at = now or utcnow()
        row = self._session.get(NodeRow, name)
        previous: NodeState | None = None
        if row is None:
            row = NodeRow(
                name=name,
                address=address,
                state=NodeState.READY.value,
                reason="",
                registered_at=at,
                last_heartbeat=at,
            )
            self._session.add(row)
        else:
            previous = NodeState(row.state)
            if previous is NodeState.UNREACHABLE:
                row.state = NodeState.READY.value
                row.reason = ""
            row.address = address
            row.registered_at = at
            row.last_heartbeat = at
        row.agent_version = agent_version
        row.workloads = sorted(set(workloads))
        self._replace_gpus(row, gpus)
        self._session.flush()
        return convert.node(row), previous

    def _replace_gpus(self, row: NodeRow, gpus: Sequence[Gpu]) -> None:
        by_index = {g.index: g for g in row.gpus}
        wanted = {g.index for g in gpus}
        for index, existing in list(by_index.items()):
            if index not in wanted:
                row.gpus.remove(existing)
        for gpu in gpus:
            target = by_index.get(gpu.index)
            if target is None:
                target = GpuRow(index=gpu.index)
                row.gpus.append(target)
            target.type = gpu.type
            target.memory_bytes = gpu.memory_bytes
            target.device_name = gpu.device_name
            target.uuid = gpu.uuid
            target.health = gpu.health.value
            target.utilization = gpu.utilization
            target.fake = gpu.fake

    def heartbeat(
        self, name: str, *, now: datetime | None = None, gpus: Sequence[Gpu] = ()
    ) -> Node | None:
        """Note that a node is alive; None when the node is unknown or was declared lost
        (it must register again so that its tasks are reconciled)."""
        row = self._session.get(NodeRow, name)
        if row is None or row.state == NodeState.UNREACHABLE.value:
            return None
        row.last_heartbeat = now or utcnow()
        if gpus:
            by_index = {g.index: g for g in row.gpus}
            for gpu in gpus:
                target = by_index.get(gpu.index)
                if target is not None:
                    target.health = gpu.health.value
                    target.utilization = gpu.utilization
        self._session.flush()
        return convert.node(row)

    def heard(self, beats: Mapping[str, tuple[datetime, Sequence[Gpu]]]) -> int:
        """Note many nodes' last heartbeats at once: node -> (when, its GPUs as reported
        then). Writes the heartbeat time (never backwards) and the GPUs' utilization, not
        their health: a change of health is written when it is reported, and a batch
        gathered before it must not undo it. Unknown and unreachable nodes are left out.
        Returns how many nodes were written."""
        if not beats:
            return 0
        # Plain columns, not rows: a batch covers every node of the cluster, and loading
        # each node with its GPUs cost more than the writes.
        times: dict[str, datetime] = {}
        nodes = select(NodeRow.name, NodeRow.state, NodeRow.last_heartbeat).where(
            NodeRow.name.in_(list(beats))
        )
        for name, state, last in self._session.execute(nodes):
            if state == NodeState.UNREACHABLE.value:
                continue
            times[name] = max(last, beats[name][0])
        # Only the utilizations that changed since the last batch are written.
        reported = {name: {g.index: g.utilization for g in beats[name][1]} for name in times}
        changed: list[tuple[str, int, float]] = []
        gpus = select(GpuRow.node_name, GpuRow.index, GpuRow.utilization).where(
            GpuRow.node_name.in_(list(times))
        )
        for name, index, current in self._session.execute(gpus):
            value = reported[name].get(index)
            if value is not None and value != current:
                changed.append((name, index, value))
        # Whole statements, not the rows changed one by one: the ORM would send those as
        # one batch (a pipeline, with psycopg), and a master frozen while such a batch
        # waits for a lock leaves its transaction where PostgreSQL's idle-in-transaction
        # timeout cannot end it, keeping a standby out for as long as it stays frozen.
        if times:
            self._session.execute(
                update(NodeRow)
                .where(NodeRow.name.in_(list(times)))
                .values(last_heartbeat=case(times, value=NodeRow.name))
                .execution_options(synchronize_session=False)
            )
        if changed:
            self._write_utilization(changed)
        # Node and GPU rows this unit of work may hold are stale after these statements.
        self._session.expire_all()
        return len(times)

    def _write_utilization(self, changed: Sequence[tuple[str, int, float]]) -> None:
        """(node, GPU index, utilization) for many GPUs, in one statement."""
        if self._session.get_bind().dialect.name == "postgresql":
            self._session.execute(
                text(
                    "UPDATE gpus SET utilization = v.u FROM unnest("
                    "CAST(:names AS text[]), CAST(:indices AS integer[]), "
                    "CAST(:values AS double precision[])) AS v(n, i, u) "
                    'WHERE gpus.node_name = v.n AND gpus."index" = v.i'
                ),
                {
                    "names": [c[0] for c in changed],
                    "indices": [c[1] for c in changed],
                    "values": [c[2] for c in changed],
                },
            )
            return
        # SQLite: one statement run for each GPU by the driver (no network in between).
        self._session.connection().execute(
            update(GpuRow.__table__)  # type: ignore[arg-type]
            .where(
                GpuRow.__table__.c.node_name == bindparam("b_node"),
                GpuRow.__table__.c.index == bindparam("b_index"),
            )
            .values(utilization=bindparam("b_value")),
            [{"b_node": n, "b_index": i, "b_value": u} for n, i, u in changed],
        )

    def set_state(self, name: str, state: NodeState, reason: str = "") -> Node:
        row = self._row(name)
        row.state = state.value
        row.reason = reason
        self._session.flush()
        return convert.node(row)

    def silent_since(self, before: datetime) -> list[Node]:
        """Watched nodes whose last heartbeat is older than `before`."""
        query = (
            select(NodeRow)
            .where(NodeRow.state.in_([s.value for s in WATCHED_NODE_STATES]))
            .where(NodeRow.last_heartbeat < before)
            .order_by(NodeRow.name)
        )
        return [convert.node(row) for row in self._session.scalars(query)]
