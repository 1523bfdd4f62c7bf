"""Heartbeats through a real master and fake workers.

- A heartbeat that changes nothing reads and writes no database, whatever tasks it lists.
- A task the master stopped, ended or placed again under a new lease is on the next
  heartbeat's stop list; a task the master still wants never is, even while it is being
  created.
- Heartbeat times reach the store in one transaction for all nodes, every quarter of the
  timeout and when the master stops; a GPU's change of health is written at once.
- A node silent for the timeout is still lost, a timeout after its last heartbeat.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from sqlalchemy import event

from master.daemon import Master
from protos.hadar.v1 import common_pb2, coordinator_pb2, hadar_pb2
from store import Database
from store.leadership import MasterLeases
from store.states import TaskState
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for

Key = tuple[int, int, int]  # (job id, task index, lease)


def submit(api: Api, name: str, iterations: int = 100_000, num_gpus: int = 1) -> int:
    spec = common_pb2.JobSpec(
        name=name,
        num_gpus=num_gpus,
        iterations=iterations,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )
    job_id: int = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job.id
    return job_id


def keys(worker: FakeWorker, job_id: int) -> set[Key]:
    """The tasks of a job the worker runs now."""
    return {(t.job_id, t.task_index, t.lease) for t in worker.worker_tasks() if t.job_id == job_id}


def beat(
    worker: FakeWorker, tasks: Iterable[Key], gpus: list[common_pb2.Gpu] | None = None
) -> coordinator_pb2.HeartbeatResponse:
    """A heartbeat listing exactly `tasks` (as a worker whose exit report and heartbeat
    crossed lists a task it already reported ended)."""
    response: coordinator_pb2.HeartbeatResponse = worker.coordinator.Heartbeat(
        coordinator_pb2.HeartbeatRequest(
            node=worker.name,
            tasks=[
                common_pb2.WorkerTask(job_id=j, task_index=i, lease=lease)
                for j, i, lease in sorted(tasks)
            ],
            gpus=worker.gpus() if gpus is None else gpus,
        ),
        metadata=worker.metadata,
        timeout=10,
    )
    return response


def stopped(response: coordinator_pb2.HeartbeatResponse) -> set[Key]:
    return {(r.job_id, r.task_index, r.lease) for r in response.stop}


@dataclass
class Sql:
    statements: int = 0
    checkouts: int = 0
    commits: int = 0


@contextmanager
def sql_on(master: Master, threads: str) -> Iterator[Sql]:
    """Counts the SQL statements, connection checkouts and commits of the master's
    database made on threads whose name starts with `threads`."""
    seen = Sql()
    lock = threading.Lock()
    engine = master.database.engine

    def counter(field: str) -> Any:
        def count(*_: Any) -> None:
            if threading.current_thread().name.startswith(threads):
                with lock:
                    setattr(seen, field, getattr(seen, field) + 1)

        return count

    hooks = [
        ("before_cursor_execute", counter("statements")),
        ("checkout", counter("checkouts")),
        ("commit", counter("commits")),
    ]
    for name, hook in hooks:
        event.listen(engine, name, hook)
    try:
        yield seen
    finally:
        for name, hook in hooks:
            event.remove(engine, name, hook)


def task_states(master: Master) -> set[TaskState]:
    return {t.state for t in master.tx.read(lambda uow: uow.tasks.active())}


def stored_heartbeats(master: Master) -> dict[str, datetime]:
    return {n.name: n.last_heartbeat for n in master.tx.read(lambda uow: uow.nodes.all())}


def node_states(api: Api) -> dict[str, int]:
    return {n.name: n.state for n in api.ListNodes(hadar_pb2.ListNodesRequest()).nodes}


def test_steady_heartbeats_with_tasks_run_no_sql(cluster: Cluster) -> None:
    """Once the node and the active tasks are known, heartbeats listing four running tasks
    check out no connection and run no statement; the tasks stay wanted."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    jobs = {submit(api, f"j{i}") for i in range(4)}
    master.run_round()
    wait_for(lambda: worker.running_jobs() == jobs, what="four STARTs on n1")
    wait_for(lambda: task_states(master) == {TaskState.STARTING}, what="STARTs acknowledged")
    assert not worker.heartbeat().stop  # reads the node and the active tasks once

    with sql_on(master, "hadar-rpc") as sql:
        for _ in range(20):
            response = worker.heartbeat()
            assert not response.stop and not response.reregister
    assert (sql.statements, sql.checkouts) == (0, 0)
    assert worker.running_jobs() == jobs
    assert len(worker.worker_tasks()) == 4


def test_a_gpus_change_of_health_is_written_at_once(cluster: Cluster) -> None:
    """The heartbeat that reports a GPU unhealthy writes it before it is answered; the next
    ones, reporting the same, write nothing."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    assert not beat(worker, []).reregister
    gpus = worker.gpus()
    gpus[1].health = common_pb2.GPU_HEALTH_UNHEALTHY
    with sql_on(master, "hadar-rpc") as sql:
        assert not beat(worker, [], gpus).reregister
    assert sql.commits == 1
    (node,) = api.ListNodes(hadar_pb2.ListNodesRequest()).nodes
    assert [g.health for g in node.gpus] == [
        common_pb2.GPU_HEALTH_HEALTHY,
        common_pb2.GPU_HEALTH_UNHEALTHY,
    ]
    with sql_on(master, "hadar-rpc") as sql:
        for _ in range(5):
            assert not beat(worker, [], gpus).reregister
    assert sql.statements == 0


def test_tasks_a_round_stopped_ended_or_placed_again_are_on_the_next_stop_list(
    cluster: Cluster,
) -> None:
    """srtf preempts a long job for a short one: the long job's task, asked to stop, is
    still wanted until its exit is reported, and on the stop list from the next heartbeat
    after. The short job's new task is wanted at once; once it completed and exited it is
    stopped. The long job, placed again under a new lease, is wanted under that lease and
    stopped under the old one."""
    master = cluster.master(policy="srtf")
    worker = cluster.worker(master, "n1", num_gpus=1, auto_exit_on_stop=False)
    api = cluster.api(master)
    long_job = submit(api, "long")
    master.run_round()
    wait_for(lambda: long_job in worker.running_jobs(), what="START of the long job")
    (old,) = keys(worker, long_job)
    assert stopped(beat(worker, [old])) == set()

    short_job = submit(api, "short", iterations=10)
    assert master.run_round().stopped == (long_job,)
    assert stopped(beat(worker, [old])) == set(), "stopped before its exit was reported"
    assert worker.exit(long_job, common_pb2.EXIT_KIND_STOPPED).accepted
    assert stopped(beat(worker, [old])) == {old}

    wait_for(lambda: short_job in worker.running_jobs(), what="START of the short job")
    (short,) = keys(worker, short_job)
    assert stopped(beat(worker, [old, short])) == {old}
    worker.progress(short_job, 10)
    assert stopped(beat(worker, [short])) == set(), "completed, but still to exit"
    assert worker.exit(short_job, common_pb2.EXIT_KIND_COMPLETED).accepted
    assert stopped(beat(worker, [short])) == {short}

    assert master.run_round().started == (long_job,)
    wait_for(lambda: long_job in worker.running_jobs(), what="the long job's second START")
    (again,) = keys(worker, long_job)
    assert again[2] > old[2]
    assert stopped(beat(worker, [old, again, short])) == {old, short}


def test_a_cancelled_jobs_tasks_are_stopped_once_they_exited(cluster: Cluster) -> None:
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=2, auto_exit_on_stop=False)
    api = cluster.api(master)
    job_id = submit(api, "cancelled", num_gpus=2)
    master.run_round()
    wait_for(lambda: job_id in worker.running_jobs(), what="START")
    tasks = keys(worker, job_id)
    assert len(tasks) == 1 and stopped(beat(worker, tasks)) == set()  # one per node
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=job_id))
    wait_for(lambda: any(s.job_id == job_id for s in worker.stops), what="StopTask")
    assert stopped(beat(worker, tasks)) == set(), "stopped before its exit was reported"
    assert worker.exit(job_id, common_pb2.EXIT_KIND_STOPPED).accepted
    assert stopped(beat(worker, tasks)) == tasks


def test_a_master_whose_term_ended_unnoticed_orders_no_stop(cluster: Cluster) -> None:
    """Another master took the lease, and this one has not renewed since: a heartbeat it
    would answer with a stop is refused instead, as every write of this master is."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=1, auto_exit_on_stop=False)
    api = cluster.api(master)
    job_id = submit(api, "ended")
    master.run_round()
    wait_for(lambda: job_id in worker.running_jobs(), what="START")
    tasks = keys(worker, job_id)
    assert worker.exit(job_id, common_pb2.EXIT_KIND_FAILED, 1).accepted
    other = Database(cluster.database)
    try:
        assert MasterLeases(other).acquire("usurper", "elsewhere:1", 3600, force=True)
    finally:
        other.dispose()
    with pytest.raises(grpc.RpcError) as refused:
        beat(worker, tasks)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_heartbeats_racing_new_placements_never_stop_them(cluster: Cluster) -> None:
    """A worker heartbeats without pause while rounds place four jobs on it one by one
    (each START lands between heartbeats): it is never told to stop one."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    worker.start_heartbeats(interval=0.0)
    jobs: set[int] = set()
    for i in range(4):
        jobs.add(submit(api, f"j{i}"))
        master.run_round()
        wait_for(lambda: jobs <= worker.running_jobs(), what=f"START of job {i + 1}")
        worker.progress(max(jobs), 1)  # a task change after the START, too
    worker.stop_heartbeats()
    assert not worker.heartbeat().stop
    assert worker.running_jobs() == jobs


def test_heartbeat_times_reach_the_store_within_a_quarter_of_the_timeout(
    cluster: Cluster,
) -> None:
    timeout = 4.0
    master = cluster.master(heartbeat_timeout_s=timeout)
    workers = [cluster.worker(master, f"n{i}", num_gpus=1) for i in range(3)]
    registered = stored_heartbeats(master)
    wait_for(
        lambda: datetime.now(UTC) - max(registered.values()) > timedelta(seconds=0.5),
        what="the registrations to age",
    )
    sent = datetime.now(UTC)
    for worker in workers:
        assert not worker.heartbeat().reregister
    wait_for(
        lambda: all(at >= sent for at in stored_heartbeats(master).values()),
        timeout=2 * timeout / 4,
        what="the heartbeat times written",
    )


def test_heartbeat_times_are_written_in_one_transaction_for_all_nodes(
    cluster: Cluster,
) -> None:
    """(The default timeout's period, 30 s, does not come during the test: the write is
    called here.)"""
    master = cluster.master()
    workers = [cluster.worker(master, f"n{i}", num_gpus=2) for i in range(3)]
    sent = datetime.now(UTC)
    for worker in workers:
        worker.heartbeat()
    assert all(at < sent for at in stored_heartbeats(master).values())
    with sql_on(master, threading.current_thread().name) as sql:
        assert master.registry.write_heartbeats() == 3
    assert sql.commits == 1
    assert all(at >= sent for at in stored_heartbeats(master).values())
    assert master.registry.write_heartbeats() == 0  # nothing heard since


def test_gpu_utilization_reaches_the_store_with_the_batch_and_only_what_changed(
    cluster: Cluster,
) -> None:
    """Each GPU's reported utilization is written with the batch of heartbeat times, for
    every node in one transaction; a later batch writes the GPUs whose value changed and
    leaves the others as they were."""
    master = cluster.master()
    api = cluster.api(master)
    workers = [cluster.worker(master, f"n{i}", num_gpus=2) for i in range(2)]

    def with_load(worker: FakeWorker, values: list[float]) -> list[common_pb2.Gpu]:
        gpus = worker.gpus()
        for gpu, value in zip(gpus, values, strict=True):
            gpu.utilization = value
        return gpus

    def stored() -> dict[tuple[str, int], float]:
        nodes = api.ListNodes(hadar_pb2.ListNodesRequest()).nodes
        return {(n.name, g.index): round(g.utilization, 3) for n in nodes for g in n.gpus}

    beat(workers[0], [], with_load(workers[0], [0.25, 0.5]))
    beat(workers[1], [], with_load(workers[1], [0.75, 1.0]))
    with sql_on(master, threading.current_thread().name) as sql:
        assert master.registry.write_heartbeats() == 2
    assert sql.commits == 1
    assert stored() == {("n0", 0): 0.25, ("n0", 1): 0.5, ("n1", 0): 0.75, ("n1", 1): 1.0}

    beat(workers[0], [], with_load(workers[0], [0.25, 0.1]))
    beat(workers[1], [], with_load(workers[1], [0.75, 1.0]))
    assert master.registry.write_heartbeats() == 2
    assert stored() == {("n0", 0): 0.25, ("n0", 1): 0.1, ("n1", 0): 0.75, ("n1", 1): 1.0}


def test_a_silent_node_is_lost_a_timeout_after_its_last_heartbeat(cluster: Cluster) -> None:
    """By the master's own periodic check, never earlier; the other node stays."""
    timeout = 2.0
    master = cluster.master(heartbeat_timeout_s=timeout)
    first = cluster.worker(master, "n1", num_gpus=1)
    second = cluster.worker(master, "n2", num_gpus=1)
    api = cluster.api(master)
    registered = stored_heartbeats(master)
    first.start_heartbeats()
    second.start_heartbeats()
    wait_for(
        lambda: all(at > registered[n] for n, at in stored_heartbeats(master).items()),
        timeout=2 * timeout,
        what="a batch of heartbeat times written",
    )
    first.stop_heartbeats()
    last = datetime.now(UTC)
    first.auto_reregister = False
    assert not first.heartbeat().reregister
    wait_for(
        lambda: node_states(api)["n1"] == common_pb2.NODE_STATE_UNREACHABLE,
        timeout=5 * timeout,
        what="n1 lost by the master's own check",
    )
    assert datetime.now(UTC) - last >= timedelta(seconds=timeout)
    assert node_states(api)["n2"] == common_pb2.NODE_STATE_READY
    assert first.heartbeat().reregister


def test_a_stopping_master_writes_the_last_heartbeats_for_the_next_one(
    cluster: Cluster,
) -> None:
    """The next master starts from the stored times: within its grace it counts no node
    lost, and afterwards a node is lost a timeout after the last heartbeat the previous
    master received."""
    timeout = 8.0
    master = cluster.master(heartbeat_timeout_s=timeout)
    worker = cluster.worker(master, "n1", num_gpus=1)
    registered = stored_heartbeats(master)["n1"]
    wait_for(
        lambda: datetime.now(UTC) - registered > timedelta(seconds=0.5),
        what="the registration to age",
    )
    sent = datetime.now(UTC)
    worker.heartbeat()
    master.stop(grace=0.5)

    following = cluster.master(heartbeat_timeout_s=timeout)
    stored = stored_heartbeats(following)["n1"]
    assert stored >= sent
    assert following.check_nodes() == []  # its grace
    limit = timedelta(seconds=timeout)
    assert following.registry.check_lost(now=stored + limit - timedelta(seconds=0.5)) == []
    assert following.registry.check_lost(now=stored + limit + timedelta(seconds=0.2)) == ["n1"]
