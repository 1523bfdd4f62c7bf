"""Control-path latencies of the worker agent: real agent, real gRPC, real subprocesses.

An in-process Coordinator records when reports arrive; tasks run a tiny Python job that
follows the contract (no torch), so the figures are the agent's own overhead plus a Python
start-up, not training. Per task:

- apply: the ApplyAssignments(START) round trip (validation, ledger write, spawn);
- stop -> exit report: StopTask(checkpoint) until the master has TaskExited (SIGTERM, the
  job's exit record, reaping, the durable outbox, the RPC);
- exit -> exit report: a job that ends by itself, from its exit record to the master.

    .venv/bin/python bench/bench_worker.py [--tasks 20]
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from protos.hadar.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from worker.agent.agent import WorkerAgent, settings_for_test
from worker.gpus import FakeGpuProvider

JOB = """
import json, os, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
path = os.environ["HADAR_PROGRESS_FILE"]
def record(event, reason=None):
    with open(path, "a") as f:
        f.write(json.dumps({"event": event, "iterations_done": 1, "iterations_per_s": 1.0,
            "samples_per_s": 1.0, "loss": 0.0, "checkpoint_iterations": 1, "at": time.time(),
            "exit_reason": reason}) + "\\n")
record("progress")
if os.environ.get("MODE") == "finish":
    record("exit", "completed")
    sys.exit(0)
while not stop:
    time.sleep(0.005)
record("exit", "stopped")
"""


class Recorder(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.exits: dict[int, float] = {}
        self.progress: dict[int, float] = {}

    # Method names are the gRPC service's.
    def RegisterWorker(  # noqa: N802
        self, request: coordinator_pb2.RegisterWorkerRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RegisterWorkerResponse:
        return coordinator_pb2.RegisterWorkerResponse(heartbeat_interval_s=1.0)

    def Heartbeat(  # noqa: N802
        self, request: coordinator_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.HeartbeatResponse:
        return coordinator_pb2.HeartbeatResponse(heartbeat_interval_s=1.0)

    def ReportProgress(  # noqa: N802
        self, request: coordinator_pb2.ReportProgressRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportProgressResponse:
        with self.lock:
            for report in request.reports:
                self.progress.setdefault(report.job_id, time.monotonic())
        return coordinator_pb2.ReportProgressResponse()

    def TaskExited(  # noqa: N802
        self, request: coordinator_pb2.TaskExitedRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.TaskExitedResponse:
        with self.lock:
            self.exits[request.job_id] = time.time()
        return coordinator_pb2.TaskExitedResponse(accepted=True)


def wait(predicate: object, timeout_s: float = 30.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the worker did not answer in time")
        time.sleep(0.001)


def summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"{name:28} median {statistics.median(ms):7.1f} ms   p95 {p95:7.1f} ms   n={len(ms)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=20)
    args = parser.parse_args()
    recorder = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(recorder, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job.py"
        script.write_text(JOB)
        agent = WorkerAgent(
            settings_for_test(f"127.0.0.1:{port}", Path(tmp) / "state", progress_interval_s=0.05),
            FakeGpuProvider.from_spec("v100:1"),
            workloads=[],
        )
        agent.start()
        stub = worker_pb2_grpc.WorkerStub(grpc.insecure_channel(agent.address))  # type: ignore[no-untyped-call]
        # The agent's cluster token (settings_for_test makes one), as the master sends it.
        auth = (("authorization", f"Bearer {agent.settings.token}"),)
        user = pwd.getpwuid(os.geteuid()).pw_name
        applies: list[float] = []
        stops: list[float] = []
        finishes: list[float] = []
        try:
            for job_id in range(1, 2 * args.tasks + 1):
                finish = job_id > args.tasks
                spec = common_pb2.JobSpec(name="b", num_gpus=1, iterations=1)
                spec.script.argv.extend([sys.executable, str(script)])
                spec.env["MODE"] = "finish" if finish else "wait"
                request = worker_pb2.ApplyAssignmentsRequest(
                    assignments=[
                        worker_pb2.TaskAssignment(
                            job_id=job_id,
                            lease=1,
                            action=worker_pb2.ASSIGNMENT_ACTION_START,
                            spec=spec,
                            gpu_indices=[0],
                            user=user,
                        )
                    ]
                )
                began = time.monotonic()
                stub.ApplyAssignments(request, metadata=auth, timeout=10)
                applies.append(time.monotonic() - began)
                if finish:
                    wait(lambda j=job_id: j in recorder.exits)
                    progress = Path(tmp) / "state" / "tasks" / f"job-{job_id}.task-0.lease-1"
                    last = (progress / "progress-rank0.jsonl").read_text().splitlines()[-1]
                    exited_at = float(last.split('"at": ')[1].split(",")[0])
                    finishes.append(recorder.exits[job_id] - exited_at)
                    continue
                wait(lambda j=job_id: j in recorder.progress)
                wall = time.time()
                stub.StopTask(
                    worker_pb2.StopTaskRequest(job_id=job_id, checkpoint=True, grace_s=10),
                    metadata=auth,
                    timeout=10,
                )
                wait(lambda j=job_id: j in recorder.exits)
                stops.append(recorder.exits[job_id] - wall)
        finally:
            agent.stop(grace_s=2.0)
            server.stop(None)
    print(summary("apply START (spawn)", applies))
    print(summary("stop -> exit report", stops))
    print(summary("exit -> exit report", finishes))


if __name__ == "__main__":
    main()
