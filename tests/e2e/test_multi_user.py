"""Two users of one lab cluster, with real processes: the master, workers running jobs as
the submitting Unix user, and hctl as each user runs it with their own token. One cluster
serves every scenario of this file (on SQLite, and on PostgreSQL when configured): what
one user sends never reads, changes or stalls the other's work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from clients.client import HadarClient
from clients.errors import Conflict, InvalidArgument
from clients.localcluster import LocalCluster, parse_worker_groups
from clients.types import TERMINAL_JOB_STATES, JobSpec, JobState, NodeState, Program
from protos.hadar.v1 import hadar_pb2, hadar_pb2_grpc
from store.testing import backends, temporary_database_url
from tests.e2e.conftest import ROUND_S, Cluster, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as another user needs root"),
]

# alice is a real Unix account on the workers (jobs run as their submitter); bob only reads.
ALICE = "nobody"
BOB = "bob"
SECRET = "sk-live-7f3a9c"


@dataclass
class Lab:
    cluster: Cluster
    tokens: dict[str, str]
    # Where the users run hctl: a command runs in the directory it was submitted from, and
    # jobs run as alice, who cannot enter pytest's or CI's folders (root's alone).
    home: Path

    def hctl(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        """hctl as `user` runs it: the cluster's address, their own token, from their
        directory."""
        return self.cluster.hctl(*args, token=self.tokens[user], cwd=self.home)

    def submit(self, user: str, *args: str) -> int:
        done = self.hctl(user, "submit", "--parsable", *args)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip())


@pytest.fixture(scope="module", params=backends())
def lab(request: pytest.FixtureRequest) -> Iterator[Lab]:
    # Jobs run as alice, who must reach their folders under the cluster's state directory
    # (pytest's own temporary folders are root's alone).
    top = Path(tempfile.mkdtemp(prefix="hadar-lab-"))
    top.chmod(0o755)
    sqlite = request.param == "sqlite"
    try:
        with nullcontext(None) if sqlite else temporary_database_url("postgresql", top) as url:
            local = LocalCluster(top / "cluster", database_url=url)
            local.up(
                parse_worker_groups("v100:2;k80:2"),
                policy="gavel",
                round_seconds=ROUND_S,
                timeout=120,
            )
            cluster = Cluster(local)
            try:
                tokens = {user: cluster.client.create_token(user).token for user in (ALICE, BOB)}
                yield Lab(cluster, tokens, top)
            finally:
                cluster.reconnect()
                local.down(timeout=10)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def alices_job(lab: Lab) -> int:
    """A job of alice's whose command line, environment and output hold a secret."""
    job = lab.submit(
        ALICE,
        "--name",
        "alice-train",
        "--iterations",
        "1",
        "--env",
        f"API_KEY={SECRET}",
        "--",
        "/usr/bin/python3",
        "-c",
        f"import os; print('key', os.environ['API_KEY']); print('{SECRET}-in-argv')",
    )
    done = lab.cluster.wait_state(job, TERMINAL_JOB_STATES, timeout=120)
    assert done.state is JobState.COMPLETED, done.reason
    return job


def test_bob_cannot_read_alices_logs_and_alice_can(lab: Lab, alices_job: int) -> None:
    """`hctl logs` of another user's job is PERMISSION_DENIED (exit 4), naming the owner;
    the owner reads the job's own output."""
    theirs = lab.hctl(BOB, "logs", str(alices_job))
    assert theirs.returncode == 4, (theirs.stdout, theirs.stderr)
    assert f"belongs to {ALICE}" in theirs.stderr
    assert SECRET not in theirs.stdout + theirs.stderr
    mine = lab.hctl(ALICE, "logs", str(alices_job))
    assert mine.returncode == 0, mine.stderr
    assert f"key {SECRET}" in mine.stdout


def test_alices_command_and_environment_appear_nowhere_bob_looks(lab: Lab, alices_job: int) -> None:
    """bob's `hctl show --json`, `queue --json`, `history --json` and plain `show` list
    alice's job (id, user, name, state) but never its command line or environment values;
    alice's own `show --json` has both."""
    outputs = []
    for args in (
        ("show", "--json", str(alices_job)),
        ("show", str(alices_job)),
        ("queue", "--json", "--all"),
        ("history", "--json"),
    ):
        done = lab.hctl(BOB, *args)
        assert done.returncode == 0, (args, done.stderr)
        outputs.append(done.stdout)
        assert SECRET not in done.stdout + done.stderr, args
        assert "API_KEY" not in done.stdout, args
    shown = json.loads(outputs[0])["job"]
    assert (shown["id"], shown["user"], shown["spec"]["name"]) == (alices_job, ALICE, "alice-train")
    assert shown["private_hidden"] is True
    assert shown["spec"]["env"] == {} and shown["spec"]["program"]["argv"] == []
    assert "private" in outputs[1] or ALICE in outputs[1]
    mine = json.loads(lab.hctl(ALICE, "show", "--json", str(alices_job)).stdout)["job"]
    # Hers: --env's variable on top of her exported shell environment.
    assert mine["spec"]["env"]["API_KEY"] == SECRET
    assert f"{SECRET}-in-argv" in mine["spec"]["program"]["argv"][-1]


def test_alices_folders_on_the_worker_are_hers_alone(lab: Lab, alices_job: int) -> None:
    """The job's folders on its worker are 0700 and alice's; its log files 0600."""
    found = list((lab.cluster.local.state_dir).glob(f"**/tasks/job-{alices_job}.task-*"))
    assert found, f"no task folder of job {alices_job} under {lab.cluster.local.state_dir}"
    for task_dir in found:
        assert oct(task_dir.stat().st_mode & 0o777) == "0o700"
        assert task_dir.owner() == ALICE
        for path in task_dir.iterdir():
            assert path.stat().st_mode & 0o077 == 0, path


def test_a_name_with_terminal_escapes_is_refused_and_nothing_is_stored(lab: Lab) -> None:
    """A job name carrying an escape sequence (or a direction override) is refused at
    submission with the field named; no job is stored, so no screen ever prints it."""
    before = lab.hctl(ALICE, "queue", "--json", "--all").stdout
    for name in ("x\x1b]0;owned\x07", "invoice\u202egnp.exe"):
        done = lab.hctl(ALICE, "submit", "--name", name, "--iterations", "1", "--", "true")
        assert done.returncode != 0
        assert "name" in done.stderr and "control or text-direction" in done.stderr
    assert lab.hctl(ALICE, "queue", "--json", "--all").stdout == before


def test_a_reused_idempotency_key_with_another_spec_is_refused_naming_the_first_job(
    lab: Lab,
) -> None:
    """A program that reuses its idempotency key for a different job gets ALREADY_EXISTS
    naming the job the key made, not that job passed off as the new one; the same key
    with the same spec (a resend) still returns the first job, and nothing else is stored."""
    config = replace(lab.cluster.local.client_config(10.0), token=lab.tokens[BOB])
    client = HadarClient(config=config)
    try:
        spec = JobSpec(name="bob-sweep", program=Program.command("true"), iterations=1)
        first = client.submit_job(spec, idempotency_key="sweep-1")
        assert client.submit_job(spec, idempotency_key="sweep-1").id == first.id
        with pytest.raises(Conflict) as refused:
            client.submit_job(replace(spec, num_gpus=2), idempotency_key="sweep-1")
        assert f"job {first.id}" in str(refused.value)
        mine = [j.id for j in client.list_jobs(user=BOB)]
        assert mine.count(first.id) == 1 and len(mine) == 1
        lab.cluster.wait_state(first.id, TERMINAL_JOB_STATES, timeout=120)
    finally:
        client.close()


def test_numbers_out_of_range_are_usage_errors_naming_the_flag(lab: Lab, tmp_path: Path) -> None:
    """hctl refuses a number past its range as a usage error (exit 2) that names the flag
    and the range, before anything reaches the master; a job file far over the master's
    limits is refused at once instead of taking minutes to parse."""
    before = lab.hctl(ALICE, "queue", "--json", "--all").stdout
    for flag, value in (("--gpus", "4294967297"), ("--iterations", "18446744073709551616")):
        done = lab.hctl(ALICE, "submit", flag, value, "--", "true")
        assert done.returncode == 2, (flag, done.stderr)
        assert flag in done.stderr and "out of range" in done.stderr
        assert "Traceback" not in done.stderr
    job_file = tmp_path / "huge.toml"
    job_file.write_text(f'name = "huge"\niterations = 1\ncommand = "echo {"x" * 10_000_000}"\n')
    started = time.monotonic()
    done = lab.hctl(ALICE, "submit", "--file", str(job_file))
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 30
    assert lab.hctl(ALICE, "queue", "--json", "--all").stdout == before


def test_a_priority_that_would_break_the_policy_is_refused_and_others_run(lab: Lab) -> None:
    """Under gavel, a job with priority 5e-324 (or 1e308) once made every round's linear
    program fail for everyone. Now hctl refuses it as a usage error naming --priority and
    its range, the API refuses it naming spec.priority, nothing is stored, and another
    user's job submitted beside it runs to completion."""
    for value in ("5e-324", "1e308"):
        done = lab.hctl(BOB, "submit", "--priority", value, "--iterations", "1", "--", "true")
        assert done.returncode == 2, done.stderr
        assert "--priority" in done.stderr and "0.001..1000" in done.stderr
    config = replace(lab.cluster.local.client_config(10.0), token=lab.tokens[BOB])
    client = HadarClient(config=config)
    try:
        spec = JobSpec(name="tiny", program=Program.command("true"), iterations=1)
        with pytest.raises(InvalidArgument) as refused:
            client.submit_job(replace(spec, priority=5e-324))
        assert "spec.priority" in str(refused.value)
    finally:
        client.close()
    job = lab.submit(ALICE, "--name", "beside", "--iterations", "1", "--", "true")
    done_job = lab.cluster.wait_state(job, TERMINAL_JOB_STATES, timeout=120)
    assert done_job.state is JobState.COMPLETED, done_job.reason


def test_one_users_flood_of_streams_and_listings_stalls_no_worker(lab: Lab) -> None:
    """bob opens 50 watches and sends ListJobs from 16 threads without pause while alice's
    four jobs run: past max_streams_per_user (8) his watches are refused with
    RESOURCE_EXHAUSTED naming it, no node goes without a heartbeat for 3 s (the interval is
    1 s, the timeout 6 s), no node is lost, and every one of alice's jobs completes."""
    channel = grpc.insecure_channel(lab.cluster.address)
    stub = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
    bob = (("authorization", f"Bearer {lab.tokens[BOB]}"),)
    stop = threading.Event()
    refusals: list[str] = []
    listed: Counter[str] = Counter()
    lock = threading.Lock()

    def watch(call: Any) -> None:
        try:
            for _ in call:
                pass
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                with lock:
                    refusals.append(exc.details() or "")

    def flood() -> None:
        while not stop.is_set():
            try:
                stub.ListJobs(hadar_pb2.ListJobsRequest(), metadata=bob, timeout=30)
                outcome = "OK"
            except grpc.RpcError as exc:
                outcome = exc.code().name
            with lock:
                listed[outcome] += 1

    watches = [
        stub.WatchJobs(hadar_pb2.WatchJobsRequest(), metadata=bob, timeout=600) for _ in range(50)
    ]
    threads = [threading.Thread(target=watch, args=(w,), daemon=True) for w in watches]
    threads += [threading.Thread(target=flood, daemon=True) for _ in range(16)]
    for thread in threads:
        thread.start()
    try:
        jobs = [
            lab.submit(
                ALICE,
                "--name",
                f"beside-flood-{i}",
                "--iterations",
                "1",
                "--",
                "/usr/bin/python3",
                "-c",
                "import time; time.sleep(6)",
            )
            for i in range(4)
        ]
        wait_for(lambda: len(refusals) == 42, 60, "bob's watches past the cap to be refused")
        assert all("max_streams_per_user = 8" in r for r in refusals), refusals[:3]
        quiet: dict[str, float] = {}
        deadline = time.monotonic() + 180
        while not all(lab.cluster.job(j).state in TERMINAL_JOB_STATES for j in jobs):
            assert time.monotonic() < deadline, "alice's jobs did not finish"
            now = datetime.now(UTC)
            for node in lab.cluster.client.list_nodes():
                assert node.state is NodeState.READY, (node.name, node.state, node.reason)
                assert node.last_heartbeat is not None
                silent = (now - node.last_heartbeat).total_seconds()
                quiet[node.name] = max(quiet.get(node.name, 0.0), silent)
            time.sleep(0.25)
        assert quiet and max(quiet.values()) < 3.0, quiet
        for job in jobs:
            done = lab.cluster.job(job)
            assert done.state is JobState.COMPLETED, done.reason
            assert (done.retries, done.preemptions) == (0, 0), done
        assert listed["OK"] > 0, listed
    finally:
        stop.set()
        for call in watches:
            call.cancel()
        channel.close()
