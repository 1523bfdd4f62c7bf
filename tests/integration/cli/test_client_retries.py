"""Which calls the client repeats when the master is briefly unavailable, over real gRPC.

A small Hadar server answers UNAVAILABLE a set number of times per method before answering
properly, and records every request it received.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from clients import HadarClient, JobSpec, Program, Unavailable
from clients.retry import RetryPolicy
from protos.hadar.v1 import common_pb2, hadar_pb2, hadar_pb2_grpc

FAST = RetryPolicy(attempts=4, initial_backoff_s=0.01, max_backoff_s=0.05)


class FlakyHadar(hadar_pb2_grpc.HadarServicer):
    def __init__(self, failures: dict[str, int]) -> None:
        self.failures = Counter(failures)
        self.calls: Counter[str] = Counter()
        self.submit_keys: list[str] = []
        self.lock = threading.Lock()

    def _maybe_fail(self, method: str, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.calls[method] += 1
            failing = self.failures[method] > 0
            if failing:
                self.failures[method] -= 1
        if failing:
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")

    @staticmethod
    def job(job_id: int, state: common_pb2.JobState) -> common_pb2.Job:
        job = common_pb2.Job(id=job_id, user="alice", state=state)
        job.spec.name = "j"
        job.spec.iterations = 10
        job.spec.workload.name = "resnet"
        return job

    def SubmitJob(self, request, context):
        with self.lock:
            self.submit_keys.append(request.idempotency_key)
        self._maybe_fail("SubmitJob", context)
        return hadar_pb2.SubmitJobResponse(job=self.job(1, common_pb2.JOB_STATE_PENDING))

    def GetJob(self, request, context):
        self._maybe_fail("GetJob", context)
        return hadar_pb2.GetJobResponse(job=self.job(request.job_id, common_pb2.JOB_STATE_PENDING))

    def DrainNode(self, request, context):
        self._maybe_fail("DrainNode", context)
        return hadar_pb2.DrainNodeResponse(node=common_pb2.Node(name=request.node))

    def WatchJobs(self, request, context) -> Iterator[hadar_pb2.WatchJobsResponse]:
        with self.lock:
            self.calls["WatchJobs"] += 1
            attempt = self.calls["WatchJobs"]
        if attempt == 1:
            # One update, then the stream breaks as if the master restarted.
            yield hadar_pb2.WatchJobsResponse(job=self.job(1, common_pb2.JOB_STATE_PENDING))
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        assert request.include_initial, "a resumed watch must start with a fresh snapshot"
        yield hadar_pb2.WatchJobsResponse(job=self.job(1, common_pb2.JOB_STATE_RUNNING))
        yield hadar_pb2.WatchJobsResponse(job=self.job(1, common_pb2.JOB_STATE_COMPLETED))


@pytest.fixture
def flaky() -> Iterator[tuple[FlakyHadar, str]]:
    servicer = FlakyHadar({"SubmitJob": 2, "GetJob": 3, "DrainNode": 1})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    hadar_pb2_grpc.add_HadarServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def test_reads_are_retried_until_the_master_answers(flaky):
    """Three UNAVAILABLEs, then an answer: the caller only sees the answer."""
    servicer, address = flaky
    with HadarClient(address, timeout=5, retry=FAST) as hadar:
        assert hadar.get_job(7).id == 7
    assert servicer.calls["GetJob"] == 4


def test_submits_are_retried_with_one_idempotency_key(flaky):
    """Every attempt of one submit carries the same key, so the master creates one job."""
    servicer, address = flaky
    with HadarClient(address, timeout=5, retry=FAST) as hadar:
        job = hadar.submit_job(JobSpec("j", Program.builtin("resnet"), iterations=10))
    assert job.id == 1
    assert len(servicer.submit_keys) == 3
    assert len(set(servicer.submit_keys)) == 1 and servicer.submit_keys[0]


def test_changes_that_are_not_idempotent_are_not_retried(flaky):
    """A drain that met UNAVAILABLE is reported, not silently sent again."""
    servicer, address = flaky
    with HadarClient(address, timeout=5, retry=FAST) as hadar, pytest.raises(Unavailable):
        hadar.drain_node("gpu-a")
    assert servicer.calls["DrainNode"] == 1


def test_a_broken_watch_resumes_with_a_fresh_snapshot(flaky):
    """After the stream breaks, the watch reconnects and the caller sees the job to its end."""
    servicer, address = flaky
    with HadarClient(address, timeout=5, retry=FAST) as hadar:
        states = [u.job.state.value for u in hadar.watch_jobs([1], timeout=10)]
    assert states == ["pending", "running", "completed"]
    assert servicer.calls["WatchJobs"] == 2
