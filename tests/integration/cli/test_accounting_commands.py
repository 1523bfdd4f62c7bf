"""hctl's time limits, usage and history, and the typed client's accounting calls, against a
real master with fake-GPU workers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clients import HadarClient, JobState, UsageGrouping
from clients.cli import shapes
from clients.cli.command import ExitCode
from protos.hadar.v1 import common_pb2
from tests.integration.cli.conftest import Cluster, Hctl, running_cluster
from tests.integration.cli.test_hctl import submit
from tests.integration.master.fakes import wait_for


def test_a_job_at_its_time_limit_shows_timeout_and_wait_exits_104(hctl: Hctl, cluster: Cluster):
    """`--time 1h` is stored and shown; past it the job is timeout in queue, show and
    history, and `hctl wait` exits 104."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "100", "--time", "1h")
    cluster.round()
    cluster.worker_running(job).report_progress(job, 10)
    shown = hctl("show", str(job))
    assert "limit      1h00m of run time; used" in shown.out, shown.out

    assert cluster.master.time_limits.check(datetime.now(UTC) + timedelta(hours=1, seconds=1))
    waited = hctl("wait", str(job), "--timeout", "20")
    assert waited.code == ExitCode.JOB_TIMEOUT
    assert waited.out.startswith(f"job {job} (resnet) timeout"), waited.out
    queue = hctl("queue", "-t", "TO")
    assert queue.code == 0 and queue.out.splitlines()[1].split()[:4] == [
        str(job),
        "resnet",
        "alice",
        "timeout",
    ]
    shown = hctl("show", str(job))
    assert "time limit 01:00:00 reached after" in shown.out, shown.out


def test_usage_and_history_read_as_sreport_and_sacct(hctl: Hctl, cluster: Cluster):
    """A finished 2-GPU command of alice's and a cancelled job of bob's: usage per user and
    type totals their GPU-seconds; history shows one's own jobs by default and everyone's
    with -a, with exit codes; both --json documents have their documented shapes; bad
    --since and active states are usage errors."""
    alice = submit(hctl, "--gpus", "2", "--gpu-type", "k80", "--iterations", "1", "--", "true")
    bob = submit(
        hctl, "--workload", "resnet", "--iterations", "50", "--gpu-type", "v100", user="bob"
    )
    cluster.round()
    cluster.worker_running(alice).exit(alice, common_pb2.EXIT_KIND_COMPLETED, exit_code=0)
    cluster.worker_running(bob).report_progress(bob, 5)
    assert hctl("cancel", str(bob), user="bob").code == 0
    # Until its worker reports the stopped task's exit, bob's attempt still counts up to now.
    wait_for(
        lambda: not cluster.master.tx.read(lambda uow: uow.usage.running()),
        what="every attempt to end",
    )

    usage = hctl("usage", "--json")
    assert usage.code == 0, usage.err
    document = json.loads(usage.out)
    assert shapes.check(document, shapes.OUTPUTS["usage"]) == []
    rows = {r["key"]: r for r in document["usage"]["rows"]}
    assert set(rows) == {"alice", "bob"} and rows["alice"]["jobs"] == 1
    with HadarClient(cluster.address, cluster.tokens["alice"], timeout=10) as client:
        jobs = {j: client.get_job(j) for j in (alice, bob)}
        by_type = client.usage(by=UsageGrouping.GPU_TYPE)
        mine = client.job_history()
        everyone = client.job_history(user="", states=[JobState.COMPLETED, JobState.CANCELLED])
    total = sum(j.gpu_seconds for j in jobs.values())
    assert jobs[alice].gpu_seconds > 0 and jobs[bob].gpu_seconds > 0
    assert abs(document["usage"]["total_gpu_seconds"] - total) < 1e-6
    assert {r.key for r in by_type.rows} == {"k80", "v100"}
    assert abs(by_type.total_gpu_seconds - total) < 1e-6
    assert [r.job.id for r in mine] == [bob, alice]  # the client is not hctl: no default user
    assert [r.job.id for r in everyone] == [bob, alice]

    table = hctl("usage", "--by", "type")
    assert table.code == 0
    assert table.out.splitlines()[1].split()[0] == "GPU"  # the GPU TYPE heading
    assert [line.split()[0] for line in table.out.splitlines()[2:]] == ["k80", "v100", "total"]

    history = hctl("history")
    assert history.code == 0, history.err
    lines = history.out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == [str(alice)]
    assert lines[1].split()[3:5] == ["completed", "0"]
    everyone_json = hctl("history", "-a", "--json")
    document = json.loads(everyone_json.out)
    assert shapes.check(document, shapes.OUTPUTS["history"]) == []
    states = {e["job"]["id"]: e["job"]["state"] for e in document["jobs"]}
    assert states == {alice: "completed", bob: "cancelled"}
    assert hctl("history", "-u", "bob", "-t", "cancelled").out.splitlines()[1].split()[0] == str(
        bob
    )

    active = hctl("history", "-t", "running")
    assert active.code == ExitCode.USAGE and "running is not a state a job ends in" in active.err
    bad = hctl("usage", "--since", "last week")
    assert bad.code == ExitCode.USAGE and "neither an age" in bad.err
    empty = hctl("usage", "--since", "2000-01-01", "--until", "2000-01-02")
    assert empty.code == 0 and "no GPU time used in this period" in empty.err


def test_a_limit_above_the_cluster_maximum_exits_6_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_env: None
) -> None:
    """The master's refusal reaches the user as exit 6 with the maximum in the message."""
    with running_cluster(tmp_path, max_time_limit="2h") as limited:
        hctl = Hctl(limited, capsys)
        refused = hctl("submit", "--workload", "resnet", "--iterations", "5", "--time", "3h")
    assert refused.code == ExitCode.INVALID_ARGUMENT
    assert "max_time_limit = 02:00:00" in refused.err, refused.err
    assert "spec.time_limit_s" in refused.err
