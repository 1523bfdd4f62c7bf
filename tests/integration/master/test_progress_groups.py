"""Progress reports through a real master and fake workers, stored in groups: the reports of
many workers that arrive while a transaction is under way are stored together in the next
one, and each call is answered once the transaction holding its report committed."""

from __future__ import annotations

import threading
from collections.abc import Callable

from master.daemon import Master
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Cluster
from tests.integration.master.fakes import FakeWorker, wait_for


def report_together(
    master: Master, workers: list[FakeWorker], report: Callable[[int], None]
) -> None:
    """Each worker's `report(index)` at once, while the job lock is held (as a round's
    write holds it): the first report's transaction waits for the lock and the others
    queue behind it, to be stored together."""
    threads = [threading.Thread(target=report, args=(i,)) for i in range(len(workers))]
    with master.tx.job_lock:
        for thread in threads:
            thread.start()
        wait_for(
            lambda: master.jobs.progress_queued == len(workers) - 1,
            what=f"{len(workers) - 1} reports queued",
        )
    for thread in threads:
        thread.join(timeout=20)


def test_reports_arriving_during_a_commit_are_stored_in_one_transaction(cluster: Cluster) -> None:
    """Eight workers report at once while the master's job lock is held (as a round's
    write holds it): the first report's transaction waits for the lock, the other seven
    queue behind it and are stored together in one transaction; every call is answered
    as current (no stale lease) and every job's count is the one its worker reported."""
    master = cluster.master()
    workers = [cluster.worker(master, f"n{i}", num_gpus=1) for i in range(8)]
    api = cluster.api(master)
    spec = common_pb2.JobSpec(
        name="steady",
        num_gpus=1,
        iterations=100_000,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )
    jobs = [api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job.id for _ in workers]
    master.run_round()
    wait_for(lambda: all(len(w.running_jobs()) == 1 for w in workers), what="one job per worker")
    before = master.jobs.progress_groups

    answers: dict[str, list[bool]] = {}

    def report(index: int) -> None:
        worker = workers[index]
        (job_id,) = worker.running_jobs()
        response = worker.progress(job_id, 100 + index)
        answers[worker.name] = [ack.stale for ack in response.acks]

    report_together(master, workers, report)

    after = master.jobs.progress_groups
    assert (after.groups - before.groups, after.items - before.items) == (2, 8)
    assert after.largest >= 7
    assert all(stale == [False] for stale in answers.values()) and len(answers) == 8
    done = {
        j.id: j.iterations_done
        for j in api.ListJobs(hadar_pb2.ListJobsRequest()).jobs
        if j.id in jobs
    }
    reported = {next(iter(w.running_jobs())): 100 + i for i, w in enumerate(workers)}
    assert done == reported


def test_a_group_mixing_counters_first_reports_and_completions_stores_each(
    cluster: Cluster,
) -> None:
    """In one transaction: reports that only move running jobs' counters, first reports
    (their tasks start running) and reports that reach their jobs' iterations (those
    complete): each job ends as its own report says, every call answered as current."""
    master = cluster.master()
    workers = [cluster.worker(master, f"n{i}", num_gpus=1) for i in range(8)]
    api = cluster.api(master)
    spec = common_pb2.JobSpec(
        name="mixed",
        num_gpus=1,
        iterations=1000,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )
    for _ in workers:
        api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec))
    master.run_round()
    wait_for(lambda: all(len(w.running_jobs()) == 1 for w in workers), what="one job per worker")
    job_of = {w.name: next(iter(w.running_jobs())) for w in workers}
    for worker in workers[:6]:
        worker.progress(job_of[worker.name], 100)
    before = master.jobs.progress_groups
    # n0-n3 move counters, n4-n5 finish their jobs, n6-n7 report for the first time.
    counts = [500, 500, 500, 500, 1000, 1000, 300, 300]
    answers: dict[str, list[bool]] = {}

    def report(index: int) -> None:
        worker = workers[index]
        response = worker.progress(job_of[worker.name], counts[index])
        answers[worker.name] = [ack.stale for ack in response.acks]

    report_together(master, workers, report)

    after = master.jobs.progress_groups
    assert (after.groups - before.groups, after.items - before.items) == (2, 8)
    assert all(stale == [False] for stale in answers.values()) and len(answers) == 8
    for index, worker in enumerate(workers):
        job = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_of[worker.name])).job
        assert job.iterations_done == counts[index]
        if counts[index] == 1000:
            assert job.state == common_pb2.JOB_STATE_COMPLETED
        else:
            assert job.state == common_pb2.JOB_STATE_RUNNING
            assert job.tasks[0].state == common_pb2.TASK_STATE_RUNNING
