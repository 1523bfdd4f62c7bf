"""StreamLogs: a job's output relayed from the workers of every attempt, against real gRPC
servers (the master, and fake workers that serve logs as a real worker does)."""

from __future__ import annotations

import threading
import time

import grpc

from master.jobs.logs import PUMP_THREAD
from protos.hadar.v1 import common_pb2, hadar_pb2, worker_pb2
from tests.integration.master.conftest import Cluster
from tests.integration.master.fakes import wait_for
from tests.integration.master.test_api import error_of, spec


def test_a_just_finished_jobs_logs_come_from_every_one_of_its_tasks(cluster: Cluster) -> None:
    """Just after a job completes, some of its tasks have reported their exit and others
    not yet: the output of every task (every rank) is relayed, not only the unfinished."""
    master = cluster.master()
    first = cluster.worker(master, "n1")
    second = cluster.worker(master, "n2", auto_exit_on_stop=False)
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(num_gpus=8))).job
    master.run_round()
    wait_for(lambda: job.id in first.running_jobs() and job.id in second.running_jobs())
    first.log_lines[job.id] = b"rank 0 done\n"
    second.log_lines[job.id] = b"rank 4 done\n"
    first.exit(job.id, common_pb2.EXIT_KIND_COMPLETED)
    done = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert done.state == common_pb2.JOB_STATE_COMPLETED
    chunks = list(api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=job.id)))
    by_node = {c.node: c.data for c in chunks if c.data}
    assert by_node == {"n1": b"rank 0 done\n", "n2": b"rank 4 done\n"}


def test_stream_logs_answers_not_found_when_the_worker_has_no_such_task(
    cluster: Cluster,
) -> None:
    """A worker that no longer has an ended task of the job (its logs are gone) answers
    NOT_FOUND, and so does the relay: the master and the worker are both reachable."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED)
    failure = error_of(lambda: list(api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=job.id))))
    assert failure.code == grpc.StatusCode.NOT_FOUND
    assert "n1" in failure.details and "attempt 1" in failure.details


def test_an_attempt_that_never_started_is_announced_with_the_reason(cluster: Cluster) -> None:
    """An attempt whose start the worker refused has no output: the relay announces it with
    the start failure instead of asking the worker (which has nothing)."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    worker.fail_starts[job.id] = "workdir /data/alice does not exist on this node"
    master.run_round()
    wait_for(
        lambda: (
            api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job.state
            == common_pb2.JOB_STATE_PREEMPTED
        ),
        what="the failed start",
    )
    (opening,) = list(api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=job.id)))
    assert (opening.attempt, opening.attempts, opening.data) == (1, 1, b"")
    assert "could not start on n1" in opening.start_failure
    assert "workdir /data/alice does not exist" in opening.start_failure


def test_every_attempt_is_relayed_in_order_and_one_on_request(cluster: Cluster) -> None:
    """Each placement's output is kept: all attempts come in order, each opened by a chunk
    naming it and its nodes; `attempt` picks one. The attempt after a failed one starts
    with the reason it was requeued, for its output."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    first = worker.applied[-1].lease
    worker.lease_logs[(job.id, first)] = b"attempt one\n"
    worker.exit(job.id, common_pb2.EXIT_KIND_FAILED, exit_code=1)
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="the second START")
    restart = worker.applied[-1]
    second = restart.lease
    assert second > first
    assert restart.reason.startswith("requeued after "), restart.reason
    assert "retry 1 of" in restart.reason, restart.reason
    worker.lease_logs[(job.id, second)] = b"attempt two\n"

    def read(follow: bool = False, attempt: int | None = None) -> list[tuple[int, int, bytes]]:
        request = hadar_pb2.StreamLogsRequest(job_id=job.id, follow=follow, attempt=attempt)
        return [(c.attempt, c.lease, c.data) for c in api.StreamLogs(request)]

    assert read() == [
        (1, first, b""),
        (1, first, b"attempt one\n"),
        (2, second, b""),
        (2, second, b"attempt two\n"),
    ]
    assert read(attempt=1) == [(1, first, b""), (1, first, b"attempt one\n")]
    openings = [c for c in api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=job.id)) if not c.data]
    assert [list(c.nodes) for c in openings] == [["n1"], ["n1"]]
    missing = error_of(lambda: read(attempt=3))
    assert missing.code == grpc.StatusCode.NOT_FOUND
    assert "has no attempt 3 (it has had 2)" in missing.details


def test_a_running_task_its_worker_has_no_logs_of_yet_shows_no_output_not_an_error(
    cluster: Cluster,
) -> None:
    """A task still placed whose worker has no logs of it yet (it waits for its previous
    lease to stop there) has no output so far: the attempt is announced, nothing fails."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    chunks = list(api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=job.id)))
    assert [(c.attempt, c.data) for c in chunks] == [(1, b"")]


def test_an_unreachable_workers_attempt_does_not_hold_back_the_others(cluster: Cluster) -> None:
    """The node of an earlier attempt is down: the later attempt's output is still relayed,
    and the stream then ends UNAVAILABLE naming the node and the attempt it could not read."""
    master = cluster.master()
    workers = {w.name: w for w in (cluster.worker(master, "n1"), cluster.worker(master, "n2"))}
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    first = wait_for(
        lambda: next((w for w in workers.values() if job.id in w.running_jobs()), None),
        what="START",
    )
    (other,) = [w for w in workers.values() if w is not first]
    first.lease_logs[(job.id, first.applied[-1].lease)] = b"attempt one\n"
    api.DrainNode(hadar_pb2.DrainNodeRequest(node=first.name))
    first.exit(job.id, common_pb2.EXIT_KIND_FAILED, exit_code=1)
    master.run_round()
    wait_for(lambda: job.id in other.running_jobs(), what="the START elsewhere")
    other.lease_logs[(job.id, other.applied[-1].lease)] = b"attempt two\n"
    first.close()
    received: list[common_pb2.LogChunk] = []

    def read() -> None:
        for chunk in api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=job.id)):
            received.append(chunk)

    failure = error_of(read)
    assert failure.code == grpc.StatusCode.UNAVAILABLE
    assert f"attempt 1 of job {job.id} on {first.name}" in failure.details
    assert [(c.attempt, c.node, c.data) for c in received if c.data] == [
        (2, other.name, b"attempt two\n")
    ]


def test_following_waits_for_a_pending_job_and_goes_on_across_a_migration_until_it_ends(
    cluster: Cluster,
) -> None:
    """A follow started on a pending job waits; then relays the first attempt's output as it
    is written (well within 2 s), goes on with the attempt a drain moved to another node
    (opened by a chunk naming it and its node), and ends, without error, once the job has
    completed. The STOP that moved it carried why, for the job's output."""
    master = cluster.master()
    workers = {w.name: w for w in (cluster.worker(master, "n1"), cluster.worker(master, "n2"))}
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    received: list[tuple[float, common_pb2.LogChunk]] = []
    outcome: list[BaseException | None] = []

    def follow() -> None:
        try:
            request = hadar_pb2.StreamLogsRequest(job_id=job.id, follow=True)
            for chunk in api.StreamLogs(request, timeout=60):
                received.append((time.monotonic(), chunk))
            outcome.append(None)
        except grpc.RpcError as exc:
            outcome.append(exc)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    time.sleep(0.5)
    assert (received, outcome) == ([], []), "a pending job's follow ended or sent something"

    master.run_round()
    first = wait_for(
        lambda: next((w for w in workers.values() if job.id in w.running_jobs()), None),
        what="START",
    )
    (other,) = [w for w in workers.values() if w is not first]
    lease = first.applied[-1].lease
    written = time.monotonic()
    first.lease_logs[(job.id, lease)] = b"step 1\n"
    at, chunk = wait_for(lambda: next(((t, c) for t, c in received if c.data), None))
    assert (chunk.attempt, chunk.data) == (1, b"step 1\n")
    assert at - written < 2.0

    api.DrainNode(hadar_pb2.DrainNodeRequest(node=first.name))
    master.run_round()
    wait_for(lambda: job.id not in first.running_jobs(), what="the STOP on the drained node")
    # The new placement starts once the old one has stopped: the next round sends it.
    master.run_round()
    wait_for(lambda: job.id in other.running_jobs(), what="the START on the other node")
    (stop,) = [
        a
        for a in first.applied
        if a.job_id == job.id and a.action == worker_pb2.ASSIGNMENT_ACTION_STOP
    ]
    # FIFO plans no move: the drain preempts it, and a later round places it elsewhere.
    assert stop.reason.startswith("preempted in round "), stop.reason
    assert stop.reason.endswith(f"(node {first.name} is draining)"), stop.reason
    assert stop.resumes
    other.lease_logs[(job.id, other.applied[-1].lease)] = b"step 2\n"
    wait_for(lambda: any(c.data == b"step 2\n" for _, c in received), what="attempt 2's output")
    assert outcome == [], "the follow ended while the job still runs"

    other.exit(job.id, common_pb2.EXIT_KIND_COMPLETED)
    follower.join(timeout=15)
    assert outcome == [None]
    openings = [(c.attempt, list(c.nodes)) for _, c in received if not c.data]
    assert openings == [(1, [first.name]), (2, [other.name])]
    assert [(c.attempt, c.data) for _, c in received if c.data] == [
        (1, b"step 1\n"),
        (2, b"step 2\n"),
    ]


def test_a_follower_that_reads_nothing_holds_up_nobody_and_its_relay_ends_with_it(
    cluster: Cluster,
) -> None:
    """A client follows a job that writes far more than it reads: the relay's buffers
    fill and the worker's stream waits, while the master still answers other calls and
    runs rounds at once. When the client goes, the threads reading from the worker end."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.lease_logs[(job.id, worker.applied[-1].lease)] = b"x" * (48 << 20)
    call = api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=job.id, follow=True))

    def relaying() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith(f"{PUMP_THREAD}-{job.id}-")]

    wait_for(relaying, what="the relay to read from the worker")
    time.sleep(1.0)  # long enough for every buffer on the way to fill
    started = time.monotonic()
    other = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    assert api.GetJob(hadar_pb2.GetJobRequest(job_id=other.id)).job.id == other.id
    master.run_round()
    assert time.monotonic() - started < 5.0
    assert relaying(), "the relay gave up while its client was still there"
    call.cancel()
    wait_for(lambda: not relaying(), timeout=15, what="the relay's threads to end")


def test_an_unreachable_nodes_output_is_reported_at_once_not_waited_for(cluster: Cluster) -> None:
    """The attempt ran on a node now UNREACHABLE (it answers nothing): reading the job's
    output, followed or not, ends at once UNAVAILABLE saying that node is unreachable and
    keeps the output, rather than hanging on a connection that does not come."""
    master = cluster.master(heartbeat_timeout_s=2.0)
    first = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in first.running_jobs(), what="START")
    first.lease_logs[(job.id, first.applied[-1].lease)] = b"attempt one\n"
    first.freeze()

    def lost() -> bool:
        master.check_nodes(force=True)
        nodes = api.ListNodes(hadar_pb2.ListNodesRequest()).nodes
        return any(n.name == "n1" and n.state == common_pb2.NODE_STATE_UNREACHABLE for n in nodes)

    wait_for(lost, what="n1 to be unreachable")
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id))
    for follow in (False, True):
        started = time.monotonic()
        request = hadar_pb2.StreamLogsRequest(job_id=job.id, follow=follow)
        failure = error_of(lambda: list(api.StreamLogs(request, timeout=30)))  # noqa: B023
        assert failure.code == grpc.StatusCode.UNAVAILABLE
        assert "node n1 is unreachable" in failure.details, failure.details
        assert "attempt 1 of job" in failure.details
        assert time.monotonic() - started < 5.0


def test_following_a_pending_job_that_is_cancelled_ends_without_output(cluster: Cluster) -> None:
    """A job cancelled before it was ever placed: its follower, waiting, ends cleanly with
    nothing to show."""
    master = cluster.master()
    cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    received: list[common_pb2.LogChunk] = []
    done = threading.Event()

    def follow() -> None:
        request = hadar_pb2.StreamLogsRequest(job_id=job.id, follow=True)
        received.extend(api.StreamLogs(request, timeout=30))
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    assert not done.wait(1.0), "the follow of a pending job ended"
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id))
    assert done.wait(10.0), "the follow did not end with the job"
    assert received == []


def test_a_follow_reads_on_without_repeats_when_the_workers_stream_breaks(
    cluster: Cluster,
) -> None:
    """The worker's stream ends while the master still has the task running (its agent
    restarted and adopted the task): the follow reads the task's output again and relays
    only what it had not, so nothing is lost and nothing printed twice."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    key = (job.id, worker.applied[-1].lease)
    worker.lease_logs[key] = b"before\n"
    received: list[bytes] = []
    done = threading.Event()

    def follow() -> None:
        request = hadar_pb2.StreamLogsRequest(job_id=job.id, follow=True)
        received.extend(c.data for c in api.StreamLogs(request, timeout=60) if c.data)
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    wait_for(lambda: received == [b"before\n"], what="the output so far")
    worker.stream_epoch += 1
    worker.lease_logs[key] = b"before\nafter\n"
    wait_for(lambda: b"".join(received) == b"before\nafter\n", what="the output after the break")
    worker.exit(job.id, common_pb2.EXIT_KIND_COMPLETED)
    assert done.wait(15), "the follow did not end with the job"
    assert b"".join(received) == b"before\nafter\n"
