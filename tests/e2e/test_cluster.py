"""A real cluster on one machine: master and worker processes, real PyTorch training on CPU.

Each test starts its own local cluster (`hctl local up` underneath) with short rounds.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clients.errors import Unavailable
from clients.localcluster import WorkerGroup, free_port, pid_alive
from clients.types import JobSpec, JobState, LogChunk, Program
from tests.e2e.conftest import Cluster, TwiceWatcher, wait_for
from tests.e2e.relay import Relay
from worker.runtime.checkpoint import CheckpointStore, job_directory

pytestmark = pytest.mark.e2e

DONE = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}
# A lost node's jobs start elsewhere once their lease, the grace and a round are over: a
# 3 s grace (10 s on a local cluster) brings that hold from 22 s to 15 s. The jobs that
# lose their node here are killed or stop themselves at lease end; none needs the grace.
SHORT_GRACE = {"HADAR_GRACE_S": "3"}


def test_every_builtin_workload_completes_with_exactly_its_iterations(
    start_cluster: Callable[..., Cluster],
) -> None:
    """One job per built-in workload runs to COMPLETED with iterations_done == iterations."""
    cluster = start_cluster("v100:2;k80:2")
    workloads = sorted(w.name for w in cluster.client.list_workloads())
    assert {"resnet", "lstm", "transformer", "recommendation"} <= set(workloads)
    jobs = {name: cluster.submit(name, iterations=25) for name in workloads}
    for name, job_id in jobs.items():
        job = cluster.wait_state(job_id, DONE, timeout=400)
        assert job.state == JobState.COMPLETED, f"{name}: {job.state} {job.reason}"
        assert job.iterations_done == 25, name


def test_a_killed_workers_job_resumes_elsewhere_from_its_checkpoint(
    start_cluster: Callable[..., Cluster],
) -> None:
    """SIGKILL a worker (and its job processes, as if its machine died): the job is
    preempted, placed on the other worker, resumes from its last checkpoint (losing at most
    one checkpoint interval) and completes with exactly its iterations."""
    # K80s are paced to a quarter of this machine's speed and checkpoints come every second,
    # so the job is checkpointed long before it could finish, even on an idle machine.
    cluster = start_cluster(
        "k80:1;k80:1",
        settings=SHORT_GRACE,
        worker_settings={"HADAR_WORKER_CHECKPOINT_INTERVAL_S": "1"},
    )
    job_id = cluster.submit("recommendation", iterations=1500)
    before = {}

    def checkpointed() -> bool:
        job = cluster.job(job_id)
        before["job"] = job
        assert job.state not in DONE, f"job ended before the crash: {job.state} {job.reason}"
        return job.state == JobState.RUNNING and job.checkpoint_iterations > 0

    wait_for(checkpointed, 180, "a first checkpoint")
    victim = before["job"].tasks[0].node
    reported = before["job"].checkpoint_iterations
    cluster.local.crash(victim)
    # Once the killed job process is gone nothing writes checkpoints until the master has
    # noticed the loss (a heartbeat timeout) and placed the job again: the newest file now is
    # the last checkpoint the job made, which is where it must resume.
    wait_for(lambda: job_id not in cluster.local.job_processes(), 30, "the job process to die")
    store = CheckpointStore(job_directory(cluster.local.state_dir / "checkpoints", str(job_id)))
    on_disk = store.iterations_on_disk()
    assert on_disk and on_disk[0] >= reported > 0, (on_disk, reported)
    last_checkpoint = on_disk[0]

    job = cluster.wait_state(job_id, DONE, timeout=400)
    assert job.state == JobState.COMPLETED, job.reason
    assert job.iterations_done == 1500
    events = cluster.client.describe_job(job_id).events
    assert any(victim in e.reason and e.to_state == JobState.PREEMPTED for e in events), [
        (e.kind, e.reason) for e in events
    ]

    # The output of the job's last placement (the master's iteration count only ever grows,
    # so it cannot tell a resume from a restart at 0): the runtime names the checkpoint it
    # resumed from, and says nothing when it starts from scratch. The first attempt's output
    # is on the crashed worker: the stream says so at its end, after the rest.
    chunks: list[LogChunk] = []
    with pytest.raises(Unavailable, match=f"attempt 1 of job {job_id} on {victim}"):
        for chunk in cluster.client.stream_logs(job_id):
            chunks.append(chunk)
    output = b"".join(chunk.data for chunk in chunks).decode(errors="replace")
    nodes = {chunk.node for chunk in chunks if chunk.data}
    assert nodes and victim not in nodes, (nodes, output)
    resumed = [int(n) for n in re.findall(r"resumed from \S*ckpt-(\d+)\.pt", output)]
    assert resumed == [last_checkpoint], output


def test_a_master_killed_and_restarted_loses_and_duplicates_nothing(
    start_cluster: Callable[..., Cluster],
) -> None:
    """SIGKILL the master while jobs run and start it again on the same database: every job
    completes, and no job ever runs under two leases at once."""
    cluster = start_cluster("v100:2;k80:2")
    with TwiceWatcher(cluster.local) as watcher:
        ids = [
            cluster.submit("recommendation", iterations=150),
            cluster.submit("lstm", iterations=60),
            cluster.submit("resnet", iterations=40),
        ]
        wait_for(
            lambda: all(cluster.job(i).state == JobState.RUNNING for i in ids),
            120,
            "all jobs to run",
        )
        cluster.local.kill("master", signal.SIGKILL)
        time.sleep(1.0)  # let the workers notice the master is gone
        cluster.local.restart_master()
        cluster.reconnect()
        for job_id in ids:
            job = cluster.wait_state(job_id, DONE, timeout=400)
            assert job.state == JobState.COMPLETED, job.reason
            assert job.iterations_done == job.spec.iterations
    assert watcher.samples > 10
    assert watcher.violations == []
    assert len(cluster.client.list_jobs()) == 3


def test_a_frozen_workers_job_stops_itself_at_lease_end_and_runs_elsewhere_once(
    start_cluster: Callable[..., Cluster],
) -> None:
    """Freeze a worker agent (SIGSTOP: its heartbeats and renewals stop, its job process
    does not): the job's runtime stops the job itself when the lease the agent last wrote is
    over; the master fences the job and places it on the other worker; the job never runs
    twice, and completes with exactly its iterations once the agent is thawed."""
    # Paced K80s: the job still runs when the 6 s heartbeat timeout has passed.
    cluster = start_cluster("k80:1;k80:1", settings=SHORT_GRACE)
    job_id = cluster.submit("recommendation", iterations=2000)
    job = cluster.wait_state(job_id, {JobState.RUNNING}, timeout=120)
    wait_for(lambda: job_id in cluster.local.job_processes(), 60, "the job's processes")
    victim = job.tasks[0].node
    old_lease = job.tasks[0].lease
    agent = cluster.local.worker(victim)
    with TwiceWatcher(cluster.local) as watcher:
        cluster.local.kill(victim, signal.SIGSTOP)
        try:
            wait_for(
                lambda: old_lease not in cluster.local.job_processes().get(job_id, set()),
                40,
                "the job to stop itself at lease end while its agent is frozen",
            )
            wait_for(
                lambda: any(
                    t.node != victim and t.lease > old_lease for t in cluster.job(job_id).tasks
                ),
                90,
                "the job to be placed on the other worker",
            )
        finally:
            cluster.local.kill(victim, signal.SIGCONT)
        assert agent.pid
        job = cluster.wait_state(job_id, DONE, timeout=400)
    assert job.state == JobState.COMPLETED, job.reason
    assert job.iterations_done == 2000
    assert watcher.violations == []


def test_a_worker_cut_off_from_the_master_stops_its_task_when_the_lease_ends(
    start_cluster: Callable[..., Cluster],
) -> None:
    """Cut a live worker off from the master in both directions (its agent keeps running):
    the agent stops the job's task itself when the lease ends unrenewed; the master declares
    the node lost, says the job waits for that lease, and starts the job on the other
    worker only afterwards. The job never runs twice and, once the partition heals,
    completes with exactly its iterations."""
    cluster = start_cluster("k80:1", settings=SHORT_GRACE)
    blocker = cluster.submit("recommendation", iterations=1_000_000)
    cluster.wait_state(blocker, {JobState.RUNNING}, timeout=120)
    listen = f"127.0.0.1:{free_port()}"
    to_master, to_worker = Relay(cluster.address), Relay(listen)
    try:
        agent = cluster.local.add_worker(
            WorkerGroup("local-2", "k80:1"),
            master=to_master.address,
            listen=listen,
            advertise=to_worker.address,
            timeout=120,
        )
        job_id = cluster.submit("recommendation", iterations=2000)
        job = cluster.wait_state(job_id, {JobState.RUNNING}, timeout=120)
        assert [t.node for t in job.tasks] == ["local-2"]
        old_lease = job.tasks[0].lease
        wait_for(lambda: job_id in cluster.local.job_processes(), 60, "the job's processes")
        with TwiceWatcher(cluster.local) as watcher:
            to_master.cut()
            to_worker.cut()
            waiting = f"waiting: lease {old_lease} on local-2 (lost) ends at "
            wait_for(
                lambda: cluster.job(job_id).reason.startswith(waiting),
                30,
                "the job to wait for the lost lease",
            )
            wait_for(
                lambda: job_id not in cluster.local.job_processes(),
                40,
                "the cut-off worker to stop the task at lease end",
            )
            assert pid_alive(agent.pid)
            cluster.client.cancel_job(blocker)
            wait_for(
                lambda: any(
                    t.node == "local-1" and t.lease > old_lease for t in cluster.job(job_id).tasks
                ),
                60,
                "the job to start on local-1",
            )
            to_master.heal()
            to_worker.heal()
            job = cluster.wait_state(job_id, DONE, timeout=400)
        assert job.state == JobState.COMPLETED, job.reason
        assert job.iterations_done == 2000
        assert watcher.violations == []
    finally:
        to_master.close()
        to_worker.close()


def test_cancel_ends_a_running_jobs_processes_within_ten_seconds(
    start_cluster: Callable[..., Cluster],
) -> None:
    """`hctl cancel` on a running job: CANCELLED, and its processes are gone within 10 s."""
    cluster = start_cluster("v100:1")
    job_id = cluster.submit("lstm", iterations=100_000)
    cluster.wait_state(job_id, {JobState.RUNNING}, timeout=120)
    wait_for(lambda: job_id in cluster.local.job_processes(), 60, "the job's processes")
    started = time.monotonic()
    result = cluster.hctl("cancel", str(job_id))
    assert result.returncode == 0, result.stderr
    wait_for(lambda: job_id not in cluster.local.job_processes(), 10, "the processes to end")
    assert time.monotonic() - started <= 10
    assert cluster.job(job_id).state == JobState.CANCELLED


def test_a_failing_command_is_retried_then_failed_with_its_exit_code(
    start_cluster: Callable[..., Cluster],
) -> None:
    """An opaque command exiting 3, submitted with one retry (`--retries 1`), is retried
    once, then FAILED; `hctl show` names exit code 3."""
    cluster = start_cluster("v100:1")
    spec = JobSpec(
        name="fails",
        program=Program.command(["python3", "-c", "import sys; print('boom'); sys.exit(3)"]),
        iterations=1,
        max_retries=1,
    )
    job_id = cluster.submit_spec(spec)
    job = cluster.wait_state(job_id, DONE, timeout=120)
    assert job.state == JobState.FAILED, job.reason
    assert job.retries == 1
    assert job.exit_code == 3
    shown = cluster.hctl("show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert "exit code 3" in shown.stdout, shown.stdout
    events = cluster.client.describe_job(job_id).events
    assert sum(e.kind == "retried" for e in events) == 1, [(e.kind, e.reason) for e in events]


def test_a_shareable_pair_runs_colocated_with_accumulation_and_both_complete(
    start_cluster: Callable[..., Cluster],
) -> None:
    """Under sjf-bsbf, a second shareable job shares the only GPU with the first. Each needs
    10 GiB of the fake v100's 16 GiB, so the sharer runs a sub-batch with gradient
    accumulation; both complete exactly. (Fake GPUs have no co-location figures; the policy
    is told to assume a 1.1x slowdown, about what pacing on a CPU gives.)"""
    cluster = start_cluster(
        "v100:1",
        policy="sjf-bsbf",
        settings={"HADAR_POLICY_PARAMS": "assumed_pair_slowdown=1.1"},
    )
    memory = 10 << 30
    first = cluster.submit("recommendation", 300, shareable=True, gpu_memory_bytes=memory)
    cluster.wait_state(first, {JobState.RUNNING}, timeout=120)
    second = cluster.submit("recommendation", 60, shareable=True, gpu_memory_bytes=memory)
    shared: list[tuple[int, int, int]] = []

    def colocated() -> bool:
        for job_id in (first, second):
            for task in cluster.job(job_id).tasks:
                if task.shared_with_job_id:
                    shared.append((job_id, task.shared_with_job_id, task.accumulation_steps))
        return any(job_id == second for job_id, _, _ in shared) or (
            cluster.job(second).state in DONE
        )

    wait_for(colocated, 120, "the pair to share the GPU")
    assert (second, first) in {(a, b) for a, b, _ in shared}, shared
    assert any(job_id == second and steps > 1 for job_id, _, steps in shared), shared
    for job_id in (first, second):
        job = cluster.wait_state(job_id, DONE, timeout=400)
        assert job.state == JobState.COMPLETED, job.reason
        assert job.iterations_done == job.spec.iterations


def test_a_plain_script_stays_where_it_started_and_completes_with_its_exit_code(
    start_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    """A script that never uses the runtime helper (no progress reports) keeps its first
    placement until it exits, although a faster GPU joins and rounds pass (hadare would move
    it there, or fork it onto both): one task, one lease, no migration, resize or
    preemption. It ends COMPLETED with exit code 0 and `hctl show` says so with its run
    time, not 0 %."""
    cluster = start_cluster("k80:1", policy="hadare")
    release = tmp_path / "release"
    # Waits for the test's go (never longer than two minutes), writes no progress.
    waiter = (
        "import os, sys, time\n"
        "deadline = time.time() + 120\n"
        "while not os.path.exists(sys.argv[1]) and time.time() < deadline:\n"
        "    time.sleep(0.2)\n"
        "sys.exit(0 if os.path.exists(sys.argv[1]) else 1)\n"
    )
    spec = JobSpec(
        name="plain",
        program=Program.script(["python3", "-c", waiter, str(release)]),
        iterations=1000,
    )
    job_id = cluster.submit_spec(spec)
    with TwiceWatcher(cluster.local) as watcher:
        cluster.wait_state(job_id, {JobState.RUNNING}, timeout=120)
        wait_for(lambda: job_id in cluster.local.job_processes(), 60, "the script's process")
        first = cluster.job(job_id).tasks
        assert [t.gpu_type for t in first] == ["k80"], first
        cluster.local.add_worker(WorkerGroup("local-2", "v100:1"))
        joined = cluster.client.cluster_status().last_round
        assert joined is not None
        placements: set[tuple[str, int]] = set()

        def rounds_passed() -> bool:
            job = cluster.job(job_id)
            assert job.state == JobState.RUNNING, (job.state, job.reason)
            assert len(job.tasks) <= 1, job.tasks
            placements.update((t.node, t.lease) for t in job.tasks)
            last = cluster.client.cluster_status().last_round
            return last is not None and last.number >= joined.number + 3

        wait_for(rounds_passed, 60, "three rounds with the faster GPU in the cluster")
        release.touch()
        job = cluster.wait_state(job_id, DONE, timeout=60)
    assert watcher.violations == [], watcher.violations
    assert placements == {(first[0].node, first[0].lease)}, placements
    assert job.state == JobState.COMPLETED, job.reason
    assert job.exit_code == 0
    assert (job.migrations, job.preemptions, job.retries) == (0, 0, 0)
    kinds = [e.kind for e in cluster.client.describe_job(job_id).events]
    assert kinds == ["submitted", "scheduled", "completed"], kinds
    shown = cluster.hctl("show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert "completed (exit 0)" in shown.stdout, shown.stdout
    assert re.search(r"completed \(exit 0\) after \d+", shown.stdout), shown.stdout
    assert "0%" not in shown.stdout, shown.stdout


def test_a_cancelled_commands_output_is_in_hctl_logs_and_its_output_files(
    start_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    """A command that printed and was then cancelled: `hctl logs` shows what it printed
    (standard output on stdout, standard error on stderr) and then, on stderr, the
    worker's `hadar:` line saying who cancelled it; the --output and --error files in its
    workdir (%j expanded) hold what the job printed."""
    cluster = start_cluster("v100:1")
    workdir = tmp_path / "work"
    workdir.mkdir()
    code = (
        "import sys, time; print('to stdout'); print('to stderr', file=sys.stderr); time.sleep(600)"
    )
    spec = JobSpec(
        name="printer",
        program=Program.command(["python3", "-c", code]),
        iterations=1,
        workdir=str(workdir),
        output="printer-%j.out",
        error="printer-%j.err",
    )
    job_id = cluster.submit_spec(spec)
    out, err = workdir / f"printer-{job_id}.out", workdir / f"printer-{job_id}.err"
    wait_for(
        lambda: out.exists() and out.read_text() == "to stdout\n", 120, "the job's output file"
    )
    result = cluster.hctl("cancel", str(job_id), "--reason", "wrong data")
    assert result.returncode == 0, result.stderr
    cluster.wait_state(job_id, {JobState.CANCELLED}, timeout=60)
    logs: list[subprocess.CompletedProcess[str]] = []

    def noted() -> bool:
        # The line is written once the worker has stopped the process.
        logs.append(cluster.hctl("logs", str(job_id)))
        return "hadar:" in logs[-1].stderr

    wait_for(noted, 30, "the cancel's hadar: line")
    assert (logs[-1].returncode, logs[-1].stdout) == (0, "to stdout\n"), logs[-1].stderr
    assert re.fullmatch(r"to stderr\nhadar: cancelled by \S+: wrong data\n", logs[-1].stderr)
    assert err.read_text() == "to stderr\n"
