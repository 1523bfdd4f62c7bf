"""hctl's webhooks: submit --notify/--notify-on and job files, hctl notify set/show/clear,
delivery status in hctl show, and the typed client's calls, against a real master, fake-GPU
workers and a real HTTP endpoint on 127.0.0.1."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import DeliveryStatus, HadarClient, JobSpec, JobState, Program
from clients.cli import shapes
from clients.cli.command import ExitCode
from protos.hadar.v1 import common_pb2
from tests.integration.cli.conftest import Cluster, Hctl, running_cluster
from tests.integration.cli.test_hctl import submit
from tests.integration.master.fakes import wait_for
from tests.integration.master.receiver import Receiver, receiver


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with receiver([500, 200]) as endpoint:
        yield endpoint


@pytest.fixture
def cluster(tmp_path: Path, quiet_master_logs: None) -> Iterator[Cluster]:
    """Fast webhook retries, so a retried delivery finishes within the test."""
    with running_cluster(
        tmp_path, webhook_poll_s=0.05, webhook_backoff_s=0.05, webhook_backoff_max_s=0.1
    ) as started:
        yield started


def test_submit_notify_and_show_report_the_delivery(
    hctl: Hctl, cluster: Cluster, hook: Receiver
) -> None:
    """`--notify URL --notify-on all` is stored (shown as scheme://host only); when the job
    completes the endpoint gets the POST after one 500, and `hctl show` says delivered after
    2 attempts, in text and in JSON of the documented shape."""
    job = submit(
        hctl, "--workload", "resnet", "--iterations", "100",
        "--notify", hook.url("/alice?token=secret"), "--notify-on", "all",
    )  # fmt: skip
    shown = hctl("show", str(job))
    endpoint = f"http://127.0.0.1:{hook.port}"
    assert re.search(
        rf"^notify +{re.escape(endpoint)} on completed, failed, cancelled, timeout$",
        shown.out,
        re.MULTILINE,
    ), shown.out
    assert "secret" not in shown.out
    cluster.round()
    cluster.worker_running(job).exit(job, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
    wait_for(lambda: len(hook.calls()) == 2, what="the retried delivery")
    wait_for(lambda: "delivered" in hctl("show", str(job)).out, what="status delivered")
    shown = hctl("show", str(job))
    (line,) = [x for x in shown.out.splitlines() if x.startswith("COMPLETED")]
    assert line.split()[:4] == ["COMPLETED", endpoint, "delivered", "2"], line
    document = json.loads(hctl("show", str(job), "--json").out)
    assert shapes.check(document, shapes.OUTPUTS["show"]) == []
    (delivery,) = document["notifications"]
    assert delivery["status"] == "delivered" and delivery["attempts"] == 2
    assert hook.calls()[-1].json["job_id"] == job


def test_a_job_file_names_its_webhook(
    hctl: Hctl, cluster: Cluster, hook: Receiver, tmp_path: Path
) -> None:
    """`notify` and `notify_on` in a job file are submitted like the flags; a flag wins;
    `--notify-on none` asks for no notification at all, which a webhook contradicts."""
    path = tmp_path / "job.toml"
    path.write_text(
        f'workload = "resnet"\niterations = 10\nnotify = "{hook.url()}"\n'
        'notify_on = ["failed", "timeout"]\n'
    )
    job = submit(hctl, "-f", str(path))
    with HadarClient(cluster.address, cluster.tokens["alice"], timeout=10) as client:
        spec = client.get_job(job).spec
        assert spec.notify_on == (JobState.FAILED, JobState.TIMEOUT)
        assert spec.notify_url == f"http://127.0.0.1:{hook.port}"
        other = submit(hctl, "-f", str(path), "--notify-on", "end")
        assert client.get_job(other).spec.notify_on == (
            JobState.COMPLETED,
            JobState.FAILED,
            JobState.TIMEOUT,
        )
    quiet = submit(hctl, "--workload", "resnet", "--iterations", "10", "--notify-on", "none")
    quiet_shown = hctl("show", str(quiet)).out
    assert re.search(
        r"^notify +none \(not even your default webhook\)$", quiet_shown, re.MULTILINE
    ), quiet_shown
    clash = hctl("submit", "-f", str(path), "--notify-on", "none")
    assert clash.code == ExitCode.USAGE and "notify_on: none asks for no notification" in clash.err
    assert hctl("notify", "set", hook.url(), "--on", "none").code == ExitCode.USAGE
    bad = hctl("submit", "-f", str(path), "--notify-on", "sometimes")
    assert bad.code == ExitCode.USAGE
    assert "'sometimes' is not one of end, fail, all" in bad.err


def test_notify_set_show_clear_and_refusals(hctl: Hctl, cluster: Cluster, hook: Receiver) -> None:
    """A user sets, shows (text and JSON) and clears their default; a job without its own
    webhook then notifies it; a bad URL is INVALID_ARGUMENT naming `url`; another user's
    default is for admins only."""
    assert "has no default webhook" in hctl("notify", "show").err
    hook.answer([200])
    result = hctl("notify", "set", hook.url("/mine"), "--on", "fail")
    assert result.code == 0, result.err
    assert "failed, timeout go to" in result.out
    document = json.loads(hctl("notify", "show", "--json").out)
    assert shapes.check(document, shapes.OUTPUTS["notify show"]) == []
    assert document["notify"]["url"] == hook.url("/mine")
    assert document["notify"]["on"] == ["failed", "timeout"]

    job = submit(hctl, "--iterations", "1", "--", "false")
    cluster.round()
    cluster.worker_running(job).exit(job, common_pb2.EXIT_KIND_FAILED, exit_code=1)
    wait_for(lambda: hook.calls("/mine"), what="the default webhook's call")
    assert hook.calls("/mine")[0].json["state"] == "FAILED"

    bad = hctl("notify", "set", "ftp://example.org/x")
    assert bad.code == ExitCode.INVALID_ARGUMENT
    assert "url: must be an http or https URL" in bad.err
    denied = hctl("notify", "set", "--user", "bob", hook.url())
    assert denied.code == ExitCode.PERMISSION_DENIED
    assert hctl("notify", "set", "--user", "bob", hook.url("/bob"), user="root").code == 0
    assert hook.url("/bob") in hctl("notify", "show", "--user", "bob", user="root").out

    assert hctl("notify", "clear").code == 0
    assert "has no default webhook" in hctl("notify", "show").err
    with HadarClient(cluster.address, cluster.tokens["bob"], timeout=10) as client:
        assert client.notify_default().url == hook.url("/bob")
        assert not client.clear_notify_default().configured
        assert not client.notify_default().configured


def test_typed_client_reports_deliveries(cluster: Cluster, hook: Receiver) -> None:
    """HadarClient.describe_job lists a job's webhook calls with their status."""
    hook.answer([200])
    with HadarClient(cluster.address, cluster.tokens["alice"], timeout=10) as client:
        client.set_notify_default(hook.url(), on=[JobState.CANCELLED])
        job = client.submit_job(JobSpec(name="x", program=Program.builtin("resnet"), iterations=5))
        client.cancel_job(job.id)
        wait_for(
            lambda: (
                [d.status for d in client.describe_job(job.id).notifications]
                == [DeliveryStatus.DELIVERED]
            ),
            what="the delivery",
        )
        (item,) = client.describe_job(job.id).notifications
        assert item.job_state is JobState.CANCELLED and item.attempts == 1
