"""`hadar-worker run` as a real process: registers with fake GPUs, serves, and on SIGTERM
stops its tasks, reports their exits and exits 0."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
from pathlib import Path

import grpc

from protos.hadar.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from tests.integration.worker.fake_master import FakeMaster, eventually

JOB_SCRIPT = Path(__file__).with_name("contract_job.py")


def test_daemon_registers_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """The daemon's address is what it registered; SIGTERM stops the task (STOPPED)."""
    master = FakeMaster(token="tok").start()
    env = {**os.environ, "HADAR_WORKER_TOKEN": "tok", "HADAR_WORKER_PROGRESS_INTERVAL_S": "0.2"}
    log = (tmp_path / "daemon.log").open("wb")
    daemon = subprocess.Popen(
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
            str(tmp_path / "state"),
            "--heartbeat-interval-s",
            "0.5",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        eventually(lambda: master.registration_count() >= 1, timeout_s=30)
        registration = master.registrations[0]
        assert registration.node == "cli-node"
        assert registration.address.startswith("127.0.0.1:")
        assert master.auth_seen[0] == "Bearer tok"

        stub = worker_pb2_grpc.WorkerStub(  # type: ignore[no-untyped-call]
            grpc.insecure_channel(registration.address)
        )
        spec = common_pb2.JobSpec(name="j", num_gpus=1, iterations=100_000)
        spec.script.argv.extend([sys.executable, str(JOB_SCRIPT)])
        request = worker_pb2.ApplyAssignmentsRequest(
            assignments=[
                worker_pb2.TaskAssignment(
                    job_id=1,
                    lease=1,
                    action=worker_pb2.ASSIGNMENT_ACTION_START,
                    spec=spec,
                    gpu_indices=[0],
                    grace_s=5,
                    user=pwd.getpwuid(os.geteuid()).pw_name,
                )
            ]
        )
        (result,) = stub.ApplyAssignments(
            request, metadata=(("authorization", "Bearer tok"),), timeout=5
        ).results
        assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message
        eventually(lambda: master.progress_for(1))

        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, (tmp_path / "daemon.log").read_text()
        (report,) = master.exits_for(1)
        assert report.kind == common_pb2.EXIT_KIND_STOPPED
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        log.close()
        master.stop()
