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
