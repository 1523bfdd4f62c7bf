"""Time limits and accounting through a real master, its database (SQLite and PostgreSQL)
and fake workers: TIMEOUT with a checkpoint, the cluster's maximum and default, usage
records of every attempt, GetUsage, ListJobHistory and the GPU-seconds metric."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from prometheus_client import generate_latest

from master.jobs.usage import run_seconds
from protos.hadar.v1 import common_pb2, hadar_pb2
from store.domain import Task
from store.states import TaskState
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for
from tests.integration.master.test_api import error_of


def workload(limit_s: int = 0, gpus: int = 1) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="train",
        num_gpus=gpus,
        iterations=1000,
        workload=common_pb2.WorkloadProgram(name="resnet"),
        time_limit_s=limit_s,
    )


def command(gpus: int = 2, limit_s: int = 0) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="prep",
        num_gpus=gpus,
        iterations=1,
        command=common_pb2.CommandProgram(argv=["bash", "prep.sh"]),
        time_limit_s=limit_s,
    )


def get(api: Api, job_id: int) -> common_pb2.Job:
    job: common_pb2.Job = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    return job


def test_a_job_at_its_time_limit_is_stopped_with_a_checkpoint_and_ends_timeout(
    cluster: Cluster,
) -> None:
    """Before its limit nothing happens; at it the job is TIMEOUT (stored first) with a
    reason naming the limit, its worker is asked to stop it gracefully so it checkpoints,
    and the checkpoint it reports on exit is kept. It is never placed again."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload(limit_s=30))).job
    assert job.spec.time_limit_s == 30
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START on the worker")
    worker.progress(job.id, 40)
    now = datetime.now(UTC)

    assert master.time_limits.check(now + timedelta(seconds=25)) == []
    assert get(api, job.id).state == common_pb2.JOB_STATE_RUNNING

    assert master.time_limits.check(now + timedelta(seconds=31)) == [job.id]
    stopped = get(api, job.id)
    assert stopped.state == common_pb2.JOB_STATE_TIMEOUT
    assert stopped.reason.startswith("time limit 00:00:30 reached after 00:00:3")
    assert stopped.HasField("finished_at")
    wait_for(lambda: any(s.job_id == job.id for s in worker.stops), what="the stop order")
    (stop,) = [s for s in worker.stops if s.job_id == job.id]
    assert stop.via == "StopTask" and stop.checkpoint
    assert stop.reason == stopped.reason
    # The fake worker exits STOPPED with what it had done, as a checkpointing worker does.
    wait_for(lambda: job.id not in worker.running_jobs(), what="the task to exit")
    wait_for(lambda: get(api, job.id).checkpoint_iterations == 40, what="the checkpoint")
    described = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id, include_events=True))
    assert described.job.state == common_pb2.JOB_STATE_TIMEOUT
    assert [e.kind for e in described.events][-1] == "timeout"
    assert described.job.run_seconds > 0
    assert master.run_round().started == ()


def test_an_extension_refused_after_the_time_limits_stop_leaves_the_task_to_its_exit(
    cluster: Cluster,
) -> None:
    """A round extends the running task, and before its push arrives the job reaches its
    time limit and the worker starts stopping the task; the worker refuses the extension.
    The task is not written off: it stays STOPPING, and its GPU time runs until the exit
    report that follows."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", auto_exit_on_stop=False)
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload(limit_s=30))).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START on the worker")
    worker.progress(job.id, 40)

    def task() -> Task:
        (only,) = master.tx.read(lambda uow: uow.tasks.for_job(job.id))
        return only

    first_round = task().round
    worker.freeze()
    pushing = threading.Thread(target=master.run_round)
    pushing.start()
    try:
        wait_for(lambda: task().round > first_round, what="the round's extension stored")
        assert master.time_limits.check(datetime.now(UTC) + timedelta(seconds=31)) == [job.id]
        worker.refuse_extends[job.id] = f"no running task of job {job.id} to extend"
    finally:
        worker.thaw()
        pushing.join(timeout=30)
    assert not pushing.is_alive()
    wait_for(lambda: any(s.job_id == job.id for s in worker.stops), what="the stop order")
    assert task().state is TaskState.STOPPING
    assert get(api, job.id).state == common_pb2.JOB_STATE_TIMEOUT

    before_exit = datetime.now(UTC)
    assert worker.exit(job.id, common_pb2.EXIT_KIND_STOPPED).accepted
    ended = task()
    assert ended.state is TaskState.EXITED
    (record,) = master.tx.read(lambda uow: uow.usage.ended(job_ids=[job.id]))
    assert record.ended_at is not None and record.ended_at >= before_exit


def test_run_time_of_earlier_attempts_counts_against_the_limit(cluster: Cluster) -> None:
    """A preempted job that already ran past its limit ends TIMEOUT without being placed
    again; queue time does not count. The queue (ListJobs) gives the same run time as
    GetJob, and none for a job that never ran."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload(limit_s=60))).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.progress(job.id, 5)
    # The worker stops it by itself (its lease ran out): the job waits, PREEMPTED.
    worker.exit(job.id, common_pb2.EXIT_KIND_LEASE_DONE)
    assert get(api, job.id).state == common_pb2.JOB_STATE_PREEMPTED
    ran = get(api, job.id).run_seconds
    assert 0 < ran < 60
    never = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload(), hold=True)).job
    listed = {j.id: j.run_seconds for j in api.ListJobs(hadar_pb2.ListJobsRequest()).jobs}
    assert listed == {job.id: ran, never.id: 0.0}
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=never.id))
    now = datetime.now(UTC)
    # Hours queued later do not make it run out...
    assert master.time_limits.check(now + timedelta(hours=3)) == []
    # ...but a second attempt continues the same budget.
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="the second START")
    worker.progress(job.id, 10)
    # The limit falls when the second attempt has run what the first left of the 60 s,
    # counted from that attempt's start as stored (however long it took to come); the
    # checks on either side of it are closer to it than the first attempt's run time, so
    # a limit that forgot that attempt would fail the second.
    records = master.tx.read(lambda uow: uow.usage.for_jobs([job.id]))
    started = min(r.started_at for r in records if r.ended_at is None)
    earlier = run_seconds([r for r in records if r.ended_at is not None], started)
    assert 0 < earlier < 60
    limit_at = started + timedelta(seconds=60 - earlier)
    margin = timedelta(seconds=earlier / 2)
    assert master.time_limits.check(limit_at - margin) == []
    assert master.time_limits.check(limit_at + margin) == [job.id]
    assert get(api, job.id).state == common_pb2.JOB_STATE_TIMEOUT


def test_an_opaque_command_at_its_limit_is_terminated_and_ends_timeout(cluster: Cluster) -> None:
    """A command is stopped by the same graceful stop (SIGTERM, then SIGKILL after the
    grace on a real worker) and ends TIMEOUT, its exit code kept from its exit report."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    worker.auto_exit_on_stop = False
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=command(gpus=1, limit_s=10))).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    assert master.time_limits.check(datetime.now(UTC) + timedelta(seconds=11)) == [job.id]
    wait_for(lambda: any(s.job_id == job.id for s in worker.stops), what="the stop order")
    assert [s.checkpoint for s in worker.stops if s.job_id == job.id] == [True]
    worker.exit(job.id, common_pb2.EXIT_KIND_STOPPED, exit_code=143)
    got = get(api, job.id)
    assert got.state == common_pb2.JOB_STATE_TIMEOUT
    history = api.ListJobHistory(hadar_pb2.ListJobHistoryRequest()).entries
    assert [(e.job.id, e.job.state) for e in history] == [(job.id, common_pb2.JOB_STATE_TIMEOUT)]


def test_time_limits_above_the_cluster_maximum_are_refused_and_the_default_applies(
    cluster: Cluster,
) -> None:
    """Over max_time_limit: INVALID_ARGUMENT on spec.time_limit_s naming the maximum, and
    nothing stored; no limit asked: the cluster's default_time_limit."""
    master = cluster.master(max_time_limit="2h", default_time_limit="30m")
    cluster.worker(master, "n1")
    api = cluster.api(master)
    error = error_of(
        lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload(limit_s=3 * 3600)))
    )
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.trailing.get("x-hadar-field") == "spec.time_limit_s"
    assert "above the cluster's maximum max_time_limit = 02:00:00" in error.details
    assert list(api.ListJobs(hadar_pb2.ListJobsRequest()).jobs) == []
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload())).job
    assert job.spec.time_limit_s == 1800
    exact = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload(limit_s=7200))).job
    assert exact.spec.time_limit_s == 7200


def test_a_command_jobs_gpu_seconds_are_recorded_and_reported(cluster: Cluster) -> None:
    """A 2-GPU command that never reports progress still gets its GPU-seconds (2 x its run
    time) and attained service when it ends; GetUsage by user and by type, GetJob and
    ListJobHistory (with its exit code) agree, and the metric counts them."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", gpu_type="k80")
    api = cluster.api(master, user="alice")
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=command(gpus=2))).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    wait_for(lambda: get(api, job.id).gpu_seconds > 0, what="the attempt to count")
    worker.exit(job.id, common_pb2.EXIT_KIND_FAILED, exit_code=3)
    done = get(api, job.id)
    assert done.state == common_pb2.JOB_STATE_FAILED and done.exit_code == 3
    assert done.gpu_seconds == pytest.approx(2 * done.run_seconds)
    assert done.gpu_seconds > 0 and done.attained_service > 0

    usage = api.GetUsage(hadar_pb2.GetUsageRequest())
    assert [(r.key, r.jobs, r.attempts) for r in usage.rows] == [("alice", 1, 1)]
    assert usage.total_gpu_seconds == pytest.approx(done.gpu_seconds)
    by_type = api.GetUsage(hadar_pb2.GetUsageRequest(by=hadar_pb2.USAGE_GROUPING_GPU_TYPE))
    assert [r.key for r in by_type.rows] == ["k80"]
    assert api.GetUsage(hadar_pb2.GetUsageRequest(user="bob")).rows == []

    (entry,) = api.ListJobHistory(hadar_pb2.ListJobHistoryRequest(user="alice")).entries
    assert entry.job.id == job.id and entry.job.exit_code == 3
    assert entry.gpu_seconds == pytest.approx(done.gpu_seconds)
    assert (entry.attempts, list(entry.gpu_types)) == (1, ["k80"])

    metrics = generate_latest(master.metrics.registry).decode()
    line = next(m for m in metrics.splitlines() if m.startswith("hadar_gpu_seconds_total{"))
    assert 'gpu_type="k80"' in line and 'user="alice"' in line
    assert float(line.split()[-1]) == pytest.approx(done.gpu_seconds)


def test_usage_counts_running_jobs_up_to_now_and_only_inside_the_period(
    cluster: Cluster,
) -> None:
    """A running attempt counts up to now; a period before it started has nothing; since
    after until is INVALID_ARGUMENT on since."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload(gpus=2))).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.progress(job.id, 3)
    first = api.GetUsage(hadar_pb2.GetUsageRequest()).total_gpu_seconds
    wait_for(
        lambda: api.GetUsage(hadar_pb2.GetUsageRequest()).total_gpu_seconds > first,
        what="usage to grow while the job runs",
    )
    request = hadar_pb2.GetUsageRequest()
    request.since.FromDatetime(datetime.now(UTC) - timedelta(days=3))
    request.until.FromDatetime(datetime.now(UTC) - timedelta(days=2))
    assert api.GetUsage(request).rows == []
    backwards = hadar_pb2.GetUsageRequest()
    backwards.since.FromDatetime(datetime.now(UTC))
    backwards.until.FromDatetime(datetime.now(UTC) - timedelta(days=1))
    error = error_of(lambda: api.GetUsage(backwards))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.trailing.get("x-hadar-field") == "since"


def test_history_lists_only_ended_jobs_and_refuses_active_states(cluster: Cluster) -> None:
    """ListJobHistory skips active jobs, filters by state, pages newest first, and an
    active state in the filter is INVALID_ARGUMENT naming it."""
    master = cluster.master()
    cluster.worker(master, "n1")
    api = cluster.api(master)
    ids = [api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=workload())).job.id for _ in range(4)]
    for job_id in ids[:3]:
        api.CancelJob(hadar_pb2.CancelJobRequest(job_id=job_id))
    first = api.ListJobHistory(hadar_pb2.ListJobHistoryRequest(page_size=2))
    assert [e.job.id for e in first.entries] == [ids[2], ids[1]]
    rest = api.ListJobHistory(
        hadar_pb2.ListJobHistoryRequest(page_size=2, page_token=first.next_page_token)
    )
    assert [e.job.id for e in rest.entries] == [ids[0]] and rest.next_page_token == ""
    assert all(e.gpu_seconds == 0 and e.attempts == 0 for e in first.entries)
    timeouts = hadar_pb2.ListJobHistoryRequest(states=[common_pb2.JOB_STATE_TIMEOUT])
    assert list(api.ListJobHistory(timeouts).entries) == []
    bad = hadar_pb2.ListJobHistoryRequest(states=[common_pb2.JOB_STATE_PENDING])
    error = error_of(lambda: api.ListJobHistory(bad))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.trailing.get("x-hadar-field") == "states[0]"
    assert "JOB_STATE_PENDING is not a state a job ends in" in error.details
