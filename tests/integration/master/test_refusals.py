"""Workers refusing a job's start, and rounds that go on when one job's handling fails."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import text

from master.daemon import Master
from master.scheduling.plan import Plan
from master.scheduling.policy import Policy
from master.scheduling.views import Snapshot
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for


def spec(name: str, num_gpus: int) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=name,
        num_gpus=num_gpus,
        iterations=100,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )


def get(api: Api, job_id: int) -> common_pb2.Job:
    job: common_pb2.Job = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    return job


def busy_gpus(api: Api) -> list[tuple[str, int, list[int]]]:
    nodes = api.ListNodes(hadar_pb2.ListNodesRequest()).nodes
    return [(n.name, g.index, list(g.job_ids)) for n in nodes for g in n.gpus if g.job_ids]


def test_refusals_of_one_attempt_by_several_workers_fail_the_job_once_naming_the_user(
    cluster: Cluster,
) -> None:
    """Three root workers refuse the same placement because its user has no Unix account:
    the attempt ends once, the job is FAILED (no retry can succeed) with a reason naming
    the user, its GPUs are free, and later rounds succeed and place another job."""
    master = cluster.master(max_retries=3)
    workers = [
        cluster.worker(master, f"n{i}", num_gpus=1, unknown_users=frozenset({"ghost"}))
        for i in range(3)
    ]
    ghost = cluster.api(master, "ghost", admin=False)
    alice = cluster.api(master, "alice", admin=False)
    job = ghost.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("ghostly", 3))).job

    assert master.run_round().started == (job.id,)
    refused = [a for w in workers for a in w.applied if a.job_id == job.id]
    assert len(refused) == 3
    failed = wait_for(
        lambda: (j := get(ghost, job.id)).state == common_pb2.JOB_STATE_FAILED and j,
        what="the refused job FAILED",
    )
    assert "ghost" in failed.reason and "Unix" in failed.reason, failed.reason
    assert failed.retries == 0
    assert busy_gpus(alice) == []

    other = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("next", 3))).job
    assert master.run_round().started == (other.id,)
    wait_for(
        lambda: all(other.id in w.running_jobs() for w in workers), what="the next job started"
    )
    assert get(alice, other.id).state == common_pb2.JOB_STATE_RUNNING
    assert get(ghost, job.id).state == common_pb2.JOB_STATE_FAILED
    master.run_round()


def _refuse_updates(master: Master, table: str, column: str, job_id: int) -> None:
    """Make the database refuse every change to one job's rows of `table`, as a broken row
    would."""
    name = f"refuse_{table}_{job_id}"
    with master.database.engine.begin() as conn:
        if master.database.dialect == "sqlite":
            conn.execute(
                text(
                    f"CREATE TRIGGER {name} BEFORE UPDATE ON {table} "
                    f"WHEN OLD.{column} = {job_id} BEGIN SELECT RAISE(ABORT, 'row refused'); END"
                )
            )
        else:
            conn.execute(
                text(
                    f"CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN "
                    "RAISE EXCEPTION 'row refused'; END $$ LANGUAGE plpgsql"
                )
            )
            conn.execute(
                text(
                    f"CREATE TRIGGER {name} BEFORE UPDATE ON {table} FOR EACH ROW "
                    f"WHEN (OLD.{column} = {job_id}) EXECUTE FUNCTION {name}()"
                )
            )


def _isolated(master: Master, stage: str) -> float:
    value = master.metrics.registry.get_sample_value(
        "hadar_job_failures_isolated_total", {"stage": stage}
    )
    return value or 0.0


def test_a_round_in_which_one_jobs_handling_raises_still_places_the_others(
    cluster: Cluster,
) -> None:
    """One job whose handling raises in a round is set aside: the round still succeeds, the
    other jobs are placed and started, and the isolated failure is counted."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    broken = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("broken", 1))).job
    good = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("good", 1))).job
    _refuse_updates(master, "jobs", "id", broken.id)
    before = _isolated(master, "round")

    result = master.run_round()

    assert result.started == (good.id,)
    assert _isolated(master, "round") == before + 1
    wait_for(lambda: good.id in worker.running_jobs(), what="the good job started")
    assert get(api, good.id).state == common_pb2.JOB_STATE_RUNNING
    assert get(api, broken.id).state == common_pb2.JOB_STATE_PENDING
    assert broken.id not in worker.running_jobs()


def test_answers_about_one_job_that_cannot_be_recorded_leave_the_others_recorded(
    cluster: Cluster,
) -> None:
    """When recording the workers' answers about one job raises, the answers about the other
    jobs of the same round are still recorded, the round succeeds, and the isolated failure
    is counted."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    broken = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("broken", 1))).job
    good = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("good", 1))).job
    _refuse_updates(master, "tasks", "job_id", broken.id)
    before = _isolated(master, "dispatch")

    result = master.run_round()

    assert set(result.started) == {broken.id, good.id}
    assert _isolated(master, "dispatch") == before + 1
    (task,) = get(api, good.id).tasks
    assert task.state == common_pb2.TASK_STATE_STARTING
    worker.progress(good.id, 100)
    assert get(api, good.id).state == common_pb2.JOB_STATE_COMPLETED


class FailsOnPoison:
    """The cluster's policy, except that it raises whenever it is shown a job of type
    "poison", as gavel's LP did on a job with priority 5e-324."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        if any(job.job_type == "poison" for job in snapshot.jobs):
            raise ValueError("c must not contain values inf, nan")
        return self.inner.plan(snapshot, now)


def test_a_job_the_policy_fails_on_waits_saying_so_while_the_others_are_placed(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policy raises on one job: the round places the others, the job waits with a
    reason naming the policy and its error (what `hctl show` and `hctl queue` print), and
    it is counted once however many rounds it stays out; once cancelled the rounds plan as
    before."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    monkeypatch.setattr(master.rounds, "_policy", FailsOnPoison(master.rounds.policy))
    first = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("first", 1))).job
    poison_spec = spec("poison", 1)
    poison_spec.job_type = "poison"
    poison = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=poison_spec)).job
    last = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("last", 1))).job
    before = _isolated(master, "policy")

    assert master.run_round().started == (first.id, last.id)
    waiting = get(api, poison.id)
    assert waiting.state == common_pb2.JOB_STATE_PENDING
    assert waiting.reason == (
        "not scheduled: policy fifo fails on this job: c must not contain values inf, nan"
    )
    wait_for(lambda: {first.id, last.id} <= set(worker.running_jobs()), what="both started")
    master.run_round()
    assert _isolated(master, "policy") == before + 1

    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=poison.id))
    again = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("again", 1))).job
    assert master.run_round().started == (again.id,)


@pytest.mark.parametrize("rate", [math.inf, math.nan, 1e300, 1e-300, -5.0])
def test_a_rate_no_training_step_has_is_ignored_and_rounds_go_on(
    cluster: Cluster, rate: float
) -> None:
    """A job's own process reports its rate, so any number can arrive from a worker: one
    that is not finite or beyond any training step's (a million a second, one per 11 days)
    is not stored, and the next rounds read the model and place jobs as before."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    first = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("first", 1))).job
    assert master.run_round().started == (first.id,)
    wait_for(lambda: first.id in worker.running_jobs(), what="the first job started")
    assert worker.progress(first.id, 10, rate=rate).acks
    assert get(api, first.id).iterations_done == 10

    second = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("second", 1))).job
    assert master.run_round().started == (second.id,)
    stored = master.tx.read(lambda uow: uow.throughput.all())
    assert [m.iterations_per_s for m in stored if m.job_type == first.spec.job_type] == []
