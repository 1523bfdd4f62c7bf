"""One silent worker must not stop the others: a real master and in-process fake workers,
one of which stops answering the master's calls (as a frozen agent does).

- Scheduled rounds keep their period while a worker hangs, and the other workers get
  their lease renewals from every round.
- A node is lost a full heartbeat timeout after the last heartbeat the master received,
  not after the older heartbeat time it stored, and a push it did not answer does not
  count against it.
- A task that ended because its lease ran out says so in the job's history, and the
  checkpoint a lost node's task reports on its way out becomes the job's count.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from protos.hadar.v1 import common_pb2, hadar_pb2
from store.domain import Round
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for

ROUND_S = 0.5
# How long one push to a worker that does not answer hangs (dispatch_timeout_s x
# dispatch_attempts below): a round, or a wait between renewals, that reached it waited on
# the silent worker. Bounds tighter than this would test the machine's load, not isolation
# (a read stalled 1.6 s on a busy disk while the suite ran).
HANG_S = 2.0


def one_gpu_job(api: Api, name: str) -> int:
    spec = common_pb2.JobSpec(
        name=name, num_gpus=1, iterations=10_000, workload=common_pb2.WorkloadProgram(name="resnet")
    )
    job_id: int = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job.id
    return job_id


def events(api: Api, job_id: int) -> list[tuple[str, str]]:
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id, include_events=True))
    return [(e.kind, e.reason) for e in got.events]


def test_scheduled_rounds_keep_their_period_and_renew_other_workers_while_one_hangs(
    cluster: Cluster,
) -> None:
    """Three workers run a job each; n3 stops answering pushes (it still heartbeats, so
    the master keeps sending it renewals that hang until their deadline, 2 s). Every round
    still ends, and the next starts, sooner than one such push hangs, and n1 and n2 get a
    renewal about every round (one that arrives while the previous is still being recorded
    goes out right after it, replacing the older); no job is stopped. Once n3 answers
    again it gets an extension carrying a newest lease end, and the rounds that did not
    reach it count as dispatch failures."""
    master = cluster.master(
        round_seconds=ROUND_S,
        lease_rounds=30,
        heartbeat_timeout_s=10.0,
        dispatch_timeout_s=1.0,
        dispatch_attempts=2,
    )
    workers = [cluster.worker(master, f"n{i}", num_gpus=1) for i in (1, 2, 3)]
    api = cluster.api(master)
    jobs = [one_gpu_job(api, f"job-{i}") for i in range(3)]
    for worker in workers:
        worker.start_heartbeats()
    wait_for(lambda: all(len(w.running_jobs()) == 1 for w in workers), what="a job on every worker")
    healthy, silent = workers[:2], workers[2]

    silent.freeze()
    frozen_after = master.rounds.last_result.number if master.rounds.last_result else 0
    watched = range(frozen_after + 1, frozen_after + 9)
    # The pushes to n3 hang for 2.1 s each (1 s x 2 attempts): waiting for them, eight
    # rounds would take 17 s.
    wait_for(
        lambda: all(max(w.extended_in(), default=0) >= watched[-1] for w in healthy),
        timeout=8 * ROUND_S + 4.0,
        what="n1 and n2 to get the EXTEND of eight rounds",
    )
    rounds: list[Round] = master.tx.read(lambda uow: [uow.rounds.get(n) for n in watched])
    for record in rounds:
        assert record.duration_s is not None and record.duration_s < HANG_S, record
    starts = [r.started_at for r in rounds]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert max(gaps) < HANG_S, gaps
    for worker in healthy:
        arrived = [at for at, number in worker.extensions if number in watched]
        assert len(arrived) >= len(watched) // 2, (worker.name, worker.extensions)
        waits = [b - a for a, b in itertools.pairwise(arrived)]
        assert max(waits) < HANG_S, (worker.name, waits)
    assert not silent.extended_in() & set(watched)

    silent.thaw()
    wait_for(
        lambda: max(silent.extended_in(), default=0) >= watched[-1],
        what="n3 to get an extension from a round after it stopped answering",
    )
    wait_for(
        lambda: master.tx.read(
            lambda uow: any(uow.rounds.get(n).dispatch_failures == 1 for n in watched)
        ),
        what="a round that did not reach n3 to count it",
    )
    for worker in workers:
        assert worker.stops == [], worker.name
    for job_id in jobs:
        got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
        assert got.state == common_pb2.JOB_STATE_RUNNING and got.preemptions == 0


def test_a_node_is_lost_a_full_timeout_after_its_last_heartbeat(cluster: Cluster) -> None:
    """The stored heartbeat time is written only every quarter of the timeout; the loss
    check goes by the last heartbeat received. A push the node does not answer (a round's
    START) marks nothing."""
    timeout = 40.0
    master = cluster.master(heartbeat_timeout_s=timeout, dispatch_timeout_s=0.3)
    worker = cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    registered = datetime.now(UTC)
    wait_for(
        lambda: datetime.now(UTC) - registered > timedelta(seconds=1),
        what="a second to pass since the registration",
    )
    before = datetime.now(UTC)
    worker.heartbeat()
    heard = datetime.now(UTC)
    found = master.tx.read(lambda uow: uow.nodes.find("n1"))
    assert found is not None
    # Not due for a write: the store still has the registration's time, while ListNodes
    # shows the heartbeat received.
    assert found.last_heartbeat < heard - timedelta(seconds=0.9), (found, heard)
    shown = api.ListNodes(hadar_pb2.ListNodesRequest()).nodes[0].last_heartbeat.ToDatetime(UTC)
    assert before <= shown <= heard

    worker.freeze()
    one_gpu_job(api, "unanswered")
    assert master.run_round().dispatch_failures == 1

    limit = timedelta(seconds=timeout)
    assert master.registry.check_lost(now=heard + limit - timedelta(seconds=0.5)) == []
    nodes = api.ListNodes(hadar_pb2.ListNodesRequest()).nodes
    assert nodes[0].state == common_pb2.NODE_STATE_READY
    assert master.registry.check_lost(now=heard + limit + timedelta(seconds=0.2)) == ["n1"]
    node = api.ListNodes(hadar_pb2.ListNodesRequest()).nodes[0]
    assert node.state == common_pb2.NODE_STATE_UNREACHABLE
    assert node.reason == f"no heartbeat for {timeout:.0f} s"


def test_a_stop_the_master_did_not_ask_for_says_why_in_the_jobs_history(
    cluster: Cluster,
) -> None:
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    job_id = one_gpu_job(api, "expires")
    master.run_round()
    wait_for(lambda: job_id in worker.running_jobs(), what="START on n1")
    lease = next(a.lease for a in worker.applied if a.job_id == job_id)
    why = (
        f"stopped: lease {lease} expired at 12:01:07 UTC without renewal: the master was "
        "unreachable (UNAVAILABLE: connection refused)"
    )
    assert worker.exit(job_id, common_pb2.EXIT_KIND_STOPPED, 0, message=why).accepted
    kind, reason = events(api, job_id)[-1]
    assert kind == "exited"
    assert reason == (
        f"task on n1 ended (stopped) in lease {lease}: lease {lease} expired at 12:01:07 UTC "
        "without renewal: the master was unreachable (UNAVAILABLE: connection refused)"
    )


def test_a_lost_nodes_last_checkpoint_becomes_the_jobs_count(cluster: Cluster) -> None:
    """n1 is lost while its job runs (last progress: 30 iterations); cut off, it stops the
    task at lease end with a checkpoint at 45 and reports that once it is back. The exit
    of the written-off task changes no state, but the job now shows 45 iterations, its GPU
    time runs until that exit, and the history says how the task ended."""
    master = cluster.master(heartbeat_timeout_s=2.0)
    first = cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    job_id = one_gpu_job(api, "cut-off")
    master.run_round()
    wait_for(lambda: job_id in first.running_jobs(), what="START on n1")
    first.progress(job_id, 30)
    second: FakeWorker = cluster.worker(master, "n2", num_gpus=1)
    second.start_heartbeats()

    def lost() -> bool:
        master.check_nodes(force=True)
        nodes = {n.name: n.state for n in api.ListNodes(hadar_pb2.ListNodesRequest()).nodes}
        return bool(nodes["n1"] == common_pb2.NODE_STATE_UNREACHABLE)

    wait_for(lost, what="n1 lost")
    written_off = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job.gpu_seconds
    task = next(iter(first.tasks.values()))
    task.iterations_done = 45  # checkpointed as its lease ended, never reported as progress
    why = f"stopped: lease {task.lease} expired at 12:01:07 UTC without renewal"
    assert not first.exit(job_id, common_pb2.EXIT_KIND_STOPPED, 0, message=why).accepted
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    assert got.state == common_pb2.JOB_STATE_PREEMPTED
    assert (got.iterations_done, got.checkpoint_iterations) == (45, 45)
    assert got.gpu_seconds > written_off > 0
    kind, reason = events(api, job_id)[-1]
    assert kind == "late_exit" and reason.endswith(f"ended (stopped): {why}"), reason
