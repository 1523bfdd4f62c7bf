"""The daemon around the API: health, reflection, metrics, early rounds, dev auth, moves
between nodes, and a real process that signals systemd and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from master.daemon import Master
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.views import Snapshot
from master.settings import SettingsError
from protos.hadar.v1 import common_pb2, hadar_pb2, hadar_pb2_grpc, worker_pb2
from tests.integration.master.conftest import Cluster, make_settings
from tests.integration.master.fakes import FakeWorker, wait_for

REPO = Path(__file__).resolve().parents[3]


def resnet(num_gpus: int = 1, iterations: int = 100) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="r",
        num_gpus=num_gpus,
        iterations=iterations,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )


def test_health_reflection_and_metrics(cluster: Cluster) -> None:
    """Health says SERVING for the server and both services; reflection lists them; the
    metrics endpoint exports jobs, GPUs, round durations and their phases, RPC latencies,
    and the master's role and epoch."""
    master = cluster.master(metrics_port=0, metrics_host="127.0.0.1")
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet()))
    master.run_round()

    channel = grpc.insecure_channel(master.address)
    cluster.channels.append(channel)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "hadar.v1.Hadar", "hadar.v1.Coordinator"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = reflect.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
    )
    names = {s.name for r in replies for s in r.list_services_response.service}
    assert {"hadar.v1.Hadar", "hadar.v1.Coordinator", "grpc.health.v1.Health"} <= names

    assert master.metrics_port
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{master.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )
    assert 'hadar_jobs{state="running"} 1.0' in text
    assert 'hadar_gpus{state="busy",type="v100"} 1.0' in text
    assert 'hadar_gpus{state="idle",type="v100"} 1.0' in text
    assert "hadar_round_duration_seconds_count 1.0" in text
    for phase in ("read", "plan", "persist", "push"):
        assert f'hadar_round_phase_seconds_count{{phase="{phase}"}} 1.0' in text
    assert 'hadar_rpc_duration_seconds_count{code="OK",method="SubmitJob"} 1.0' in text
    assert 'hadar_master_role{role="active"} 1.0' in text
    assert 'hadar_master_role{role="standby"} 0.0' in text
    assert "hadar_master_epoch 1.0" in text


def test_submission_triggers_an_early_round(cluster: Cluster) -> None:
    """With idle GPUs, a submission starts a round soon instead of at the next period."""
    master = cluster.master(early_rounds=True, early_round_delay_s=0.05)
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet())).job
    wait_for(lambda: job.id in worker.running_jobs(), what="early round START")


def test_dev_auth_takes_the_user_from_a_header(cluster: Cluster) -> None:
    """auth = "none": no token needed; x-hadar-user names the user (an admin locally)."""
    master = cluster.master(auth="none", cluster_token="")
    worker = FakeWorker("n1", master.address, "")
    cluster.workers.append(worker)
    worker.metadata = ()
    worker.register()
    channel = grpc.insecure_channel(master.address)
    cluster.channels.append(channel)
    stub = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
    me = stub.WhoAmI(hadar_pb2.WhoAmIRequest(), metadata=(("x-hadar-user", "zoe"),), timeout=5)
    assert (me.user, me.admin) == ("zoe", True)
    job = stub.SubmitJob(
        hadar_pb2.SubmitJobRequest(spec=resnet()), metadata=(("x-hadar-user", "zoe"),), timeout=5
    ).job
    assert job.user == "zoe"
    anonymous = stub.WhoAmI(hadar_pb2.WhoAmIRequest(), timeout=5)
    assert anonymous.user  # the master's OS user


@dataclass
class ScriptedPolicy:
    """A Policy that returns the plans a test gives it, one per round."""

    plans: list[dict[int, list[GpuSlot]]] = field(default_factory=list)
    name: str = "scripted"
    seen: list[Snapshot] = field(default_factory=list)

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self.seen.append(snapshot)
        wanted = self.plans.pop(0) if self.plans else {}
        return Plan(
            {
                job_id: Allocation.on(slots, snapshot.job(job_id).batch_size)
                for job_id, slots in wanted.items()
            }
        )


def test_migration_stops_first_then_starts_elsewhere(cluster: Cluster, tmp_path: Path) -> None:
    """A job the plan moves to faster GPUs gets a STOP on its old node; the START on the new
    node, with a new lease, goes out only after the old task has exited (its checkpoint is
    complete)."""
    policy = ScriptedPolicy()
    # The move must pay for the job's restart, which is measured (placement to first
    # progress: seconds on a loaded machine): a long job wins it back on faster GPUs.
    master = Master(make_settings(cluster.database, tmp_path, restart_cost_s=0.0), policy=policy)
    master.start()
    cluster.masters.append(master)
    old = cluster.worker(master, "n1", num_gpus=2, auto_exit_on_stop=False)
    new = cluster.worker(master, "n2", num_gpus=2, gpu_type="a100-40gb")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet(iterations=100_000))).job

    policy.plans = [{job.id: [GpuSlot("n1", 0)]}, {job.id: [GpuSlot("n2", 1)]}]
    master.run_round()
    wait_for(lambda: job.id in old.running_jobs(), what="START on n1")
    old.progress(job.id, 20)
    master.run_round()
    assert any(
        a.job_id == job.id and a.action == worker_pb2.ASSIGNMENT_ACTION_STOP for a in old.applied
    )
    assert job.id not in new.running_jobs()  # n1 has not checkpointed yet

    assert old.exit(job.id, common_pb2.EXIT_KIND_STOPPED).accepted
    wait_for(lambda: job.id in new.running_jobs(), what="START on n2 after the exit")
    start = next(a for a in new.applied if a.job_id == job.id)
    first = next(a for a in old.applied if a.job_id == job.id)
    assert start.lease > first.lease and list(start.gpu_indices) == [1]
    described = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id, include_events=True))
    assert described.job.state == common_pb2.JOB_STATE_RUNNING
    assert described.job.migrations == 1
    assert [e.kind for e in described.events][-1] == "migrated"


def test_a_jobs_restart_cost_is_measured_from_its_placement_to_its_first_progress(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The policy sees, per job, what a move costs it: the time from its placement to its
    first progress report once measured, the restart_cost_s setting before."""
    policy = ScriptedPolicy()
    master = Master(make_settings(cluster.database, tmp_path, restart_cost_s=42.0), policy=policy)
    master.start()
    cluster.masters.append(master)
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    placed = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet())).job
    waiting = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet())).job
    policy.plans = [{placed.id: [GpuSlot("n1", 0)]}, {placed.id: [GpuSlot("n1", 0)]}]
    began = time.monotonic()
    master.run_round()
    wait_for(lambda: placed.id in worker.running_jobs(), what="START")
    worker.progress(placed.id, 5)
    elapsed = time.monotonic() - began
    master.run_round()
    views = {job.id: job for job in policy.seen[-1].jobs}
    assert 0.0 <= views[placed.id].restart_s <= elapsed
    assert views[waiting.id].restart_s == 42.0
    assert policy.seen[0].job(placed.id).restart_s == 42.0


def test_move_without_gain_is_not_carried_out(cluster: Cluster, tmp_path: Path) -> None:
    """Hysteresis: a plan that only shuffles a job onto equally fast GPUs leaves it running
    where it is (no STOP, lease extended)."""
    policy = ScriptedPolicy()
    master = Master(make_settings(cluster.database, tmp_path), policy=policy)
    master.start()
    cluster.masters.append(master)
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet())).job
    policy.plans = [{job.id: [GpuSlot("n1", 0)]}, {job.id: [GpuSlot("n1", 1)]}]
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    assert master.run_round().actions == 0
    actions = [a.action for a in worker.applied if a.job_id == job.id]
    assert actions == [worker_pb2.ASSIGNMENT_ACTION_START, worker_pb2.ASSIGNMENT_ACTION_EXTEND]


def test_process_signals_systemd_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`hadar-master run` migrates, notifies READY=1, and on SIGTERM notifies STOPPING=1 and
    exits 0."""
    notify_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    sock.settimeout(180)  # a loaded machine imports slowly
    env = dict(os.environ, NOTIFY_SOCKET=str(notify_path), STATE_DIRECTORY=str(tmp_path))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "master.cli",
            "--listen",
            "127.0.0.1:0",
            "--policy",
            "fifo",
            "--metrics-port",
            "-1",
            "--log-format",
            "json",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert sock.recv(64) == b"READY=1"
        assert (tmp_path / "hadar.db").exists()
        assert (tmp_path / "cluster-token").stat().st_mode & 0o077 == 0
        process.send_signal(signal.SIGTERM)
        assert sock.recv(64) == b"STOPPING=1"
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        sock.close()
    logs = process.stderr.read().decode() if process.stderr else ""
    assert '"event": "master stopped"' in logs


def test_busy_port_is_a_clear_settings_error(cluster: Cluster, tmp_path: Path) -> None:
    """A master on a port already in use fails with an error naming `listen`. (Its own
    database: a second master on the same database stands by and listens on nothing.)"""
    first = cluster.master()
    other = f"sqlite:///{tmp_path / 'other.db'}"
    second = Master(make_settings(other, tmp_path, listen=first.address))
    try:
        with pytest.raises(SettingsError, match="listen: cannot bind"):
            second.start()
    finally:
        second.stop(grace=0)
