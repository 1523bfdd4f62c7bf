"""The rounds read the store through a memo of what the last round read (master.rounds.snapshot
ReadMemo): through a real master, its database (SQLite and PostgreSQL) and fake workers,
after every kind of change between rounds the memo's read equals a fresh full read, and
an unchanged store loads no job row again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from master.daemon import Master, base_throughput_model
from master.rounds.planner import read_input
from master.rounds.snapshot import ReadMemo, RoundInput
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for


def spec(name: str, num_gpus: int = 1, **fields: Any) -> common_pb2.JobSpec:
    job = common_pb2.JobSpec(
        name=name,
        num_gpus=num_gpus,
        iterations=1000,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )
    for key, value in fields.items():
        if isinstance(value, list):
            getattr(job, key).extend(value)
        else:
            setattr(job, key, value)
    return job


def submit(api: Api, job: common_pb2.JobSpec) -> int:
    job_id: int = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=job)).job.id
    return job_id


def read(master: Master, memo: ReadMemo | None, now: datetime) -> RoundInput:
    settings = master.settings
    return master.tx.read(
        lambda uow: read_input(uow, settings, base_throughput_model(settings), now, memo)
    )


def parts(inp: RoundInput) -> tuple[Any, ...]:
    """Everything a round decides and stores from (the throughput model aside, which the
    memo does not touch)."""
    snapshot = inp.snapshot
    return (
        snapshot.jobs,
        snapshot.cluster,
        snapshot.round_number,
        inp.jobs,
        inp.current,
        inp.tasks,
        inp.nodes,
        inp.lost,
        inp.completed,
        inp.usage,
    )


def same_as_the_store(master: Master) -> RoundInput:
    """The round's read through the master's own memo equals a full read of the store;
    returns it. The workers' answers land in the background: the reads are compared once
    a full read before and one after the memo's agree (nothing changed in between)."""
    deadline = time.monotonic() + 30.0
    while True:
        now = datetime.now(UTC)
        before = parts(read(master, None, now))
        remembered = read(master, master.rounds.memo, now)
        after = parts(read(master, None, now))
        if before == after:
            assert parts(remembered) == after
            return remembered
        assert time.monotonic() < deadline, "the store kept changing"
        time.sleep(0.05)


def test_each_round_after_changes_reads_exactly_what_the_store_holds(cluster: Cluster) -> None:
    """Submissions (plain, an array under a cap, a dependent), placements, progress,
    cancellations (waiting and running), a completion, a drained node and a lost node:
    after each, the read with the memo the rounds use is the full read, and the round
    that follows runs on it."""
    master = cluster.master(heartbeat_timeout_s=2.0, fair_share=True)
    first = cluster.worker(master, "n1", num_gpus=4)
    second = cluster.worker(master, "n2", num_gpus=4)
    api = cluster.api(master)
    second.start_heartbeats()

    plain = [submit(api, spec(f"job-{i}", num_gpus=1 + i % 2)) for i in range(6)]
    array = submit(api, spec("sweep", array="0-3%1"))
    dependent = submit(api, spec("after", after_ok=[plain[0]]))
    same_as_the_store(master)
    master.run_round()
    inp = same_as_the_store(master)
    assert inp.current, "the first round placed jobs"
    assert dependent not in inp.jobs, "a held job is not offered"

    placed = sorted(inp.current)
    wait_for(lambda: set(placed) <= first.running_jobs() | second.running_jobs(), what="STARTs")
    for job_id in placed:
        worker = first if job_id in first.running_jobs() else second
        worker.progress(job_id, 100)
    same_as_the_store(master)

    waiting = next(j for j in plain if j not in inp.current)
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=waiting, reason="not needed"))
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=placed[-1], reason="wrong lr"))
    later = submit(api, spec("later", num_gpus=2))
    inp = same_as_the_store(master)
    assert waiting not in inp.jobs and placed[-1] not in inp.jobs and later in inp.jobs

    owner = first if plain[0] in first.running_jobs() else second
    owner.progress(plain[0], 1000)
    owner.exit(plain[0], common_pb2.EXIT_KIND_COMPLETED)
    inp = same_as_the_store(master)
    assert [c.job.id for c in inp.completed] == [plain[0]]
    master.run_round()
    inp = same_as_the_store(master)
    assert dependent in inp.jobs, "its dependency completed"

    api.DrainNode(hadar_pb2.DrainNodeRequest(node="n2"))
    same_as_the_store(master)
    api.ResumeNode(hadar_pb2.ResumeNodeRequest(node="n2"))
    master.run_round()
    same_as_the_store(master)

    # n1 stays silent and is declared lost; its tasks are written off.
    def lost() -> bool:
        master.check_nodes(force=True)
        return any(
            n.name == "n1" and n.state == common_pb2.NODE_STATE_UNREACHABLE
            for n in api.ListNodes(hadar_pb2.ListNodesRequest()).nodes
        )

    wait_for(lost, what="n1 declared lost")
    inp = same_as_the_store(master)
    assert all(t.node != "n1" for tasks in inp.tasks.values() for t in tasks)
    master.run_round()
    inp = same_as_the_store(master)
    offered = [j for j in inp.jobs.values() if j.spec.array_job_id == array]
    assert len(offered) == 1, "the array's cap of one running element holds"


def test_a_round_on_an_unchanged_store_loads_no_job_row(cluster: Cluster) -> None:
    """Once a round has read the jobs, the dependency check and the next round's read of
    an unchanged store load no job row; one submission loads that one row."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    for i in range(5):
        submit(api, spec(f"job-{i}", num_gpus=2))
    master.run_round()
    master.run_round()
    memo = master.rounds.memo.jobs
    loaded = memo.rows_loaded
    master.run_round()
    assert memo.rows_loaded == loaded
    submit(api, spec("one-more"))
    master.run_round()
    assert memo.rows_loaded == loaded + 1


def test_a_waiting_job_keeps_its_view_when_only_its_reason_was_written(cluster: Cluster) -> None:
    """A reason written without a new version (as holds write theirs) leaves the job's
    view in the memo: the next round's read takes it from there instead of building it
    again, and still reads the reason the store holds."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    submit(api, spec("first", num_gpus=2))
    job_id = submit(api, spec("second", num_gpus=2))
    master.run_round()
    views = master.rounds.memo.views
    built = views[job_id]
    assert built[0].reason == "waiting for the next scheduling round"
    master.tx.write(lambda uow: uow.jobs.set_waiting_reasons({job_id: "waiting: held up"}))
    master.run_round()
    assert views[job_id][2] is built[2]
    inp = same_as_the_store(master)
    assert inp.jobs[job_id].reason == "waiting: held up"
    assert views[job_id][2] is built[2]
