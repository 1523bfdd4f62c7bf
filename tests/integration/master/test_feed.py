"""The event feed WatchJobs reads: every event once, in order, with the job as it stood;
a cursor older than its window is sent to the store."""

from __future__ import annotations

import time

from master.service.feed import EventFeed
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Cluster
from tests.integration.master.test_api import spec


def test_the_feed_hands_each_watcher_what_follows_its_cursor(cluster: Cluster) -> None:
    """Events after a cursor come in id order with their jobs whole (private parts
    included: hiding them is the watcher's business); a cursor older than the window gets
    None, and changes made after a read are seen by the next read."""
    master = cluster.master()
    api = cluster.api(master, "alice", admin=False)
    feed = EventFeed(master.tx, master.changes, window=3)
    start = feed.cursor()

    ids = [
        api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(env={"SECRET": str(i)}))).job.id
        for i in range(2)
    ]
    entries = feed.after(start)
    assert entries is not None
    assert [e.job.id for e in entries] == ids
    assert [e.event.to_state for e in entries] == [common_pb2.JOB_STATE_PENDING] * 2
    assert [e.job.spec.env["SECRET"] for e in entries] == ["0", "1"]
    assert all(e.user == "alice" for e in entries)
    assert feed.after(entries[-1].event_id) == []

    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=ids[0]))
    later = feed.after(entries[-1].event_id)
    assert later is not None and [e.job.id for e in later] == [ids[0]]
    assert later[0].job.state == common_pb2.JOB_STATE_CANCELLED

    api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec()))
    api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec()))
    assert feed.after(start) is None
    assert feed.after(later[0].event_id) is not None


def test_reads_of_the_store_are_spaced_and_lose_no_change(cluster: Cluster) -> None:
    """A change within the spacing of the last read is read once the spacing has passed,
    together with whatever came meanwhile: no change is lost, and the store is not read
    again for each one."""
    master = cluster.master()
    api = cluster.api(master, "alice", admin=False)
    feed = EventFeed(master.tx, master.changes, spacing=0.4)
    start = feed.cursor()
    first = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id
    entries = feed.after(start)
    assert entries is not None and [e.job.id for e in entries] == [first]
    read_at = time.monotonic()

    later = [api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id for _ in range(3)]
    entries = feed.after(start)
    assert time.monotonic() - read_at >= 0.4
    assert entries is not None and [e.job.id for e in entries] == [first, *later]


def test_a_batched_watch_gets_the_same_changes_several_to_a_message(cluster: Cluster) -> None:
    """With `batch`, the changes found at one wake-up come in one message's `updates`, in
    the order a plain watch sends them one a message; another user's job comes with its
    private parts hidden there too."""
    master = cluster.master()
    alice = cluster.api(master, "alice", admin=False)
    bob = cluster.api(master, "bob", admin=False)
    theirs = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(env={"SECRET": "s"}))).job.id
    plain = bob.WatchJobs(hadar_pb2.WatchJobsRequest(include_initial=True), timeout=30)
    batched = bob.WatchJobs(
        hadar_pb2.WatchJobsRequest(include_initial=True, batch=True), timeout=30
    )
    first = next(iter(batched))
    assert not first.HasField("job") and [u.job.id for u in first.updates] == [theirs]
    assert first.updates[0].job.private_hidden and not first.updates[0].job.spec.env
    assert not first.updates[0].HasField("event")

    array = spec()
    array.array = "0-5"
    head = bob.SubmitJob(hadar_pb2.SubmitJobRequest(spec=array)).job.id
    mine = list(range(head, head + 6))
    seen: list[tuple[int, int]] = []
    messages = 0
    for message in batched:
        messages += 1
        seen += [(u.job.id, u.event.to_state) for u in message.updates]
        if len(seen) >= len(mine):
            break
    assert seen == [(job_id, common_pb2.JOB_STATE_PENDING) for job_id in mine]
    # The six elements, stored in one transaction, come in one message, not six.
    assert messages == 1
    one_each = [next(iter(plain)) for _ in range(1 + len(mine))]
    assert [m.job.id for m in one_each] == [theirs, *mine]
    assert all(not m.updates for m in one_each)
    batched.cancel()
    plain.cancel()
