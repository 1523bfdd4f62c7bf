"""hctl and the typed client with fair share and a GPU quota on a real master with
fake-GPU workers: the quota refusal and wait as users see them, and `hctl fairshare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients import HadarClient
from clients.cli import shapes
from clients.cli.command import ExitCode
from tests.integration.cli.conftest import Hctl, running_cluster
from tests.integration.cli.test_hctl import submit
from tests.integration.master.fakes import wait_for


def test_quota_and_fair_share_as_users_see_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_env: None
) -> None:
    """Quota 3: bob's 4-GPU job exits 6 naming the quota; of his four 1-GPU jobs three
    start (over two rounds, alice's one job beside them) and `hctl show` says why the
    fourth waits. `hctl fairshare` lists both with their shares, GPUs held, quota, and
    bob, who used more against a smaller share, with the lower factor;
    --json has its documented shape and agrees with the client."""
    with running_cluster(
        tmp_path, fair_share=True, fair_share_users={"alice": 3}, max_gpus_per_user=3
    ) as cluster:
        hctl = Hctl(cluster, capsys)
        refused = hctl(
            "submit", "--gpus", "4", "--workload", "resnet", "--iterations", "5", user="bob"
        )
        assert refused.code == ExitCode.INVALID_ARGUMENT
        assert "quota of 3 GPUs" in refused.err and "spec.num_gpus" in refused.err

        jobs = [
            submit(hctl, "--workload", "resnet", "--iterations", "50", user="bob") for _ in range(4)
        ]
        mine = submit(hctl, "--workload", "resnet", "--iterations", "50")
        # First round: each gets one GPU of the four while both wait (bob's share is one);
        # next, alice has nothing waiting and bob may take the rest, up to his quota.
        cluster.round()
        cluster.round()
        for job in [*jobs[:3], mine]:
            cluster.worker_running(job).report_progress(job, 5)
        # A round's reasons are as of its start: the next one names the quota.
        cluster.round()
        shown = hctl("show", str(jobs[3]), user="bob")
        assert "waiting: user bob at quota of 3 GPUs" in shown.out, shown.out

        wait_for(
            lambda: len(cluster.master.tx.read(lambda uow: uow.usage.running())) == 4,
            what="the four attempts acknowledged",
        )
        text = hctl("fairshare")
        assert text.code == 0, text.err
        assert text.out.startswith("fair share on; usage half-life 7d"), text.out
        document = json.loads(hctl("fairshare", "--json").out)
        assert shapes.check(document, shapes.OUTPUTS["fairshare"]) == []
        rows = {r["user"]: r for r in document["fairshare"]["rows"]}
        assert set(rows) == {"alice", "bob"}
        assert rows["alice"]["raw_share"] == 3 and rows["alice"]["share"] == pytest.approx(0.75)
        assert (rows["bob"]["gpus"], rows["bob"]["quota"]) == (3, 3)
        assert rows["bob"]["usage"] > rows["alice"]["usage"] > 0
        assert 0 < rows["bob"]["factor"] < rows["alice"]["factor"] < 1
        with HadarClient(cluster.address, cluster.tokens["alice"], timeout=10) as client:
            report = client.fair_share()
        assert report.enabled and report.half_life_s == 7 * 86400
        assert [r.user for r in report.rows] == ["alice", "bob"]
