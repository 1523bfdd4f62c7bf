"""The event feed WatchJobs reads: every event once, in the order it became visible, with
the job as it stood; a cursor older than its window starts again from the watched jobs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import delete

from master.service import feed as feed_module
from master.service.feed import EventFeed
from protos.hadar.v1 import common_pb2, hadar_pb2
from store.models import JobEventRow
from store.states import JobState
from store.testing import POSTGRES_ENV, backends, temporary_database_url
from tests.integration.master.conftest import Cluster
from tests.integration.master.test_api import spec


def test_the_feed_hands_each_watcher_what_follows_its_cursor(cluster: Cluster) -> None:
    """Events after a cursor come in order with their jobs whole (private parts included:
    hiding them is the watcher's business); a cursor older than the window gets None, and
    changes made after a read are seen by the next read."""
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
    assert [e.position for e in entries] == [start + 1, start + 2]
    assert feed.after(entries[-1].position) == []

    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=ids[0]))
    later = feed.after(entries[-1].position)
    assert later is not None and [e.job.id for e in later] == [ids[0]]
    assert later[0].job.state == common_pb2.JOB_STATE_CANCELLED

    api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec()))
    api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec()))
    assert feed.after(start) is None
    assert feed.after(later[0].position) is not None


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


@pytest.mark.skipif(
    "postgresql" not in backends(), reason=f"needs {POSTGRES_ENV} (writers side by side)"
)
def test_an_event_committed_after_a_later_one_reaches_the_feed_once_it_commits(
    tmp_path: Path,
) -> None:
    """On PostgreSQL a transaction that wrote an event can commit after one that wrote a
    later event: a read in between sees only the later one. The earlier one still reaches
    the feed, and a watcher, when its transaction commits, and a watch waiting for that job
    to end sees it end."""
    with temporary_database_url("postgresql", tmp_path) as url:
        cluster = Cluster(url, tmp_path)
        try:
            master = cluster.master()
            api = cluster.api(master, "alice", admin=False)
            slow = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id
            feed = EventFeed(master.tx, master.changes, spacing=0)
            start = feed.cursor()
            watch = api.WatchJobs(
                hadar_pb2.WatchJobsRequest(job_ids=[slow], include_initial=True, batch=True),
                timeout=30,
            )
            messages = iter(watch)
            # The watch has its cursor once its first look at the job has come.
            assert [u.job.id for u in next(messages).updates] == [slow]
            with master.database.transaction() as uow:
                # The event's id is drawn now; its transaction commits last.
                uow.jobs.transition(slow, JobState.CANCELLED, kind="cancelled", reason="test")
                fast = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id
                entries = feed.after(start)
                assert entries is not None
                assert [e.job.id for e in entries] == [fast]
                assert feed.missing >= 1
            # Written past the master's own paths, which tell of their changes themselves.
            master.changes.notify()
            later = feed.after(entries[-1].position)
            assert later is not None
            assert [(e.job.id, e.event.to_state) for e in later] == [
                (slow, common_pb2.JOB_STATE_CANCELLED)
            ]
            assert later[0].event_id < entries[0].event_id
            assert feed.missing == 0
            message = next(messages)
            assert [(u.job.id, u.job.state) for u in message.updates] == [
                (slow, common_pb2.JOB_STATE_CANCELLED)
            ]
            watch.cancel()
        finally:
            cluster.close()


def test_an_event_id_never_seen_is_asked_for_until_the_hold_ends(cluster: Cluster) -> None:
    """An id below the highest one read that never becomes visible (its transaction rolled
    back, here its row removed) is asked for again on each read for the hold, then let go;
    the events around it come through meanwhile."""
    master = cluster.master()
    api = cluster.api(master, "alice", admin=False)
    now = [1000.0]
    feed = EventFeed(master.tx, master.changes, spacing=0, gap_hold_s=60, clock=lambda: now[0])
    start = feed.cursor()
    a, b, c = (api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id for _ in range(3))
    with master.database.transaction() as uow:
        uow.session.execute(delete(JobEventRow).where(JobEventRow.job_id == b))
    master.changes.notify()
    entries = feed.after(start)
    assert entries is not None and [e.job.id for e in entries] == [a, c]
    assert feed.missing == 1

    now[0] += 59
    d = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id
    later = feed.after(entries[-1].position)
    assert later is not None and [e.job.id for e in later] == [d]
    assert feed.missing == 1

    now[0] += 2
    api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec()))
    assert feed.after(later[-1].position) is not None
    assert feed.missing == 0


def test_a_watch_further_behind_than_the_feed_gets_its_jobs_again_and_goes_on(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch whose changes left the feed's window before it read them gets the current
    state of its jobs (without events), as after a reconnect, and the changes after that
    as events."""
    monkeypatch.setattr(feed_module, "WINDOW", 2)
    master = cluster.master()
    api = cluster.api(master, "alice", admin=False)
    before = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id
    watch = api.WatchJobs(hadar_pb2.WatchJobsRequest(include_initial=True, batch=True), timeout=30)
    messages = iter(watch)
    # The watch has its cursor once its first look at the jobs has come.
    assert [u.job.id for u in next(messages).updates] == [before]
    array = spec()
    array.array = "0-5"
    head = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=array)).job.id
    jobs = list(range(head, head + 6))
    # Six events in one transaction, read at once into a window of two.
    again = next(messages)
    assert [(u.job.id, u.HasField("event")) for u in again.updates] == [
        (job_id, False) for job_id in [before, *jobs]
    ]
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=jobs[0]))
    second = next(messages)
    assert [(u.job.id, u.event.to_state) for u in second.updates] == [
        (jobs[0], common_pb2.JOB_STATE_CANCELLED)
    ]
    watch.cancel()
