"""Webhooks when jobs end, through a real master, its database (SQLite and PostgreSQL), fake
workers and a real HTTP endpoint on 127.0.0.1: delivery on every end state, retries with
backoff, giving up, dead endpoints that must not slow rounds, the outbox across a restart,
users' defaults against a job's own webhook, and refused URLs."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from master.daemon import Master
from master.jobs.webhooks import post_json
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for
from tests.integration.master.receiver import Receiver, black_hole, closed_port, receiver
from tests.integration.master.test_api import error_of

FAST = {
    "webhook_poll_s": 0.05,
    "webhook_backoff_s": 0.05,
    "webhook_backoff_max_s": 0.2,
    "webhook_timeout_s": 2.0,
}


def workload(
    url: str = "", on: tuple[common_pb2.JobState, ...] = (), limit_s: int = 0
) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="sweep-7",
        num_gpus=1,
        iterations=1000,
        workload=common_pb2.WorkloadProgram(name="resnet"),
        notify_url=url,
        notify_on=list(on),
        time_limit_s=limit_s,
    )


def submit(api: Api, spec: common_pb2.JobSpec) -> common_pb2.Job:
    job: common_pb2.Job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job
    return job


def deliveries(api: Api, job_id: int) -> list[hadar_pb2.NotificationDelivery]:
    return list(api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).notifications)


def start(master: Master, worker: FakeWorker, job_id: int) -> None:
    master.run_round()
    wait_for(lambda: job_id in worker.running_jobs(), what=f"job {job_id} to start")


def running(worker: FakeWorker, job_id: int) -> bool:
    return job_id in worker.running_jobs()


def delivered(api: Api, job_id: int) -> bool:
    return [d.status for d in deliveries(api, job_id)] == [hadar_pb2.DELIVERY_STATUS_DELIVERED]


def metric(master: Master, outcome: str) -> float:
    text = generate_latest(master.metrics.registry).decode()
    prefix = f'hadar_webhook_deliveries_total{{outcome="{outcome}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


def test_completed_failed_and_timed_out_jobs_are_posted_with_a_signed_summary(
    cluster: Cluster,
) -> None:
    """A job that completes, one that fails and one stopped at its time limit each get one
    POST with their id, name, user, state, reason, exit code, times, run time, GPU-hours
    and a plain summary text; with a secret set the body carries a valid HMAC-SHA256
    signature, and GetJob reports each delivery DELIVERED."""
    with receiver() as hook:
        master = cluster.master(webhook_secret="s3cret", **FAST)
        worker = cluster.worker(master, "n1")
        api = cluster.api(master)
        done = submit(api, workload(hook.url("/done")))
        failing = workload(hook.url("/failed"))
        failing.max_retries = 0
        failed = submit(api, failing)
        slow = submit(api, workload(hook.url("/timeout"), limit_s=30))
        master.run_round()
        for job in (done, failed, slow):
            wait_for(partial(running, worker, job.id), what=f"job {job.id}")
        # Short of its last iteration: a job completed by its final progress report is
        # notified at once, before its process's exit (and exit code) can be reported.
        worker.progress(done.id, 500)
        worker.exit(done.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        worker.exit(failed.id, common_pb2.EXIT_KIND_FAILED, exit_code=3)
        assert master.time_limits.check(datetime.now(UTC) + timedelta(seconds=31)) == [slow.id]

        for job in (done, failed, slow):
            wait_for(partial(delivered, api, job.id), what=f"job {job.id} delivered")
        by_path = {r.path: r for r in hook.calls()}
        assert sorted(by_path) == ["/done", "/failed", "/timeout"]
        assert len(hook.calls()) == 3

        body = by_path["/done"].json
        assert body["job_id"] == done.id and body["name"] == "sweep-7" and body["user"] == "alice"
        assert body["state"] == "COMPLETED" and body["exit_code"] == 0
        assert body["started_at"] and body["finished_at"] and body["submitted_at"]
        assert body["run_seconds"] > 0 and body["gpu_hours"] > 0
        assert body["text"].startswith(f"Hadar job {done.id} (sweep-7) of alice ended COMPLETED")
        failed_body = by_path["/failed"].json
        assert failed_body["state"] == "FAILED" and failed_body["exit_code"] == 3
        assert "exit code 3" in failed_body["text"]
        timeout_body = by_path["/timeout"].json
        assert timeout_body["state"] == "TIMEOUT"
        assert timeout_body["reason"].startswith("time limit 00:00:30 reached")

        for item in hook.calls():
            expected = hmac.new(b"s3cret", item.body, hashlib.sha256).hexdigest()
            assert item.headers["X-Hadar-Signature"] == f"sha256={expected}"
            assert item.headers["Content-Type"] == "application/json"
            assert item.headers["X-Hadar-Delivery"] == str(item.json["delivery_id"])
        (status,) = deliveries(api, done.id)
        assert status.attempts == 1 and status.last_error == ""
        assert status.endpoint == f"http://127.0.0.1:{hook.port}"
        assert status.job_state == common_pb2.JOB_STATE_COMPLETED
        assert status.HasField("delivered_at")
        assert metric(master, "delivered") == 3


def test_a_failing_endpoint_is_retried_with_backoff_until_it_answers(cluster: Cluster) -> None:
    """Two 500 answers, then 200: three attempts, each later than the previous by at least
    the backoff (doubling), the delivery ends DELIVERED with every attempt recorded."""
    with receiver([500, 500, 200]) as hook:
        master = cluster.master(**{**FAST, "webhook_backoff_s": 0.3, "webhook_backoff_max_s": 5})
        worker = cluster.worker(master, "n1")
        api = cluster.api(master)
        job = submit(api, workload(hook.url()))
        start(master, worker, job.id)
        worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        wait_for(lambda: delivered(api, job.id), what="the delivery")
        calls = hook.calls()
        assert len(calls) == 3
        assert calls[1].at - calls[0].at >= 0.3
        assert calls[2].at - calls[1].at >= 0.6
        assert {c.json["delivery_id"] for c in calls} == {calls[0].json["delivery_id"]}
        (status,) = deliveries(api, job.id)
        assert status.attempts == 3 and status.last_error == ""
        assert metric(master, "retrying") == 2 and metric(master, "delivered") == 1


def test_an_endpoints_retry_after_is_honoured(cluster: Cluster) -> None:
    """A 503 with Retry-After: 1 delays the next attempt by a second, not the 0.05 s
    backoff."""
    with receiver([503, 200]) as hook:
        hook.retry_after = "1"
        master = cluster.master(**{**FAST, "webhook_backoff_max_s": 5})
        worker = cluster.worker(master, "n1")
        api = cluster.api(master)
        job = submit(api, workload(hook.url()))
        start(master, worker, job.id)
        worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        wait_for(partial(delivered, api, job.id), what="the delivery")
        first, second = hook.calls()
        assert second.at - first.at >= 1.0


def test_delivery_gives_up_after_the_last_attempt_and_says_why(cluster: Cluster) -> None:
    """An endpoint that always answers 503 gets exactly webhook_max_attempts calls; the
    delivery is GAVE_UP with the last error, and nothing is tried after that."""
    with receiver([503]) as hook:
        master = cluster.master(**FAST, webhook_max_attempts=3)
        worker = cluster.worker(master, "n1")
        api = cluster.api(master)
        job = submit(api, workload(hook.url()))
        start(master, worker, job.id)
        worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        wait_for(
            lambda: (
                [d.status for d in deliveries(api, job.id)] == [hadar_pb2.DELIVERY_STATUS_GAVE_UP]
            ),
            what="the delivery to give up",
        )
        (status,) = deliveries(api, job.id)
        assert status.attempts == 3
        assert status.last_error.startswith("HTTP 503")
        assert not status.HasField("next_attempt_at")
        # A pass after giving up finds nothing due.
        assert master.webhooks.deliver_due(wait=True) == 0
        assert len(hook.calls()) == 3
        assert metric(master, "gave_up") == 1 and metric(master, "retrying") == 2


def test_a_client_error_is_not_retried(cluster: Cluster) -> None:
    """A 404 (a deleted chat webhook) cannot succeed later: one attempt, then GAVE_UP."""
    with receiver([404]) as hook:
        master = cluster.master(**FAST)
        worker = cluster.worker(master, "n1")
        api = cluster.api(master)
        job = submit(api, workload(hook.url()))
        start(master, worker, job.id)
        worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        wait_for(
            lambda: (
                [d.status for d in deliveries(api, job.id)] == [hadar_pb2.DELIVERY_STATUS_GAVE_UP]
            ),
            what="the delivery to give up",
        )
        assert len(hook.calls()) == 1
        assert deliveries(api, job.id)[0].last_error.startswith("HTTP 404")


def test_hung_and_dead_endpoints_do_not_slow_rounds(cluster: Cluster) -> None:
    """While one webhook's endpoint accepts the connection and never answers and another's
    port refuses it, rounds still finish quickly and a third job's webhook on a live
    endpoint is delivered; the hung call ends at its timeout and is retried."""
    with black_hole() as hung_port, receiver() as hook:
        slow_retries = {"webhook_backoff_s": 10, "webhook_backoff_max_s": 10}
        master = cluster.master(**{**FAST, "webhook_timeout_s": 3.0, **slow_retries})
        worker = cluster.worker(master, "n1")
        api = cluster.api(master)
        hung = submit(api, workload(f"http://127.0.0.1:{hung_port}/hook"))
        dead = submit(api, workload(f"http://127.0.0.1:{closed_port()}/hook"))
        master.run_round()
        for job in (hung, dead):
            wait_for(partial(running, worker, job.id), what=f"job {job.id}")
            worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        wait_for(
            lambda: deliveries(api, dead.id) and deliveries(api, dead.id)[0].attempts == 1,
            what="the refused attempt",
        )
        assert deliveries(api, dead.id)[0].last_error.startswith("could not connect")
        # The hung call is in flight now; rounds meanwhile.
        assert deliveries(api, hung.id)[0].attempts == 0
        live = submit(api, workload(hook.url()))
        began = time.monotonic()
        master.run_round()
        wait_for(lambda: live.id in worker.running_jobs(), what="the live job to start")
        for _ in range(5):
            round_began = time.monotonic()
            master.run_round()
            assert time.monotonic() - round_began < 1.0
        worker.exit(live.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        wait_for(lambda: delivered(api, live.id), what="the live endpoint's delivery")
        assert time.monotonic() - began < 3.0, "the live delivery waited for the hung one"
        assert deliveries(api, hung.id)[0].status == hadar_pb2.DELIVERY_STATUS_PENDING
        wait_for(lambda: deliveries(api, hung.id)[0].attempts == 1, timeout=10, what="the timeout")
        status = deliveries(api, hung.id)[0]
        assert status.last_error == "no answer within 3s"
        assert status.status == hadar_pb2.DELIVERY_STATUS_PENDING
        assert status.HasField("next_attempt_at")


def test_scheduled_rounds_keep_their_period_while_a_webhook_hangs(cluster: Cluster) -> None:
    """With rounds every 0.2 s and a webhook call hanging for up to 5 s, the scheduler
    still completes five rounds, each within its period, before the hung call times out."""
    with black_hole() as hung_port:
        # The lease must outlast the heartbeat timeout and the rounds around it.
        master = cluster.master(
            **{**FAST, "round_seconds": 0.2, "lease_rounds": 1000, "webhook_timeout_s": 5.0}
        )
        worker = cluster.worker(master, "n1")
        api = cluster.api(master)
        job = submit(api, workload(f"http://127.0.0.1:{hung_port}/hook"))
        wait_for(partial(running, worker, job.id), what="the job to start")
        worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        wait_for(lambda: deliveries(api, job.id), what="the outbox row")
        began = time.monotonic()
        first = master.tx.read(lambda uow: uow.rounds.last())
        assert first is not None
        last = wait_for(
            lambda: (
                (r := master.tx.read(lambda uow: uow.rounds.last())) is not None
                and r.number >= first.number + 5
                and r
            ),
            timeout=5,
            what="five more rounds",
        )
        assert time.monotonic() - began < 2.5
        assert last.duration_s < 0.2
        # Still in flight: the rounds did not wait for it.
        (status,) = deliveries(api, job.id)
        assert status.attempts == 0 and status.status == hadar_pb2.DELIVERY_STATUS_PENDING


def test_calls_owed_when_the_master_stopped_are_delivered_after_its_restart(
    cluster: Cluster,
) -> None:
    """A job ends while the sender is not running (as if the master died right after the
    commit): its call is stored, not sent; a new master on the same database sends it."""
    with receiver() as hook:
        master = cluster.master(**FAST)
        worker = cluster.worker(master, "n1")
        api = cluster.api(master)
        job = submit(api, workload(hook.url()))
        start(master, worker, job.id)
        master.webhooks.stop()
        worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        wait_for(lambda: deliveries(api, job.id), what="the outbox row")
        assert deliveries(api, job.id)[0].status == hadar_pb2.DELIVERY_STATUS_PENDING
        master.stop(grace=0.5)
        assert hook.calls() == []

        again = cluster.master(**FAST)
        api2 = cluster.api(again)
        wait_for(lambda: delivered(api2, job.id), what="the delivery after the restart")
        (call,) = hook.calls()
        assert call.json["job_id"] == job.id and call.json["state"] == "COMPLETED"


def test_a_users_default_webhook_serves_jobs_without_their_own(cluster: Cluster) -> None:
    """With a default set, a job naming no webhook notifies the default and one naming its
    own notifies only that; a cancellation notifies nobody by default but does for a job
    that asked for CANCELLED; a job with no_notify is not notified (and may not also name a
    webhook); clearing the default stops it."""
    with receiver() as hook:
        master = cluster.master(**FAST)
        worker = cluster.worker(master, "n1")
        api = cluster.api(master, "bob", admin=False)
        set_response = api.SetNotifyDefault(
            hadar_pb2.SetNotifyDefaultRequest(url=hook.url("/default"))
        )
        assert set_response.configured and set_response.user == "bob"
        assert list(set_response.on) == [
            common_pb2.JOB_STATE_COMPLETED,
            common_pb2.JOB_STATE_FAILED,
            common_pb2.JOB_STATE_TIMEOUT,
        ]
        shown = api.GetNotifyDefault(hadar_pb2.GetNotifyDefaultRequest())
        assert shown.url == hook.url("/default")

        plain = submit(api, workload())
        own = submit(api, workload(hook.url("/own")))
        cancelled = submit(api, workload())
        wants_cancel = submit(api, workload(on=(common_pb2.JOB_STATE_CANCELLED,)))
        master.run_round()
        for job in (plain, own):
            wait_for(partial(running, worker, job.id), what=f"job {job.id}")
            worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
        for job in (cancelled, wants_cancel):
            api.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id))
        for job in (plain, own, wants_cancel):
            wait_for(partial(delivered, api, job.id), what=f"job {job.id} delivered")
        assert deliveries(api, cancelled.id) == []
        paths = sorted((c.path, c.json["job_id"]) for c in hook.calls())
        assert paths == sorted(
            [("/default", plain.id), ("/own", own.id), ("/default", wants_cancel.id)]
        )

        quiet_spec = workload()
        quiet_spec.no_notify = True
        quiet = submit(api, quiet_spec)
        assert quiet.spec.no_notify
        api.CancelJob(hadar_pb2.CancelJobRequest(job_id=quiet.id))
        assert deliveries(api, quiet.id) == []
        both = workload(hook.url())
        both.no_notify = True
        failure = error_of(lambda: submit(api, both))
        assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
        assert failure.details.startswith("spec.no_notify: ")

        cleared = api.ClearNotifyDefault(hadar_pb2.ClearNotifyDefaultRequest())
        assert not cleared.configured
        after = submit(api, workload())
        api.CancelJob(hadar_pb2.CancelJobRequest(job_id=after.id))
        assert deliveries(api, after.id) == []
        assert not api.GetNotifyDefault(hadar_pb2.GetNotifyDefaultRequest()).configured


def test_only_admins_manage_another_users_default(cluster: Cluster) -> None:
    """A user reads and sets only their own default (PERMISSION_DENIED for another's);
    an admin sets and reads anyone's."""
    with receiver() as hook:
        master = cluster.master(**FAST)
        bob = cluster.api(master, "bob", admin=False)
        admin = cluster.api(master, "root", admin=True)
        other = hadar_pb2.SetNotifyDefaultRequest(user="carol", url=hook.url())
        assert error_of(lambda: bob.SetNotifyDefault(other)).code == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        read_other = hadar_pb2.GetNotifyDefaultRequest(user="carol")
        assert error_of(lambda: bob.GetNotifyDefault(read_other)).code == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        assert admin.SetNotifyDefault(other).user == "carol"
        assert admin.GetNotifyDefault(read_other).url == hook.url()


@pytest.mark.parametrize(
    ("url", "settings", "message"),
    [
        ("ftp://example.org/hook", {}, "must be an http or https URL"),
        ("http:///nohost", {}, "has no host"),
        ("https://user:pw@example.org/x", {}, "must not carry a user name"),
        ("https://example.org/" + "a" * 2100, {}, "at most 2048 bytes"),
        ("https://exa mple.org/", {}, "must not contain spaces"),
        ("http://example.org/x", {"webhook_schemes": "https"}, "must be an https URL"),
        (
            "https://evil.example.com/x",
            {"webhook_allow_hosts": "hooks.slack.com,*.lab.example.org"},
            "host 'evil.example.com' is not one the cluster allows",
        ),
        ("https://hooks.slack.com/x", {"webhooks_enabled": False}, "webhooks are turned off"),
    ],
)
def test_bad_webhook_urls_are_refused_naming_the_field(
    cluster: Cluster, url: str, settings: dict[str, Any], message: str
) -> None:
    """Submissions and defaults with a URL the cluster does not accept fail with
    INVALID_ARGUMENT naming the field and the reason; nothing is stored."""
    master = cluster.master(**settings)
    api = cluster.api(master)
    failure = error_of(lambda: submit(api, workload(url)))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.details.startswith("spec.notify_url: ")
    assert message in failure.details
    failure = error_of(lambda: api.SetNotifyDefault(hadar_pb2.SetNotifyDefaultRequest(url=url)))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.details.startswith("url: ") and message in failure.details
    listed = api.ListJobs(hadar_pb2.ListJobsRequest())
    assert list(listed.jobs) == []
    assert not api.GetNotifyDefault(hadar_pb2.GetNotifyDefaultRequest()).configured


def test_allowed_hosts_accept_matching_urls_and_states_must_be_end_states(
    cluster: Cluster,
) -> None:
    """A host matching webhook_allow_hosts (exactly or as a subdomain of `*.`) is accepted;
    notify_on naming a state a job does not end in is refused naming its index."""
    master = cluster.master(webhook_allow_hosts="hooks.slack.com,*.lab.example.org")
    api = cluster.api(master)
    job = submit(api, workload("https://ntfy.lab.example.org/topic"))
    assert job.spec.notify_url == "https://ntfy.lab.example.org"
    submit(api, workload("https://hooks.slack.com/services/T/B/x"))
    failure = error_of(
        lambda: submit(
            api,
            workload(
                "https://hooks.slack.com/x",
                on=(common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_RUNNING),
            ),
        )
    )
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.details.startswith("spec.notify_on[1]: RUNNING is not an end state")
    failure = error_of(
        lambda: api.SetNotifyDefault(
            hadar_pb2.SetNotifyDefaultRequest(
                url="https://hooks.slack.com/x", on=[common_pb2.JOB_STATE_PENDING]
            )
        )
    )
    assert failure.details.startswith("on[0]: PENDING is not an end state")


def test_answers_are_classified_for_retrying() -> None:
    """2xx delivers; 5xx, 408 and 429 may be retried (after the endpoint's Retry-After
    when it gives one); other 4xx and redirects (not followed) may not; a refused
    connection and a hung endpoint may, with their cause."""
    hook: Receiver
    with receiver([204, 503, 429, 408, 404, 302]) as hook:
        outcomes = [post_json(hook.url(), b"{}", {}, 2.0) for _ in range(6)]
        assert [(o.delivered, o.status_code, o.permanent) for o in outcomes] == [
            (True, 204, False),
            (False, 503, False),
            (False, 429, False),
            (False, 408, False),
            (False, 404, True),
            (False, 302, True),
        ]
        assert outcomes[1].error.startswith("HTTP 503")
        assert [o.retry_after_s for o in outcomes[:3]] == [None, None, None]
        hook.retry_after = "7"
        hook.answer([429])
        assert post_json(hook.url(), b"{}", {}, 2.0).retry_after_s == 7.0
        assert outcomes[5].error == "HTTP 302: redirects are not followed"
        assert [c.path for c in hook.calls()] == ["/hook"] * 7
    refused = post_json(f"http://127.0.0.1:{closed_port()}/", b"{}", {}, 2.0)
    assert not refused.delivered and not refused.permanent
    assert refused.error.startswith("could not connect")
    with black_hole() as port:
        began = time.monotonic()
        hung = post_json(f"http://127.0.0.1:{port}/", b"{}", {}, 0.5)
        assert time.monotonic() - began < 2.0
    assert (hung.delivered, hung.permanent, hung.error) == (False, False, "no answer within 0.5s")
