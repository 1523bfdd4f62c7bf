"""`hadar-worker run` as a real process: registers with fake GPUs, serves, speaks sd_notify,
and on SIGTERM stops its tasks, reports their exits and exits 0."""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc

from protos.hadar.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from tests.integration.worker.fake_master import FakeMaster, eventually, worker_stub
from worker.agent.agent import TEST_CLUSTER_TOKEN

JOB_SCRIPT = Path(__file__).with_name("contract_job.py")


def start_daemon(
    master: FakeMaster, state_dir: Path, log_path: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "worker.cli",
                "run",
                "--master",
                master.address,
                "--listen",
                "127.0.0.1:0",
                "--node",
                "cli-node",
                "--fake-gpus",
                "v100:1",
                "--state-dir",
                str(state_dir),
                "--heartbeat-interval-s",
                "0.5",
            ],
            env={
                **os.environ,
                "HADAR_WORKER_TOKEN": master.token,
                "HADAR_WORKER_PROGRESS_INTERVAL_S": "0.2",
                # Jobs are submitted as whoever runs the tests, root included: no other
                # user needs to run the tests' interpreter.
                "HADAR_WORKER_ALLOW_ROOT_JOBS": "true",
                "HADAR_WORKER_CHECK_PYTHON": "false",
                **env,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def start_job(address: str, job_id: int, token: str = TEST_CLUSTER_TOKEN) -> None:
    """Applies a START of a long contract job (lease 1, GPU 0) through the Worker API."""
    stub = worker_pb2_grpc.WorkerStub(  # type: ignore[no-untyped-call]
        grpc.insecure_channel(address)
    )
    spec = common_pb2.JobSpec(name="j", num_gpus=1, iterations=100_000)
    spec.script.argv.extend([sys.executable, str(JOB_SCRIPT)])
    spec.env["STEP_S"] = "0.05"
    request = worker_pb2.ApplyAssignmentsRequest(
        assignments=[
            worker_pb2.TaskAssignment(
                job_id=job_id,
                lease=1,
                action=worker_pb2.ASSIGNMENT_ACTION_START,
                spec=spec,
                gpu_indices=[0],
                grace_s=5,
                user=pwd.getpwuid(os.geteuid()).pw_name,
            )
        ]
    )
    metadata = (("authorization", f"Bearer {token}"),)
    (result,) = stub.ApplyAssignments(request, metadata=metadata, timeout=5).results
    assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message


def receive_until(sock: socket.socket, wanted: str, timeout_s: float) -> list[str]:
    """Notification datagrams received until one has the line `wanted` (all of them)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            message = sock.recv(4096).decode()
        except TimeoutError:
            break
        seen.append(message)
        if wanted in message.split("\n"):
            return seen
    raise AssertionError(f"no {wanted!r} within {timeout_s}s; got {seen}")


def test_daemon_registers_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """The daemon's address is what it registered; it tells systemd READY=1 with a STATUS,
    pings the watchdog, and on SIGTERM says STOPPING=1 and stops the task (STOPPED)."""
    master = FakeMaster(token="tok").start()
    notify_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    daemon = start_daemon(
        master,
        tmp_path / "state",
        tmp_path / "daemon.log",
        {
            "HADAR_WORKER_TOKEN": "tok",
            "NOTIFY_SOCKET": str(notify_path),
            # Pings every quarter of this.
            "WATCHDOG_USEC": "800000",
        },
    )
    try:
        ready = receive_until(sock, "READY=1", timeout_s=120)[-1]
        eventually(lambda: master.registration_count() >= 1, timeout_s=30)
        registration = master.registrations[0]
        assert registration.node == "cli-node"
        assert registration.address.startswith("127.0.0.1:")
        assert f"STATUS=serving on {registration.address}" in ready.split("\n")
        assert master.auth_seen[0] == "Bearer tok"

        start_job(registration.address, 1, token="tok")
        eventually(lambda: master.progress_for(1))
        pings = receive_until(sock, "WATCHDOG=1", timeout_s=10)
        pings += receive_until(sock, "WATCHDOG=1", timeout_s=10)
        assert any(m.startswith("STATUS=registered with") for m in pings), pings

        daemon.send_signal(signal.SIGTERM)
        receive_until(sock, "STOPPING=1", timeout_s=10)
        assert daemon.wait(timeout=30) == 0, (tmp_path / "daemon.log").read_text()
        (report,) = master.exits_for(1)
        assert report.kind == common_pb2.EXIT_KIND_STOPPED
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        sock.close()
        master.stop()


def test_jobs_survive_a_killed_daemon_and_a_restart_on_sigusr2(tmp_path: Path) -> None:
    """SIGKILL of the daemon leaves its job running; the next daemon on the same state
    directory adopts the same process and relays its progress. SIGUSR2 makes a daemon exit
    75 leaving the job running too; the third daemon stops it on the master's order, and the
    exit is reported exactly once."""
    master = FakeMaster().start()
    state = tmp_path / "state"
    log_path = tmp_path / "daemon.log"
    daemons: list[subprocess.Popen[bytes]] = []

    def run_daemon() -> str:
        registered = master.registration_count()
        daemons.append(start_daemon(master, state, log_path, {}))
        eventually(lambda: master.registration_count() > registered, timeout_s=120)
        return master.registrations[-1].address

    def progress_after(at_least: int) -> None:
        eventually(lambda: max(r.iterations_done for r in master.progress_for(3)) > at_least)

    try:
        address = run_daemon()
        start_job(address, 3)
        eventually(lambda: master.progress_for(3))
        eventually(lambda: any(t.pids for h in master.heartbeats for t in h.tasks))
        pid = next(t.pids[0] for h in master.heartbeats for t in h.tasks if t.pids)

        daemons[0].send_signal(signal.SIGKILL)
        daemons[0].wait(timeout=30)
        assert Path(f"/proc/{pid}").exists(), "the job outlives its agent"
        seen = max(r.iterations_done for r in master.progress_for(3))

        run_daemon()
        (task,) = master.registrations[-1].tasks
        assert (task.job_id, list(task.pids)) == (3, [pid]), "adopted, not restarted"
        progress_after(seen)

        daemons[1].send_signal(signal.SIGUSR2)
        assert daemons[1].wait(timeout=30) == 75, log_path.read_text()
        seen = max(r.iterations_done for r in master.progress_for(3))
        address = run_daemon()
        (task,) = master.registrations[-1].tasks
        assert list(task.pids) == [pid]
        progress_after(seen)
        assert master.exits_for(3) == []

        stub = worker_stub(address)
        stub.StopTask(worker_pb2.StopTaskRequest(job_id=3, checkpoint=True), timeout=5)
        eventually(lambda: master.exits_for(3), timeout_s=30)
        heartbeats = len(master.heartbeats)
        eventually(lambda: len(master.heartbeats) >= heartbeats + 3)
        (report,) = master.exits_for(3)
        assert report.kind == common_pb2.EXIT_KIND_STOPPED, report.message
        assert report.iterations_done > seen
        eventually(lambda: not Path(f"/proc/{pid}/environ").exists() or _zombie(pid))
    finally:
        for daemon in daemons:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
        master.stop()


def _zombie(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
