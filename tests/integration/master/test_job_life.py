"""A job's life through a real master and fake workers: submit, schedule, push, progress,
completion, cancellation, lost nodes and master restarts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from master.daemon import Master
from protos.hadar.v1 import common_pb2, coordinator_pb2, hadar_pb2, worker_pb2
from store import ConflictError
from store.repositories.jobs import JobRepository
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for


def workload_spec(
    name: str = "train", num_gpus: int = 2, iterations: int = 100
) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=name,
        num_gpus=num_gpus,
        iterations=iterations,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )


def job_state(api: Api, job_id: int) -> int:
    state: int = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job.state
    return state


def test_submit_schedule_push_progress_complete(cluster: Cluster) -> None:
    """A submitted job is placed by a round, its START reaches the worker with a fencing
    token, progress is recorded, and reaching the iterations completes it."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)

    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec())).job
    assert job.state == common_pb2.JOB_STATE_PENDING

    result = master.run_round()
    assert result.started == (job.id,)
    wait_for(lambda: job.id in worker.running_jobs(), what="START on the worker")
    start = next(a for a in worker.applied if a.job_id == job.id)
    assert start.action == worker_pb2.ASSIGNMENT_ACTION_START
    assert len(start.gpu_indices) == 2 and start.lease > 0
    assert start.spec.workload.name == "resnet"
    assert start.rendezvous.world_size == 2
    assert sum(start.local_batch_sizes) == 32  # resnet's default global batch
    assert start.checkpoint_dir.endswith(f"job-{job.id}")
    assert job_state(api, job.id) == common_pb2.JOB_STATE_RUNNING

    ack = worker.progress(job.id, 40)
    assert [a.stale for a in ack.acks] == [False]
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert got.iterations_done == 40 and got.attained_service > 0
    assert got.tasks and got.tasks[0].state == common_pb2.TASK_STATE_RUNNING
    assert any(t.source == "measured" for t in got.throughputs)

    worker.progress(job.id, 100)
    done = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id, include_events=True))
    assert done.job.state == common_pb2.JOB_STATE_COMPLETED
    kinds = [e.kind for e in done.events]
    assert kinds == ["submitted", "scheduled", "completed"]
    assert worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED).accepted

    # The next round extends nothing and starts nothing; the job stays done.
    assert master.run_round().started == ()
    assert job_state(api, job.id) == common_pb2.JOB_STATE_COMPLETED


def test_a_running_jobs_later_reports_store_counters_service_and_rates_as_the_first(
    cluster: Cluster,
) -> None:
    """After a task's first report (which starts it running), reports that only move
    counters are stored the same way: iterations and checkpoints only move forward,
    service adds up per report, each rate folds into the measured average, the job's
    version moves once per report that changes it; in one call, a report for a job
    cancelled since is stale while the other job's is stored."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    kept = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec("kept", 1, 1000))).job
    gone = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec("gone", 1, 1000))).job
    assert set(master.run_round().started) == {kept.id, gone.id}
    wait_for(lambda: {kept.id, gone.id} <= set(worker.running_jobs()), what="both START")

    def stored(job_id: int) -> common_pb2.Job:
        job: common_pb2.Job = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
        return job

    def counts() -> int:
        rows = master.tx.read(lambda uow: uow.throughput.all())
        return sum(r.count for r in rows if r.source == "measured")

    worker.progress(kept.id, 40, rate=10.0)
    first = stored(kept.id)
    assert first.iterations_done == 40 and first.tasks[0].state == common_pb2.TASK_STATE_RUNNING
    measured = counts()
    worker.progress(kept.id, 70, rate=20.0)
    later = stored(kept.id)
    assert later.iterations_done == 70 and later.attained_service > first.attained_service
    assert counts() == measured + 1
    version = master.tx.read(lambda uow: uow.jobs.get(kept.id).version)
    worker.progress(kept.id, 50, rate=20.0)
    late = stored(kept.id)
    # Time passed: the late report still adds service, so it changes the job once.
    assert late.iterations_done == 70 and late.attained_service > later.attained_service
    assert master.tx.read(lambda uow: uow.jobs.get(kept.id).version) == version + 1

    worker.progress(gone.id, 10)
    # Taken before the cancellation: its STOP takes the task off the worker.
    refs = {t.job_id: t for t in worker.tasks.values()}
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=gone.id))
    ack = worker.coordinator.ReportProgress(
        coordinator_pb2.ReportProgressRequest(
            node="n1",
            reports=[
                coordinator_pb2.ProgressReport(
                    job_id=job_id,
                    task_index=0,
                    lease=refs[job_id].lease,
                    iterations_done=90,
                    iterations_per_s=10.0,
                    checkpoint_iterations=80,
                    gpu_type=refs[job_id].gpu_type,
                )
                for job_id in (gone.id, kept.id)
            ],
        ),
        metadata=worker.metadata,
        timeout=10,
    )
    assert [a.stale for a in ack.acks] == [True, False]
    assert (stored(kept.id).iterations_done, stored(kept.id).checkpoint_iterations) == (90, 80)
    assert stored(gone.id).iterations_done == 10


def test_job_waits_for_gpus_with_its_memory_and_says_so(cluster: Cluster) -> None:
    """A job asking for more GPU memory than the usable GPUs have waits, with a reason
    naming its request and the largest usable memory, instead of taking the small GPUs;
    once the large GPUs are usable again it is placed on them."""
    master = cluster.master()
    small = cluster.worker(master, "small", gpu_type="k80", gpu_memory_bytes=12 << 30)
    big = cluster.worker(master, "big", gpu_type="a100-80gb", gpu_memory_bytes=80 << 30)
    api = cluster.api(master)
    spec = workload_spec(num_gpus=1)
    spec.gpu_memory_bytes = 40 << 30
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job
    api.DrainNode(hadar_pb2.DrainNodeRequest(node="big"))

    assert master.run_round().started == ()
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert got.state == common_pb2.JOB_STATE_PENDING
    assert got.reason == "waiting: needs 40GiB of GPU memory; the largest usable GPUs have 12GiB"
    assert small.applied == []

    api.ResumeNode(hadar_pb2.ResumeNodeRequest(node="big"))
    assert master.run_round().started == (job.id,)
    wait_for(lambda: job.id in big.running_jobs(), what="START on the big GPUs")


def test_a_start_the_worker_fails_ends_that_attempt_with_its_reason(cluster: Cluster) -> None:
    """A START answered FAILED (a malformed assignment, a spawn error) ends the attempt with
    the worker's message as the reason; the other job of the same call starts, and the
    failed one is placed again by a later round."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    bad = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec("bad"))).job
    good = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec("good"))).job
    problem = "malformed assignment: assignments[0].checkpoint_dir: must be an absolute path"
    worker.fail_starts[bad.id] = problem

    assert set(master.run_round().started) == {bad.id, good.id}
    wait_for(lambda: good.id in worker.running_jobs(), what="START of the good job")

    def retried() -> list[common_pb2.JobEvent]:
        reply = api.GetJob(hadar_pb2.GetJobRequest(job_id=bad.id, include_events=True))
        return [e for e in reply.events if e.kind == "retried"]

    wait_for(retried, what="the failed attempt recorded")
    (event,) = retried()
    assert event.reason.startswith(f"could not start on n1: {problem}; retry 1 of")
    assert bad.id not in worker.running_jobs()
    assert job_state(api, good.id) == common_pb2.JOB_STATE_RUNNING

    del worker.fail_starts[bad.id]
    worker.progress(good.id, 100)
    worker.exit(good.id, common_pb2.EXIT_KIND_COMPLETED)
    assert bad.id in master.run_round().started
    wait_for(lambda: bad.id in worker.running_jobs(), what="START of the retried job")


def test_cancel_while_running_stops_the_task(cluster: Cluster) -> None:
    """Cancelling a running job records who cancelled it and sends StopTask to its worker;
    another user may not cancel it."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    bob = cluster.api(master, "bob", admin=False)

    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")

    with pytest.raises(grpc.RpcError) as denied:
        bob.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

    cancelled = alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id, reason="wrong lr")).job
    assert cancelled.state == common_pb2.JOB_STATE_CANCELLED
    assert "alice" in cancelled.reason and "wrong lr" in cancelled.reason
    stop = wait_for(
        lambda: next((s for s in worker.stops if s.job_id == job.id), None), what="StopTask"
    )
    assert stop.via == "StopTask" and stop.lease > 0
    wait_for(lambda: job.id not in worker.running_jobs(), what="task gone")
    # Cancelling again is a no-op that returns the terminal job.
    again = alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id)).job
    assert again.state == common_pb2.JOB_STATE_CANCELLED


def _lost(master: Master, api: Api, node: str) -> bool:
    """Checks for lost nodes (the daemon's own periodic check may come first)."""
    master.check_nodes(force=True)
    nodes = {n.name: n.state for n in api.ListNodes(hadar_pb2.ListNodesRequest()).nodes}
    return bool(nodes[node] == common_pb2.NODE_STATE_UNREACHABLE)


def _past_lost_leases(master: Master) -> timedelta:
    return timedelta(seconds=master.settings.lost_lease_hold_s + 1)


@dataclass
class LostRun:
    """A job that ran on n1 (30 iterations reported) when n1 was declared lost; n2 beats."""

    master: Master
    api: Api
    first: FakeWorker
    second: FakeWorker
    job_id: int
    old_lease: int
    lost_after: datetime  # just before waiting for n1 to be declared lost

    def newer_starts(self) -> list[worker_pb2.TaskAssignment]:
        """STARTs of the job under a later lease, on either worker."""
        return [
            a
            for w in (self.first, self.second)
            for a in w.applied
            if a.job_id == self.job_id and a.lease > self.old_lease
        ]

    def return_n1(self) -> None:
        """n1 is back: its heartbeat is answered with "register again", and the stale task
        it reports is stopped by the reconciliation of that registration."""
        self.first.auto_reregister = False
        assert self.first.heartbeat().reregister
        answer = self.first.register()
        assert [(r.job_id, r.lease) for r in answer.stop] == [(self.job_id, self.old_lease)]


def _lose_n1_while_its_job_runs(cluster: Cluster) -> LostRun:
    master = cluster.master(heartbeat_timeout_s=2.0)
    first = cluster.worker(master, "n1", num_gpus=2)
    # n1 beats until its progress is in, so that a slow start cannot lose it before then.
    first.start_heartbeats()
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec())).job
    master.run_round()
    wait_for(lambda: job.id in first.running_jobs(), what="START on n1")
    assert [a.stale for a in first.progress(job.id, 30).acks] == [False]
    old_lease = next(a.lease for a in first.applied if a.job_id == job.id)
    second = cluster.worker(master, "n2", num_gpus=2)
    second.start_heartbeats()
    # Then n1 falls silent; n2 keeps beating.
    first.stop_heartbeats()
    before = datetime.now(UTC)
    wait_for(lambda: _lost(master, api, "n1"), what="node lost")
    return LostRun(master, api, first, second, job.id, old_lease, before)


def test_lost_nodes_job_starts_elsewhere_only_after_its_lease_is_over(cluster: Cluster) -> None:
    """The lost node's worker may still run the job (a partition): it stops the task when
    the lease ends unrenewed. Until then the job is not started anywhere else, and says why;
    afterwards it is placed on the other node."""
    run = _lose_n1_while_its_job_runs(cluster)
    after = datetime.now(UTC)
    master, api, second, before = run.master, run.api, run.second, run.lost_after
    job_id = run.job_id
    start = next(a for a in run.first.applied if a.job_id == job_id)
    hold = timedelta(seconds=master.settings.lost_lease_hold_s)
    # Every lease sent ends within the hold: the lease, then the worker's grace.
    sent_end = start.lease_expires_at.ToDatetime(tzinfo=UTC)
    assert sent_end + timedelta(seconds=master.settings.grace_s) <= before + hold

    for offset in (timedelta(0), hold - timedelta(seconds=1)):
        result = master.rounds.run(now=before + offset)
        assert result.started == ()
        got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
        assert got.state == common_pb2.JOB_STATE_PREEMPTED
        assert got.reason.startswith(f"waiting: lease {start.lease} on n1 (lost) ends at ")
        seconds = range(-1, int((after - before).total_seconds()) + 2)
        ends = {f"{before + hold + timedelta(seconds=s):%H:%M:%S} UTC" for s in seconds}
        assert got.reason.split(" ends at ")[1] in ends
    assert job_id not in second.running_jobs()
    assert not any(a.job_id == job_id for a in second.applied)

    result = master.rounds.run(now=after + hold + timedelta(seconds=1))
    assert result.started == (job_id,)
    wait_for(lambda: job_id in second.running_jobs(), what="START on n2")
    restart = next(a for a in second.applied if a.job_id == job_id)
    assert restart.lease > start.lease


def test_a_returning_nodes_stale_task_delays_the_jobs_next_start_until_it_exits(
    cluster: Cluster,
) -> None:
    """A lost node that comes back before its lease is over still runs the job's task:
    registration stops it, and although the hold on the job lifts, the job's next START is
    not sent until that task's exit is reported; the job then resumes from what the stale
    task checkpointed."""
    run = _lose_n1_while_its_job_runs(cluster)
    master, api, first, job_id, old_lease = (
        run.master,
        run.api,
        run.first,
        run.job_id,
        run.old_lease,
    )
    still_running = dict(first.tasks)

    # n1 is back well within the hold, its task still running.
    run.return_n1()
    first.start_heartbeats()
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id, include_events=True))
    assert got.events[-1].kind == "stale_task"
    assert f"lease {old_lease}" in got.events[-1].reason

    assert job_id in master.run_round().started
    assert run.newer_starts() == [], "started while the stale task still ran"
    assert job_state(api, job_id) == common_pb2.JOB_STATE_RUNNING

    # The stale task checkpoints at 45 iterations and reports its exit.
    first.tasks.update(still_running)
    first.tasks[(job_id, 0)].iterations_done = 45
    assert first.exit(job_id, common_pb2.EXIT_KIND_STOPPED).accepted
    (start,) = wait_for(run.newer_starts, what="the job's next START")
    assert start.iterations_done == 45


def test_lost_node_preempts_and_job_is_placed_elsewhere(cluster: Cluster) -> None:
    """A node silent past the timeout becomes UNREACHABLE, its job goes to PREEMPTED with
    the reason, the next round places it on another node with a higher lease, and the lost
    node's late progress is refused as stale."""
    run = _lose_n1_while_its_job_runs(cluster)
    master, api, first, second, job_id, old_lease = (
        run.master,
        run.api,
        run.first,
        run.second,
        run.job_id,
        run.old_lease,
    )
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id, include_events=True))
    assert got.job.state == common_pb2.JOB_STATE_PREEMPTED
    assert got.job.reason == "node n1 lost"
    assert got.events[-1].kind == "node_lost"
    nodes = {n.name: n for n in api.ListNodes(hadar_pb2.ListNodesRequest()).nodes}
    assert nodes["n1"].state == common_pb2.NODE_STATE_UNREACHABLE

    # Once n1's lease is surely over (see the next test for the wait itself).
    result = master.rounds.run(now=datetime.now(UTC) + _past_lost_leases(master))
    assert result.started == (job_id,)
    wait_for(lambda: job_id in second.running_jobs(), what="START on n2")
    restart = next(a for a in second.applied if a.job_id == job_id)
    assert restart.lease > old_lease
    assert restart.iterations_done == 30

    # The old placement's reports are fenced off.
    ack = first.progress(job_id, 35)
    assert [a.stale for a in ack.acks] == [True]
    still_running = dict(first.tasks)
    assert not first.exit(job_id, common_pb2.EXIT_KIND_FAILED, 1).accepted
    assert job_state(api, job_id) == common_pb2.JOB_STATE_RUNNING

    # n1 returns with the task it still runs.
    first.tasks.update(still_running)
    run.return_n1()
    assert first.running_jobs() == set()
    nodes = {n.name: n for n in api.ListNodes(hadar_pb2.ListNodesRequest()).nodes}
    assert nodes["n1"].state == common_pb2.NODE_STATE_READY
    # The job already runs on n2: the stale task stays written off, its exit ignored.
    events = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id, include_events=True)).events
    assert "stale_task" not in [e.kind for e in events]
    first.tasks.update(still_running)
    assert not first.exit(job_id, common_pb2.EXIT_KIND_STOPPED).accepted
    assert job_state(api, job_id) == common_pb2.JOB_STATE_RUNNING


def test_restarted_master_adopts_running_tasks(cluster: Cluster) -> None:
    """A new master on the same database loses and duplicates nothing: running tasks are
    kept on re-registration, jobs keep their ids and state, the next round only extends."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    running = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec("a"))).job
    waiting = api.SubmitJob(
        hadar_pb2.SubmitJobRequest(spec=workload_spec("b", num_gpus=4), idempotency_key="k-b")
    ).job
    master.run_round()
    wait_for(lambda: running.id in worker.running_jobs(), what="START")
    worker.progress(running.id, 10)
    master.stop(grace=0.5)

    restarted = cluster.master()
    worker.connect(restarted.address)
    answer = worker.register()
    assert [(r.job_id, r.lease) for r in answer.keep] == [
        (running.id, next(a.lease for a in worker.applied if a.job_id == running.id))
    ]
    assert list(answer.stop) == []

    api2 = cluster.api(restarted, "alice")
    jobs = api2.ListJobs(hadar_pb2.ListJobsRequest()).jobs
    assert [(j.id, j.state) for j in jobs] == [
        (running.id, common_pb2.JOB_STATE_RUNNING),
        (waiting.id, common_pb2.JOB_STATE_PENDING),
    ]
    assert jobs[0].iterations_done == 10
    # The same idempotency key returns the existing job, not a duplicate.
    again = api2.SubmitJob(
        hadar_pb2.SubmitJobRequest(spec=workload_spec("b", num_gpus=4), idempotency_key="k-b")
    ).job
    assert again.id == waiting.id

    starts_before = sum(1 for a in worker.applied if a.action == worker_pb2.ASSIGNMENT_ACTION_START)
    result = restarted.run_round()
    assert result.started == ()  # 2 of 4 GPUs busy: job b (4 GPUs) still waits
    starts_after = sum(1 for a in worker.applied if a.action == worker_pb2.ASSIGNMENT_ACTION_START)
    assert starts_after == starts_before
    assert any(
        a.action == worker_pb2.ASSIGNMENT_ACTION_EXTEND and a.job_id == running.id
        for a in worker.applied
    )
    worker.progress(running.id, 100)
    assert job_state(api2, running.id) == common_pb2.JOB_STATE_COMPLETED


def test_failed_task_is_retried_then_fails(cluster: Cluster) -> None:
    """A failing job is retried up to max_retries (PREEMPTED, placed again), then FAILED
    with the exit code and the reason."""
    master = cluster.master(max_retries=1)
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    assert worker.exit(job.id, common_pb2.EXIT_KIND_FAILED, 3, "boom").accepted
    retried = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert retried.state == common_pb2.JOB_STATE_PREEMPTED and retried.retries == 1

    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="second START")
    worker.exit(job.id, common_pb2.EXIT_KIND_FAILED, 4, "boom again")
    failed = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert failed.state == common_pb2.JOB_STATE_FAILED
    assert failed.exit_code == 4 and "exit code 4" in failed.reason


def _a_command_ends_while_the_master_is_down(
    cluster: Cluster,
) -> tuple[Master, FakeWorker, common_pb2.Job, dict[Any, Any]]:
    """A command job started on n1, its master stopped, the command ended meanwhile; the
    master restarted and the worker pointed at it (not yet registered again). Returns the
    new master, the worker, the job and the tasks that ended."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(
        hadar_pb2.SubmitJobRequest(
            spec=common_pb2.JobSpec(
                name="batch",
                num_gpus=1,
                iterations=1,
                command=common_pb2.CommandProgram(argv=["./run.sh"]),
            )
        )
    ).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    master.stop(grace=0.5)
    finished = dict(worker.tasks)
    worker.tasks.clear()  # the command ended while the master was away
    restarted = cluster.master()
    worker.connect(restarted.address)
    return restarted, worker, job, finished


def test_completion_reported_after_a_master_restart_is_kept(cluster: Cluster) -> None:
    """An opaque command that finished while the master was down: its worker re-registers
    without the task (the job looks lost), then delivers the pending exit report; the job
    is COMPLETED, not run a second time."""
    restarted, worker, job, finished = _a_command_ends_while_the_master_is_down(cluster)
    worker.register()
    api2 = cluster.api(restarted)
    assert job_state(api2, job.id) == common_pb2.JOB_STATE_PREEMPTED
    worker.tasks.update(finished)
    assert worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, 0).accepted
    assert job_state(api2, job.id) == common_pb2.JOB_STATE_COMPLETED
    assert restarted.run_round().started == ()


def test_unreachable_worker_counts_as_dispatch_failure_and_gets_the_start_later(
    cluster: Cluster,
) -> None:
    """A START a worker never acknowledged stays assigned; the round reports the worker as
    a dispatch failure, and the START goes out when the worker registers again."""
    master = cluster.master(dispatch_attempts=2, dispatch_timeout_s=0.5)
    gone = cluster.worker(master, "n1")
    api = cluster.api(master)
    gone.close()
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec())).job
    result = master.run_round()
    assert result.started == (job.id,) and result.dispatch_failures == 1
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert [t.state for t in got.tasks] == [common_pb2.TASK_STATE_ASSIGNED]
    status = api.GetClusterStatus(hadar_pb2.GetClusterStatusRequest())
    assert status.last_round.dispatch_failures == 1

    back = cluster.worker(master, "n1")
    wait_for(lambda: job.id in back.running_jobs(), what="START resent after registration")
    start = next(a for a in back.applied if a.job_id == job.id)
    assert start.lease == got.tasks[0].lease


def test_completion_releases_a_placement_that_never_started(cluster: Cluster) -> None:
    """A job that completes while a newer placement of it is still waiting to start (a resize
    decided in the round before) gives those GPUs back: its pending tasks are LOST, and the
    next job starts on them."""
    from store.domain import NewTask
    from store.states import TaskState

    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    first = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec(num_gpus=2))).job
    master.run_round()
    wait_for(lambda: first.id in worker.running_jobs(), what="START on the worker")
    # A newer placement of the same job on the other two GPUs, not started yet.
    master.tx.write(
        lambda uow: uow.tasks.add(
            NewTask(
                job_id=first.id,
                task_index=0,
                node="n1",
                lease=uow.tasks.latest_lease(first.id) + 1000,
                gpu_indices=(2, 3),
                gpu_type=worker.gpus()[2].type,
                rank_offset=0,
                local_batch_sizes=(16, 16),
            )
        )
    )
    worker.progress(first.id, 100)
    assert job_state(api, first.id) == common_pb2.JOB_STATE_COMPLETED
    # Only the task that reported the completion still holds GPUs; it exits by itself.
    active = master.tx.read(lambda uow: uow.tasks.active_for_job(first.id))
    assert [(t.gpu_indices, t.state) for t in active] == [((0, 1), TaskState.RUNNING)]
    assert worker.exit(first.id, common_pb2.EXIT_KIND_COMPLETED).accepted
    assert master.tx.read(lambda uow: uow.tasks.active_for_job(first.id)) == []
    second = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec(num_gpus=2))).job
    master.run_round()
    wait_for(lambda: second.id in worker.running_jobs(), what="the next job to start")


def test_a_start_resent_to_part_of_a_job_keeps_the_whole_rendezvous(cluster: Cluster) -> None:
    """When one node of a two-node job acknowledged its START and the other did not, the
    START resent to the second carries the whole job's world size and rank 0's address."""
    master = cluster.master()
    first = cluster.worker(master, "n1", num_gpus=1)
    second = cluster.worker(master, "n2", num_gpus=1)
    api = cluster.api(master)
    second.close()  # registered, but its START cannot be delivered
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec(num_gpus=2))).job
    assert master.run_round().started == (job.id,)
    wait_for(lambda: job.id in first.running_jobs(), what="START on n1")
    (sent,) = [a for a in first.applied if a.job_id == job.id]
    assert sent.rendezvous.world_size == 2

    resent = master.tx.read(lambda uow: master.dispatcher.ready_starts(uow, 99))
    (again,) = [o for o in resent if o.node == "n2"]
    assert again.assignment.rendezvous.world_size == 2
    assert again.assignment.rendezvous.master_addr == sent.rendezvous.master_addr
    assert again.assignment.rendezvous.master_port == sent.rendezvous.master_port


def test_a_script_stays_where_it_started_until_it_reports_progress(cluster: Cluster) -> None:
    """A running script that has reported no progress (a plain script, not using the runtime
    helper) is neither moved nor forked when a faster GPU joins, round after round: no STOP,
    no second START anywhere. Its first progress report shows it is managed: the next round
    moves it to the faster GPU."""
    master = cluster.master(policy="hadare")
    slow = cluster.worker(master, "n1", gpu_type="k80", num_gpus=1)
    api = cluster.api(master)
    spec = common_pb2.JobSpec(
        name="plain",
        num_gpus=1,
        iterations=1000,
        script=common_pb2.ScriptProgram(argv=["python3", "train.py"]),
    )
    job_id = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job.id
    assert master.run_round().started == (job_id,)
    wait_for(lambda: job_id in slow.running_jobs(), what="START on n1")
    fast = cluster.worker(master, "n2", gpu_type="v100", num_gpus=1)

    for _ in range(3):
        assert master.run_round().actions == 0
    actions = {a.action for a in slow.applied if a.job_id == job_id}
    assert actions == {worker_pb2.ASSIGNMENT_ACTION_START, worker_pb2.ASSIGNMENT_ACTION_EXTEND}
    assert slow.stops == [] and fast.applied == []
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    assert not got.reports_progress
    assert [(t.node, t.gpu_type) for t in got.tasks] == [("n1", "k80")]
    assert (got.migrations, got.preemptions) == (0, 0)

    slow.progress(job_id, 10)
    assert api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job.reports_progress
    assert master.run_round().actions == 1
    wait_for(lambda: job_id in fast.running_jobs(), what="the managed script on n2")


def test_a_job_completed_by_its_progress_gets_exit_code_0_when_its_process_exits(
    cluster: Cluster,
) -> None:
    """A job that completes by its last progress report has no exit code until its process
    exits; that clean exit records exit code 0 on the completed job."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job_id = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec())).job.id
    master.run_round()
    wait_for(lambda: job_id in worker.running_jobs(), what="START on n1")
    worker.progress(job_id, 100)
    done = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    assert done.state == common_pb2.JOB_STATE_COMPLETED and not done.HasField("exit_code")

    assert worker.exit(job_id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0).accepted
    done = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    assert done.state == common_pb2.JOB_STATE_COMPLETED
    assert done.HasField("exit_code") and done.exit_code == 0
    assert done.reports_progress


def test_a_task_that_ended_while_the_master_was_down_completes_without_a_preemption(
    cluster: Cluster,
) -> None:
    """A command that finished while the master was down: its worker registers again
    naming the task among those that ended (its exit report still to be sent), so the job
    keeps its placement instead of losing it; the exit report then completes it, with no
    preemption and no "lost" event in its history."""
    restarted, worker, job, finished = _a_command_ends_while_the_master_is_down(cluster)
    worker.register(ended=finished.values())
    api2 = cluster.api(restarted)
    assert job_state(api2, job.id) == common_pb2.JOB_STATE_RUNNING
    worker.tasks.update(finished)
    assert worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, 0).accepted
    done = api2.GetJob(hadar_pb2.GetJobRequest(job_id=job.id, include_events=True))
    assert done.job.state == common_pb2.JOB_STATE_COMPLETED
    assert done.job.preemptions == 0
    assert [e.kind for e in done.events] == ["submitted", "scheduled", "completed"]
    assert restarted.run_round().started == ()


def test_an_exit_looks_for_starts_to_send_only_while_one_may_wait(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a round's starts have gone out, none waits for an older task: a job's exit
    then asks for no read of the tasks to find starts to send. After something that may
    leave a start waiting (here: told so directly), the next exit asks for one again, and
    a read that finds nothing waiting clears it."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    jobs = [
        api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec(name=f"j{k}", num_gpus=1))).job
        for k in range(3)
    ]
    assert set(master.run_round().started) == {job.id for job in jobs}
    wait_for(
        lambda: {job.id for job in jobs} <= set(worker.running_jobs()), what="the three STARTs"
    )
    asked: list[int] = []
    monkeypatch.setattr(master.dispatcher._ready_soon, "request", lambda: asked.append(1))

    worker.progress(jobs[0].id, 100)
    assert worker.exit(jobs[0].id, common_pb2.EXIT_KIND_COMPLETED).accepted
    assert asked == []

    master.dispatcher.may_be_waiting()
    worker.progress(jobs[1].id, 100)
    assert worker.exit(jobs[1].id, common_pb2.EXIT_KIND_COMPLETED).accepted
    assert asked == [1]

    master.dispatcher.dispatch_ready()  # the read asked for: nothing waits
    worker.progress(jobs[2].id, 100)
    assert worker.exit(jobs[2].id, common_pb2.EXIT_KIND_COMPLETED).accepted
    assert asked == [1]


def test_a_progress_report_stored_again_after_a_conflict_counts_its_service_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report whose transaction meets a conflict and is stored again counts the service
    since the task's previous report, as it would have the first time: the attempt that
    failed does not count as a report."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload_spec("once", 1, 1000))).job
    assert master.run_round().started == (job.id,)
    wait_for(lambda: job.id in worker.running_jobs(), what="START on the worker")
    worker.progress(job.id, 10)
    before = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job.attained_service
    reported_at = time.monotonic()

    write_progress = JobRepository.write_progress
    conflicts = [ConflictError("a concurrent change, once")]

    def conflicting(self: JobRepository, writes: Any) -> None:
        if conflicts:
            raise conflicts.pop()
        write_progress(self, writes)

    monkeypatch.setattr(JobRepository, "write_progress", conflicting)
    wait_for(lambda: time.monotonic() - reported_at >= 0.5, what="half a second to pass")
    worker.progress(job.id, 20)
    assert not conflicts
    after = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert after.iterations_done == 20
    # One GPU for at least half a second, at a speed factor of at least 1.
    assert after.attained_service - before >= 0.5
