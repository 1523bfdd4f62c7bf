"""Webhooks on a real local cluster: master and worker processes, real commands, hctl as a
user runs it, and a real HTTP endpoint on 127.0.0.1 receiving the POSTs."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import pytest

from clients.types import TERMINAL_JOB_STATES
from tests.e2e.conftest import Cluster, wait_for
from tests.integration.master.receiver import receiver

pytestmark = pytest.mark.e2e

DONE = TERMINAL_JOB_STATES


def test_jobs_that_end_post_signed_summaries_to_their_webhooks(
    start_cluster: Callable[..., Cluster],
) -> None:
    """With a default webhook set by `hctl notify set`, a command that exits 0 is posted to
    it; one that exits 3 with its own `--notify` is posted there instead, with its exit
    code; both bodies carry the cluster's signature, and `hctl show` says delivered."""
    with receiver() as hook:
        cluster = start_cluster(
            "v100:2", settings={"HADAR_WEBHOOK_POLL_S": "0.2", "HADAR_WEBHOOK_SECRET": "e2e-secret"}
        )
        set_result = cluster.hctl("notify", "set", hook.url("/default"))
        assert set_result.returncode == 0, set_result.stderr
        # Long enough that its GPU-hours do not round to 0 in the summary (6 decimals).
        ok = cluster.submit_argv("--iterations", "1", "--", "sleep", "1")
        failing = cluster.submit_argv(
            "--iterations", "1", "--notify", hook.url("/own"), "--", "sh", "-c", "exit 3"
        )
        for job_id in (ok, failing):
            cluster.wait_state(job_id, DONE, timeout=120)
        wait_for(lambda: len(hook.calls()) >= 2, timeout=60, what="both webhook calls")
        by_path = {c.path: c for c in hook.calls()}
        assert sorted(by_path) == ["/default", "/own"]
        done, failed = by_path["/default"].json, by_path["/own"].json
        assert (done["job_id"], done["state"], done["exit_code"]) == (ok, "COMPLETED", 0)
        assert (failed["job_id"], failed["state"], failed["exit_code"]) == (failing, "FAILED", 3)
        assert done["run_seconds"] > 0 and done["gpu_hours"] > 0
        for call in hook.calls():
            digest = hmac.new(b"e2e-secret", call.body, hashlib.sha256).hexdigest()
            assert call.headers["X-Hadar-Signature"] == f"sha256={digest}"
        wait_for(
            lambda: "delivered" in cluster.hctl("show", str(failing)).stdout,
            timeout=30,
            what="hctl show to say delivered",
        )
