"""Job control through a real master and fake workers: hold, release, requeue and update,
their refusals, and who may use them."""

from __future__ import annotations

import grpc
import pytest

from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for


def spec(name: str = "train", num_gpus: int = 1, iterations: int = 100) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=name,
        num_gpus=num_gpus,
        iterations=iterations,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )


def get(api: Api, job_id: int) -> hadar_pb2.GetJobResponse:
    response: hadar_pb2.GetJobResponse = api.GetJob(
        hadar_pb2.GetJobRequest(job_id=job_id, include_events=True)
    )
    return response


def refused(call: object, code: grpc.StatusCode) -> str:
    assert callable(call)
    with pytest.raises(grpc.RpcError) as error:
        call()
    assert error.value.code() == code, error.value.details()
    details = str(error.value.details())
    return details


def test_held_submission_never_starts_until_released(cluster: Cluster) -> None:
    """A job submitted held is skipped by rounds, says who holds it and how to release it,
    and starts in the round after its release."""
    master = cluster.master()
    cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(), hold=True)).job
    assert job.held_by == "alice"
    assert job.reason == f"held by alice (hctl release {job.id} to let it run)"
    assert master.run_round().started == ()
    assert get(alice, job.id).job.state == common_pb2.JOB_STATE_PENDING
    released = alice.ReleaseJob(hadar_pb2.ReleaseJobRequest(job_id=job.id)).job
    assert released.held_by == ""
    # Releasing again changes nothing.
    assert alice.ReleaseJob(hadar_pb2.ReleaseJobRequest(job_id=job.id)).job.version == (
        released.version
    )
    assert master.run_round().started == (job.id,)
    kinds = [e.kind for e in get(alice, job.id).events]
    assert kinds == ["submitted", "released", "scheduled"]


def test_hold_a_pending_job_and_refusals(cluster: Cluster) -> None:
    """A pending job can be held (idempotently) by its owner; another user is refused
    naming the owner; a running job is refused naming `hctl requeue --hold`; a hold an
    admin put on the job only an admin may release."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    bob = cluster.api(master, "bob", admin=False)
    admin = cluster.api(master, "root", admin=True)
    waiting = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("w"))).job
    held = alice.HoldJob(hadar_pb2.HoldJobRequest(job_id=waiting.id, reason="later")).job
    assert held.held_by == "alice" and "hctl release" in held.reason
    assert alice.HoldJob(hadar_pb2.HoldJobRequest(job_id=waiting.id)).job.version == held.version
    for call in (
        lambda: bob.HoldJob(hadar_pb2.HoldJobRequest(job_id=waiting.id)),
        lambda: bob.ReleaseJob(hadar_pb2.ReleaseJobRequest(job_id=waiting.id)),
        lambda: bob.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=waiting.id)),
        lambda: bob.UpdateJob(hadar_pb2.UpdateJobRequest(job_id=waiting.id, priority=2)),
    ):
        assert "belongs to alice" in refused(call, grpc.StatusCode.PERMISSION_DENIED)
    assert master.run_round().started == ()

    alice.ReleaseJob(hadar_pb2.ReleaseJobRequest(job_id=waiting.id))
    assert master.run_round().started == (waiting.id,)
    wait_for(lambda: waiting.id in worker.running_jobs(), what="START")
    message = refused(
        lambda: alice.HoldJob(hadar_pb2.HoldJobRequest(job_id=waiting.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert f"hctl requeue --hold {waiting.id}" in message

    other = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("o"))).job
    admin.HoldJob(hadar_pb2.HoldJobRequest(job_id=other.id))
    message = refused(
        lambda: alice.ReleaseJob(hadar_pb2.ReleaseJobRequest(job_id=other.id)),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert "admin root" in message
    assert admin.ReleaseJob(hadar_pb2.ReleaseJobRequest(job_id=other.id)).job.held_by == ""


def test_requeue_running_job_stops_it_with_checkpoint_and_resumes(cluster: Cluster) -> None:
    """Requeueing a running managed job commits PENDING, sends a checkpointing stop, keeps
    the job out of rounds until that run exited, then starts it again from its checkpoint;
    a retried requeue changes nothing; with hold it stays held."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", auto_exit_on_stop=False)
    alice = cluster.api(master, "alice", admin=False)
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.progress(job.id, 40)

    requeued = alice.RequeueJob(
        hadar_pb2.RequeueJobRequest(job_id=job.id, reason="new data", hold=True)
    ).job
    assert requeued.state == common_pb2.JOB_STATE_PENDING
    assert requeued.requeues == 1 and requeued.held_by == "alice"
    stop = wait_for(
        lambda: next((s for s in worker.stops if s.job_id == job.id), None), what="StopTask"
    )
    # The stop's `hadar:` line says the job is requeued and resumes from its checkpoint.
    assert stop.checkpoint and stop.resumes
    assert stop.reason == "requeued and held by alice: new data"
    again = alice.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=job.id)).job
    assert again.version == requeued.version and again.requeues == 1
    alice.ReleaseJob(hadar_pb2.ReleaseJobRequest(job_id=job.id))
    # Its previous run has not exited: not placed again yet.
    assert master.run_round().started == ()
    assert "previous run" in get(alice, job.id).job.reason
    assert worker.exit(job.id, common_pb2.EXIT_KIND_STOPPED).accepted
    assert master.run_round().started == (job.id,)
    restart = wait_for(
        lambda: [a for a in worker.applied if a.job_id == job.id][1:], what="second START"
    )
    assert restart[0].iterations_done == 40
    # The stop wrote the requeue into the last attempt's output: the new one adds no line.
    assert restart[0].reason == ""
    events = get(alice, job.id).events
    requeue = next(e for e in events if e.kind == "requeued")
    assert requeue.reason == "requeued and held by alice: new data"
    assert requeue.from_state == common_pb2.JOB_STATE_RUNNING


def test_requeue_ended_jobs_and_completed_refusal(cluster: Cluster) -> None:
    """A cancelled managed job is requeued keeping its checkpointed iterations, and its new
    attempt's START carries the `hadar:` line's reason (who requeued it, what it had ended
    as, why; the worker adds the checkpoint it resumes from); a COMPLETED job is refused
    with a clear message."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.progress(job.id, 30)
    alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id))
    wait_for(lambda: job.id not in worker.running_jobs(), what="stopped")
    requeued = alice.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=job.id, reason="oops")).job
    assert requeued.state == common_pb2.JOB_STATE_PENDING
    assert requeued.iterations_done == 30 and requeued.checkpoint_iterations == 30
    assert not requeued.HasField("finished_at")
    wait_for(lambda: master.run_round().started == (job.id,), what="placed again")
    wait_for(lambda: job.id in worker.running_jobs(), what="START again")
    restart = [a for a in worker.applied if a.job_id == job.id][-1]
    assert restart.iterations_done == 30
    assert restart.reason == "requeued by alice after it ended CANCELLED: oops"
    worker.progress(job.id, 100)
    assert get(alice, job.id).job.state == common_pb2.JOB_STATE_COMPLETED
    message = refused(
        lambda: alice.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=job.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "COMPLETED" in message and "cannot be requeued" in message


def test_an_admin_requeue_of_a_failed_job_names_the_admin_and_forgets_older_causes(
    cluster: Cluster,
) -> None:
    """A job that failed after using its retries, requeued by an admin: its new attempt's
    START says an admin requeued it after it ended FAILED (not the last retry's cause),
    and resumes from its checkpoint."""
    master = cluster.master(max_retries=1)
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    admin = cluster.api(master, "root", admin=True)
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.progress(job.id, 20)
    worker.exit(job.id, common_pb2.EXIT_KIND_FAILED, exit_code=1)
    wait_for(lambda: master.run_round().started == (job.id,), what="the retry placed")
    wait_for(lambda: job.id in worker.running_jobs(), what="the retry's START")
    retry = [a for a in worker.applied if a.job_id == job.id][-1]
    assert retry.reason.startswith("requeued after "), retry.reason
    worker.exit(job.id, common_pb2.EXIT_KIND_FAILED, exit_code=1)
    wait_for(lambda: get(alice, job.id).job.state == common_pb2.JOB_STATE_FAILED, what="FAILED")
    admin.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=job.id))
    wait_for(lambda: master.run_round().started == (job.id,), what="placed again")
    wait_for(lambda: job.id in worker.running_jobs(), what="START after the requeue")
    restart = [a for a in worker.applied if a.job_id == job.id][-1]
    assert restart.lease > retry.lease
    assert restart.reason == "requeued by root (admin) after it ended FAILED"
    assert restart.iterations_done == 20


def test_update_pending_and_running_jobs_within_limits(cluster: Cluster) -> None:
    """A waiting job's GPUs, name, priority and time limit change; every refusal names its
    field: a time limit above max_time_limit, a priority out of range, more GPUs than the
    cluster has, GPUs of a running job. Each change is in the job's history."""
    master = cluster.master(max_time_limit="1h")
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(num_gpus=2), hold=True)).job
    updated = alice.UpdateJob(
        hadar_pb2.UpdateJobRequest(
            job_id=job.id, num_gpus=1, name="smaller", priority=0.5, time_limit_s=600
        )
    ).job
    assert updated.spec.num_gpus == 1 and updated.spec.name == "smaller"
    assert updated.spec.priority == 0.5 and updated.spec.time_limit_s == 600
    for request, field in (
        (hadar_pb2.UpdateJobRequest(job_id=job.id, time_limit_s=7200), "time_limit_s"),
        (hadar_pb2.UpdateJobRequest(job_id=job.id, priority=5000), "priority"),
        (hadar_pb2.UpdateJobRequest(job_id=job.id, num_gpus=64), "num_gpus"),
        (
            hadar_pb2.UpdateJobRequest(
                job_id=job.id, allowed_gpu_types=hadar_pb2.GpuTypeList(types=["h100"])
            ),
            "allowed_gpu_types[0]",
        ),
    ):
        message = refused(lambda r=request: alice.UpdateJob(r), grpc.StatusCode.INVALID_ARGUMENT)
        assert message.startswith(f"{field}:"), message
    # Raising up to the cluster's maximum is allowed to the owner.
    alice.UpdateJob(hadar_pb2.UpdateJobRequest(job_id=job.id, time_limit_s=3600))
    alice.ReleaseJob(hadar_pb2.ReleaseJobRequest(job_id=job.id))
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    running = alice.UpdateJob(hadar_pb2.UpdateJobRequest(job_id=job.id, time_limit_s=1200)).job
    assert running.spec.time_limit_s == 1200
    message = refused(
        lambda: alice.UpdateJob(hadar_pb2.UpdateJobRequest(job_id=job.id, num_gpus=2)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert message.startswith("num_gpus:") and "requeue --hold" in message
    reasons = [e.reason for e in get(alice, job.id).events if e.kind == "updated"]
    assert reasons[0].startswith("updated by alice: name 'train' -> 'smaller'")
    assert "GPUs 2 -> 1" in reasons[0] and "time limit 01:00:00 -> 00:20:00" in reasons[-1]


def test_requeue_of_a_failed_job_and_of_a_whole_array(cluster: Cluster) -> None:
    """A FAILED job requeued gets its retries again; an array's id requeues every element
    that ended otherwise than COMPLETED and leaves the completed ones; an array whose
    elements all completed is refused."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    failing = alice.SubmitJob(
        hadar_pb2.SubmitJobRequest(
            spec=common_pb2.JobSpec(
                name="f",
                num_gpus=1,
                iterations=1,
                max_retries=0,
                command=common_pb2.CommandProgram(argv=["false"]),
            )
        )
    ).job
    master.run_round()
    wait_for(lambda: failing.id in worker.running_jobs(), what="START")
    worker.exit(failing.id, common_pb2.EXIT_KIND_FAILED, 1, "boom")
    assert get(alice, failing.id).job.state == common_pb2.JOB_STATE_FAILED
    again = alice.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=failing.id)).job
    assert again.state == common_pb2.JOB_STATE_PENDING and again.retries == 0

    array_spec = spec("sweep")
    array_spec.array = "0-2"
    head = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=array_spec)).job
    elements = [head.id, head.id + 1, head.id + 2]
    alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=elements[1]))
    alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=elements[2]))
    alice.HoldJob(hadar_pb2.HoldJobRequest(job_id=failing.id))
    master.run_round()
    wait_for(lambda: head.id in worker.running_jobs(), what="element 0 START")
    worker.progress(head.id, 100)
    worker.exit(head.id, common_pb2.EXIT_KIND_COMPLETED)
    assert get(alice, head.id).job.state == common_pb2.JOB_STATE_COMPLETED
    alice.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=head.id, whole_array=True))
    states = [get(alice, i).job.state for i in elements]
    assert states == [
        common_pb2.JOB_STATE_COMPLETED,
        common_pb2.JOB_STATE_PENDING,
        common_pb2.JOB_STATE_PENDING,
    ]
    # Only the element named, without whole_array: refused, it completed.
    refused(
        lambda: alice.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=head.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    master.run_round()
    wait_for(lambda: set(elements[1:]) <= worker.running_jobs(), what="the elements' START")
    for element in elements[1:]:
        worker.progress(element, 100)
    message = refused(
        lambda: alice.RequeueJob(hadar_pb2.RequeueJobRequest(job_id=head.id, whole_array=True)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert f"every element of array {head.id} COMPLETED" in message


def test_a_job_held_or_updated_while_a_round_plans_is_not_started_by_it(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hold or an update committed between a round's read and its store wins: that round
    does not start the job as it planned it; a later round starts the updated job once
    released."""
    from master.rounds import planner

    master = cluster.master()
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    held = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("held"))).job
    resized = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("resized", num_gpus=2))).job
    plan = planner.decide

    def decide_then_change(*args: object, **kwargs: object) -> object:
        decision = plan(*args, **kwargs)  # type: ignore[arg-type]
        alice.HoldJob(hadar_pb2.HoldJobRequest(job_id=held.id))
        alice.UpdateJob(hadar_pb2.UpdateJobRequest(job_id=resized.id, num_gpus=1))
        return decision

    monkeypatch.setattr(planner, "decide", decide_then_change)
    # The round planned both starts; it stores neither.
    assert set(master.run_round().started) == {held.id, resized.id}
    monkeypatch.setattr(planner, "decide", plan)
    for job in (held, resized):
        assert get(alice, job.id).job.state == common_pb2.JOB_STATE_PENDING
    assert not worker.applied
    assert master.run_round().started == (resized.id,)
    start = wait_for(
        lambda: next((a for a in worker.applied if a.job_id == resized.id), None), what="START"
    )
    assert len(start.gpu_indices) == 1


def test_update_dependencies_preemptibility_signal_and_notifications(cluster: Cluster) -> None:
    """A waiting job's dependencies are replaced (it waits for the new one, and runs once
    that completed), its preemptibility and warning signal change; its webhook and which
    ends notify change while it waits or runs. Refusals name their field: a dependency on
    a later job or on its own array, a webhook host the cluster does not allow, a warning
    signal that cannot be caught, and (FAILED_PRECONDITION) dependencies, preemptibility
    or signal of a running job. Each change is in the job's history."""
    master = cluster.master(webhook_allow_hosts="hooks.example.org")
    worker = cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    first = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("first"), hold=True)).job
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("second"))).job
    later = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec("later"), hold=True)).job
    array_spec = spec("sweep")
    array_spec.array = "0-1"
    sweep = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=array_spec)).job
    alice.HoldJob(hadar_pb2.HoldJobRequest(job_id=sweep.id, whole_array=True))

    updated = alice.UpdateJob(
        hadar_pb2.UpdateJobRequest(
            job_id=job.id,
            dependencies=hadar_pb2.DependencyList(after_ok=[first.id]),
            preemptible=False,
            warning=hadar_pb2.WarningSignal(signal=10, before_s=90),
            notify_url="https://hooks.example.org/t/1",
            notify_on=hadar_pb2.NotifyOn(states=[common_pb2.JOB_STATE_FAILED]),
        )
    ).job
    assert list(updated.spec.after_ok) == [first.id]
    assert not updated.spec.preemptible
    assert (updated.spec.warn_signal, updated.spec.warn_before_s) == (10, 90)
    assert list(updated.spec.notify_on) == [common_pb2.JOB_STATE_FAILED]
    # It waits for `first` now: not placed while `first` is held.
    assert master.run_round().started == ()
    assert f"waiting for job {first.id}" in get(alice, job.id).job.reason

    for request, field in (
        (
            hadar_pb2.UpdateJobRequest(
                job_id=job.id, dependencies=hadar_pb2.DependencyList(after_any=[later.id])
            ),
            "dependencies",
        ),
        (
            hadar_pb2.UpdateJobRequest(
                job_id=sweep.id + 1, dependencies=hadar_pb2.DependencyList(after_ok=[sweep.id])
            ),
            "dependencies",
        ),
        (hadar_pb2.UpdateJobRequest(job_id=job.id, notify_url="https://evil.test/x"), "notify_url"),
        (
            hadar_pb2.UpdateJobRequest(job_id=job.id, warning=hadar_pb2.WarningSignal(signal=9)),
            "warning",
        ),
    ):
        message = refused(lambda r=request: alice.UpdateJob(r), grpc.StatusCode.INVALID_ARGUMENT)
        assert message.startswith(f"{field}:"), message
    assert "submitted before it" in refused(
        lambda: alice.UpdateJob(
            hadar_pb2.UpdateJobRequest(
                job_id=job.id, dependencies=hadar_pb2.DependencyList(after_any=[later.id])
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )

    # No dependencies, no warning, preemptible again: it runs.
    cleared = alice.UpdateJob(
        hadar_pb2.UpdateJobRequest(
            job_id=job.id,
            dependencies=hadar_pb2.DependencyList(),
            preemptible=True,
            warning=hadar_pb2.WarningSignal(),
        )
    ).job
    assert list(cleared.spec.after_ok) == [] and cleared.spec.preemptible
    assert (cleared.spec.warn_signal, cleared.spec.warn_before_s) == (0, 0)
    assert master.run_round().started == (job.id,)
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    for request, field in (
        (
            hadar_pb2.UpdateJobRequest(
                job_id=job.id, dependencies=hadar_pb2.DependencyList(after_ok=[first.id])
            ),
            "dependencies",
        ),
        (hadar_pb2.UpdateJobRequest(job_id=job.id, preemptible=False), "preemptible"),
        (
            hadar_pb2.UpdateJobRequest(job_id=job.id, warning=hadar_pb2.WarningSignal(signal=10)),
            "warning",
        ),
    ):
        message = refused(lambda r=request: alice.UpdateJob(r), grpc.StatusCode.FAILED_PRECONDITION)
        assert message.startswith(f"{field}:") and "requeue --hold" in message, message
    # Notifications may change while it runs: the master tells them when it ends.
    quiet = alice.UpdateJob(
        hadar_pb2.UpdateJobRequest(job_id=job.id, notify_on=hadar_pb2.NotifyOn(none=True))
    ).job
    assert quiet.spec.no_notify and list(quiet.spec.notify_on) == []
    assert quiet.spec.notify_url == ""
    reasons = [e.reason for e in get(alice, job.id).events if e.kind == "updated"]
    assert f"dependencies none -> afterok:{first.id}" in reasons[0]
    assert "preemptible yes -> no" in reasons[0] and "signal none -> " in reasons[0]
    assert "webhook default -> https://hooks.example.org" in reasons[0]
    assert "notify on default -> failed" in reasons[0]
    assert reasons[-1] == (
        "updated by alice: webhook https://hooks.example.org -> default, notify on failed -> none"
    )
