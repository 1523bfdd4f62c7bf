"""The typed Python client against a real master: values, errors, idempotency, watches."""

from __future__ import annotations

import threading

import pytest

from clients import (
    HadarClient,
    InvalidArgument,
    JobSpec,
    JobState,
    NotFound,
    PermissionDenied,
    Program,
    Unauthenticated,
    Unavailable,
)
from clients.client import local_user
from clients.types import Job, JobUpdate
from protos.hadar.v1 import common_pb2
from tests.integration.cli.conftest import Cluster

RESNET = JobSpec("rn", Program.builtin("resnet"), iterations=20)


def client_for(cluster: Cluster, user: str = "alice") -> HadarClient:
    return HadarClient(cluster.address, cluster.tokens[user], timeout=10)


def test_submit_returns_a_plain_job_and_a_repeated_key_returns_the_same_job(cluster: Cluster):
    """Retrying a submit with its idempotency key cannot create a second job."""
    with client_for(cluster) as hadar:
        first = hadar.submit_job(RESNET, idempotency_key="exp-42")
        again = hadar.submit_job(RESNET, idempotency_key="exp-42")
        other = hadar.submit_job(RESNET)
    assert isinstance(first, Job)
    assert (first.state, first.user, first.spec.program) == (
        JobState.PENDING,
        "alice",
        Program.builtin("resnet"),
    )
    assert again.id == first.id
    assert other.id != first.id


def test_listing_follows_pages_and_filters(cluster: Cluster):
    """iter_jobs walks every page; user and state filters are applied by the master."""
    with client_for(cluster) as alice, client_for(cluster, "bob") as bob:
        mine = [alice.submit_job(RESNET).id for _ in range(5)]
        bobs = bob.submit_job(RESNET).id
        assert [j.id for j in alice.iter_jobs(page_size=2)] == [*mine, bobs]
        assert [j.id for j in alice.list_jobs(user="bob")] == [bobs]
        alice.cancel_job(mine[0])
        cancelled = alice.list_jobs(states=[JobState.CANCELLED])
        assert [j.id for j in cancelled] == [mine[0]]


def test_master_errors_arrive_as_the_client_exceptions(cluster: Cluster):
    """NOT_FOUND, INVALID_ARGUMENT (with its field), PERMISSION_DENIED, UNAUTHENTICATED."""
    with client_for(cluster) as alice, client_for(cluster, "bob") as bob:
        with pytest.raises(NotFound):
            alice.get_job(4242)
        with pytest.raises(InvalidArgument) as invalid:
            alice.submit_job(JobSpec("big", Program.builtin("resnet"), iterations=5, num_gpus=9))
        assert invalid.value.field == "spec.num_gpus"
        job = alice.submit_job(RESNET)
        with pytest.raises(PermissionDenied):
            bob.cancel_job(job.id)
        with pytest.raises(PermissionDenied):
            bob.drain_node("gpu-a")
    with (
        HadarClient(cluster.address, "hdr_not-a-real-token") as stranger,
        pytest.raises(Unauthenticated),
    ):
        stranger.whoami()


def test_an_unreachable_master_raises_unavailable_within_the_deadline():
    """Nothing listens on port 1: Unavailable, after the retries the deadline allows."""
    with HadarClient("127.0.0.1:1", timeout=2) as hadar, pytest.raises(Unavailable):
        hadar.list_jobs()


def test_describe_job_carries_placement_progress_and_history(cluster: Cluster):
    """A running job has its task, measured throughput and events, oldest first."""
    with client_for(cluster) as hadar:
        job = hadar.submit_job(RESNET)
        cluster.round()
        worker = cluster.worker_running(job.id)
        worker.report_progress(job.id, 8, iterations_per_s=2.0)
        described = hadar.describe_job(job.id)
    assert described.job.state is JobState.RUNNING
    (task,) = described.job.tasks
    assert task.node == worker.node
    assert described.job.iterations_done == 8
    assert described.job.progress == pytest.approx(0.4)
    measured = {t.gpu_type: t for t in described.job.throughputs}[task.gpu_type]
    assert measured.iterations_per_s == pytest.approx(2.0)
    assert [e.kind for e in described.events] == ["submitted", "scheduled"]
    assert described.events[1].to_state is JobState.RUNNING


def test_watch_streams_each_change_until_the_job_ends(cluster: Cluster):
    """The initial snapshot, then scheduling and completion, as they happen."""
    with client_for(cluster) as hadar:
        job = hadar.submit_job(RESNET)
        updates: list[JobUpdate] = []
        first = threading.Event()

        def watch() -> None:
            for update in hadar.watch_jobs([job.id], timeout=20):
                updates.append(update)
                first.set()
                if update.job.state.terminal:
                    return

        watcher = threading.Thread(target=watch)
        watcher.start()
        assert first.wait(10), "no initial snapshot"
        cluster.round()
        cluster.worker_running(job.id).exit(
            job.id, common_pb2.EXIT_KIND_COMPLETED, iterations_done=20
        )
        watcher.join(20)
        assert not watcher.is_alive()
    assert updates[0].event is None
    assert updates[0].job.state is JobState.PENDING
    states = [u.job.state for u in updates]
    assert JobState.RUNNING in states
    assert states[-1] is JobState.COMPLETED
    kinds = [u.event.kind for u in updates[1:] if u.event is not None]
    assert kinds[0] == "scheduled" and kinds[-1] == "completed"


def test_logs_stream_as_chunks(cluster: Cluster):
    """stream_logs returns the worker's bytes with their node and offset, after a chunk
    without data that opens the attempt."""
    with client_for(cluster) as hadar:
        job = hadar.submit_job(RESNET)
        cluster.round()
        worker = cluster.worker_running(job.id)
        worker.write_log(job.id, "loss 0.9\n")
        opening, *chunks = list(hadar.stream_logs(job.id))
    assert (opening.attempt, opening.attempts, opening.data) == (1, 1, b"")
    assert b"".join(c.data for c in chunks) == b"loss 0.9\n"
    assert chunks[0].node == worker.node
    assert chunks[0].offset == 0


def test_without_auth_the_master_goes_by_the_os_user_header(dev_cluster: Cluster):
    """In development mode (auth = none) x-hadar-user names the caller."""
    with HadarClient(dev_cluster.address, user="zed") as hadar:
        assert hadar.whoami().user == "zed"
        assert hadar.submit_job(RESNET).user == "zed"
    with HadarClient(dev_cluster.address) as default:
        assert default.whoami().user == local_user()
