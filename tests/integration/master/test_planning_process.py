"""Rounds of a long queue read the store and decide in the planning process
(master/rounds/planner.py): through a real master, its database (SQLite and PostgreSQL)
and a fake worker, such a round decides and stores what the round's thread would have (in a
process of lower priority than the master's), the
policy comes back with what it learned, and a round the child cannot plan is planned on the
round's thread."""

from __future__ import annotations

import copy
import multiprocessing
import os
import signal
from datetime import UTC, datetime
from typing import Any

from structlog.testing import capture_logs

from master.daemon import base_throughput_model
from master.rounds.forecaster import Forecaster
from master.rounds.planner import PLANNING_NICENESS, plan, trimmed
from master.rounds.snapshot import ReadMemo
from protos.hadar.v1 import common_pb2, hadar_pb2, worker_pb2
from store import Database
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for
from tests.integration.master.test_policy_memory import (
    PARAMS,
    predictor,
    run_to_completion_early,
    stored_history,
)


def submit(api: Api, num_gpus: int = 1) -> int:
    spec = common_pb2.JobSpec(
        name="train",
        num_gpus=num_gpus,
        iterations=1000,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )
    job_id: int = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job.id
    return job_id


def reasons(api: Api, job_ids: list[int]) -> dict[int, str]:
    """Why each job waits, as GetJob shows it."""
    return {
        job_id: api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job.reason for job_id in job_ids
    }


def test_a_long_queue_is_planned_in_the_child_as_on_the_rounds_thread(cluster: Cluster) -> None:
    """Once a round offered the policy 2 jobs or more, the next round plans in the child:
    it starts the jobs and shows the waiting reasons that planning on the round's thread
    (a copy of the policy, a fresh read) decides, and the jobs run on the worker."""
    master = cluster.master(policy="fifo", planning_process_from_jobs=2)
    worker = cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    first = [submit(api), submit(api)]
    result = master.run_round()
    assert not result.planned_elsewhere
    assert sorted(result.started) == first
    # Two more fit on the worker's GPUs, the rest wait.
    later = [submit(api, num_gpus=2), submit(api), submit(api, num_gpus=4), submit(api)]
    expected = plan(
        master.tx,
        ReadMemo(),
        copy.deepcopy(master.rounds.policy),
        master.settings,
        base_throughput_model(master.settings),
        datetime.now(UTC),
    )
    # What comes back from the child: the jobs the actions name, and the waiting reasons
    # without their jobs.
    light = trimmed(expected)
    assert set(light.inp.jobs) == {a.job_id for a in expected.decision.actions}
    assert not light.decision.waiting
    assert light.reasons and set(light.reasons.reasons) <= set(later)
    result = master.run_round()
    assert result.planned_elsewhere
    assert sorted(result.started) == sorted(expected.decision.started())
    assert result.started and result.waiting == expected.waiting > 0
    waiting = [job_id for job_id in later if job_id not in result.started]
    assert reasons(api, waiting) == {
        job_id: expected.decision.waiting[job_id] for job_id in waiting
    }
    # The child yields a busy core to the master's calls.
    (child,) = multiprocessing.active_children()
    assert child.pid is not None
    assert os.getpriority(os.PRIO_PROCESS, child.pid) == min(
        os.getpriority(os.PRIO_PROCESS, 0) + PLANNING_NICENESS, 19
    )
    wait_for(lambda: set(first) | set(result.started) <= set(worker.running_jobs()), what="STARTs")
    # An unchanged store: the next round, planned in the child again, changes nothing.
    again = master.run_round()
    assert again.planned_elsewhere and again.started == () and again.stopped == ()


def test_a_drain_planned_in_the_child_stops_the_nodes_job_and_ends_drained(
    cluster: Cluster,
) -> None:
    """The child's answer carries, of the nodes, only those a drain concerns, and that is
    enough: a round planned in the child stops the draining node's job with the drain as
    its reason, and once the job is off it, a later round marks the node drained."""
    master = cluster.master(policy="fifo", planning_process_from_jobs=1)
    worker = cluster.worker(master, "n1", num_gpus=1)
    admin = cluster.api(master, "root", admin=True)
    job_id = submit(admin)
    assert master.run_round().started == (job_id,)
    wait_for(lambda: job_id in worker.running_jobs(), what="the START")
    drained = admin.DrainNode(hadar_pb2.DrainNodeRequest(node="n1", reason="fan")).node
    assert drained.state == common_pb2.NODE_STATE_DRAINING
    stopping = master.run_round()
    assert stopping.planned_elsewhere and stopping.stopped == (job_id,)
    wait_for(lambda: job_id not in worker.running_jobs(), what="the STOP")
    (stop,) = [
        a
        for a in worker.applied
        if a.job_id == job_id and a.action == worker_pb2.ASSIGNMENT_ACTION_STOP
    ]
    assert stop.reason.endswith("(node n1 is draining)"), stop.reason

    def node_state() -> int:
        (node,) = admin.ListNodes(hadar_pb2.ListNodesRequest()).nodes
        return int(node.state)

    def drained_after_a_round() -> bool:
        assert master.run_round().planned_elsewhere
        return node_state() == common_pb2.NODE_STATE_DRAINED

    wait_for(drained_after_a_round, what="the node drained")


def test_a_forecast_due_is_made_ready_in_the_child_and_the_policy_stays_there(
    cluster: Cluster,
) -> None:
    """A round planned in the child with a forecast due, its queue past the forecasting
    process's size, makes the forecast's work there: the master gets no whole queue and
    does not take the policy back, and the waiting job gets its expected start."""
    master = cluster.master(policy="fifo", planning_process_from_jobs=1)
    cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    running = submit(api)
    assert master.run_round().started == (running,)
    # Due at the next round (the master's own forecast ran after the first). The master's
    # forecaster is stopped first: its forecast of the first round, logged late on a
    # loaded machine, would otherwise land among the logs captured below.
    assert master.rounds.forecaster is not None
    master.rounds.forecaster.stop()
    master.rounds.forecaster = Forecaster(master.settings, process_from_jobs=1)
    waiting = submit(api)
    with capture_logs() as logs:
        result = master.run_round()
        assert result.planned_elsewhere and result.started == ()
        assert master.rounds.planner.policy_away

        def estimated() -> bool:
            job = api.GetJob(hadar_pb2.GetJobRequest(job_id=waiting)).job
            return bool(job.HasField("expected_start"))

        wait_for(estimated, what="the expected start")
    (forecast,) = [e for e in logs if e["event"] == "start times forecast"]
    assert forecast["jobs"] == 2 and forecast["estimates"] == 1
    assert master.rounds.planner.policy_away
    assert master.run_round().planned_elsewhere


def test_the_policy_stays_in_the_child_and_a_dead_child_loses_nothing_stored(
    cluster: Cluster,
) -> None:
    """a-srpt planned in the child learns from each completion as on the round's thread
    and stays there between rounds; looked at, it comes back with what it learned. A
    child killed while it holds the policy takes nothing stored with it: the next round
    is planned on the thread with the policy rebuilt from the store, as a restart would."""
    master = cluster.master(policy="a-srpt", policy_params=PARAMS, planning_process_from_jobs=1)
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master, "alice", admin=False)
    # Runs throughout: every round offers the policy a job, so rounds stay in the child.
    runs = submit(api)
    assert master.run_round().started == (runs,)
    run_to_completion_early(master, worker, api, 500)
    run_to_completion_early(master, worker, api, 400)
    result = master.run_round()
    assert result.planned_elsewhere and master.rounds.planner.policy_away
    assert [c[5] for c in stored_history(master)] == [500.0, 400.0]
    assert len(predictor(master).history) == 2
    # Looked at, the policy came back; the next round takes it along again.
    assert not master.rounds.planner.policy_away
    assert master.run_round().planned_elsewhere and master.rounds.planner.policy_away

    run_to_completion_early(master, worker, api, 300)
    assert master.rounds.planner.policy_away
    (child,) = multiprocessing.active_children()
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    result = master.run_round()
    assert not result.planned_elsewhere
    assert [c[5] for c in stored_history(master)] == [500.0, 400.0, 300.0]
    assert len(predictor(master).history) == 3
    # The process is started again for the next round.
    assert master.run_round().planned_elsewhere


class Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("this policy does not cross to another process")


def test_a_round_the_child_cannot_plan_is_planned_on_the_rounds_thread(cluster: Cluster) -> None:
    """A policy that cannot be sent to the child (or a child that fails) costs nothing but
    the attempt: the round is planned on its own thread and starts the jobs."""
    master = cluster.master(policy="fifo", planning_process_from_jobs=1)
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    first = submit(api)
    assert master.run_round().started == (first,)
    vars(master.rounds.policy)["blocker"] = Unpicklable()
    second = submit(api)
    result = master.run_round()
    assert not result.planned_elsewhere
    assert result.started == (second,)


def test_only_a_database_outside_the_process_is_planned_elsewhere(tmp_path: Any) -> None:
    """An in-memory SQLite database exists in the master's process only: its rounds never
    leave it."""
    assert Database("sqlite://").in_memory
    assert Database("sqlite:///:memory:").in_memory
    assert not Database(str(tmp_path / "hadar.db")).in_memory
