"""What the dashboard's pages compute, from plain client values: queue lines and pages,
GPUs by type, progress samples, utilization, JCT bins and the day matrix."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from clients.types import (
    Gpu,
    GpuHealth,
    Job,
    JobEvent,
    JobRecord,
    JobSpec,
    JobState,
    Node,
    NodeState,
    Program,
)
from dashboard.views import (
    FilterError,
    ProgressLog,
    QueueFilter,
    day_matrix,
    gpus_by_type,
    jct_histogram,
    placements,
    poll_interval,
    queue_page,
    troubled_nodes,
    utilization_over_time,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def make_job(job_id: int, state: JobState = JobState.PENDING, **spec: object) -> Job:
    return Job(
        id=job_id,
        spec=JobSpec(f"job-{job_id}", Program.builtin("resnet"), iterations=100, **spec),  # type: ignore[arg-type]
        user="alice",
        state=state,
        reason="",
        iterations_done=0,
        attained_service=0.0,
        submitted_at=T0,
        started_at=None,
        finished_at=None,
        tasks=(),
        retries=0,
        exit_code=None,
        throughputs=(),
        version=1,
        preemptions=0,
        migrations=0,
        checkpoint_iterations=0,
    )


def test_queue_pages_cut_lines_and_clamp_past_the_last() -> None:
    """250 jobs in pages of 100 are 3 pages; page 9 shows the last page."""
    jobs = [make_job(i) for i in range(1, 251)]
    first = queue_page(jobs, 1, 100)
    assert (first.pages, len(first.rows), first.rows[0].first.id) == (3, 100, 1)
    last = queue_page(jobs, 9, 100)
    assert (last.page, len(last.rows), last.rows[-1].first.id) == (3, 50, 250)
    assert queue_page([], 1, 100).pages == 1


def test_an_arrays_pending_elements_fold_into_one_line() -> None:
    """Five pending elements of array 10 are one line `10_[0-4]`; a running one keeps its own."""
    elements = [make_job(10 + i, array="0-5", array_job_id=10, array_index=i) for i in range(5)] + [
        make_job(15, JobState.RUNNING, array="0-5", array_job_id=10, array_index=5)
    ]
    page = queue_page(elements, 1, 100)
    assert [r.shown_id for r in page.rows] == ["10_[0-4]", "10_5"]
    assert (page.total_rows, page.total_jobs) == (2, 6)


def test_queue_filter_parses_and_names_what_is_wrong() -> None:
    """Known states and page numbers parse; anything else is a FilterError naming the field."""
    chosen = QueueFilter.parse(" bob ", "RUNNING", "2")
    assert chosen == QueueFilter("bob", (JobState.RUNNING,), 2)
    assert QueueFilter.parse(None, None, None).states[0] is JobState.PENDING
    with pytest.raises(FilterError, match="state: 'asleep'"):
        QueueFilter.parse("", "asleep", "")
    for page in ("0", "-1", "x"):
        with pytest.raises(FilterError, match="page:"):
            QueueFilter.parse("", "", page)


def gpu(index: int, kind: str, jobs: tuple[int, ...] = (), util: float = 0.0) -> Gpu:
    return Gpu(index, kind, 0, kind, f"uuid-{index}", GpuHealth.HEALTHY, util, jobs, True)


def node(name: str, state: NodeState, *gpus: Gpu) -> Node:
    return Node(name, state, "", gpus, T0, "", "", T0)


def test_gpus_group_by_type_with_their_jobs_users() -> None:
    """Each GPU appears once under its type, with the users of the jobs on it."""
    nodes = [
        node("b", NodeState.DRAINED, gpu(0, "k80")),
        node("a", NodeState.READY, gpu(1, "v100", (7,), 0.9), gpu(0, "v100", (7, 8))),
    ]
    groups = gpus_by_type(nodes, {7: "alice", 8: "bob"})
    assert [g.type for g in groups] == ["k80", "v100"]
    v100 = groups[1]
    assert [(g.node, g.index) for g in v100.gpus] == [("a", 0), ("a", 1)]
    assert v100.gpus[0].users == ("alice", "bob")
    assert v100.busy == 2 and groups[0].busy == 0
    assert [n.name for n in troubled_nodes(nodes)] == ["b"]


def test_progress_log_gives_throughput_between_samples() -> None:
    """Samples of a job give iterations per second between them; old jobs are dropped."""
    log = ProgressLog(keep=10, jobs=2)
    job = make_job(1, JobState.RUNNING)
    for second, done in ((0.0, 0), (2.0, 20), (4.0, 60)):
        log.record(replace(job, iterations_done=done), second)
    times, done_series, rates = log.series(1)
    assert times == [0.0, 2.0, 4.0]
    assert done_series == [0, 20, 60]
    assert rates == [None, 10.0, 20.0]
    log.record(make_job(2), 5.0)
    log.record(make_job(3), 5.0)
    assert log.series(1) == ([], [], [])


def record(start: datetime, end: datetime, gpu_seconds: float, submitted: datetime) -> JobRecord:
    job = replace(make_job(1, JobState.COMPLETED), submitted_at=submitted, started_at=start)
    job = replace(job, finished_at=end)
    return JobRecord(job, (end - start).total_seconds(), gpu_seconds, 1, ("v100",))


def test_utilization_spreads_gpu_seconds_over_the_jobs_time() -> None:
    """A 2-GPU job that ran the whole last hour on a 4-GPU cluster is 50% of the last bin;
    a running 4-GPU job started 30 minutes ago fills half of that bin too."""
    now = T0
    done = record(now - timedelta(hours=1), now, 2 * 3600.0, now - timedelta(hours=2))
    series = utilization_over_time([done], [], 4, now, span=timedelta(hours=2), bins=2)
    assert series.ys["busy"] == [0.0, 50.0]
    running = replace(
        make_job(2, JobState.RUNNING, num_gpus=4), started_at=now - timedelta(minutes=30)
    )
    both = utilization_over_time([done], [running], 4, now, span=timedelta(hours=2), bins=2)
    assert both.ys["busy"] == [0.0, 100.0]


def test_jct_histogram_counts_every_ended_job_once() -> None:
    """JCTs from one minute to 1000 minutes land in log-spaced bins covering both ends."""
    records = [record(T0, T0 + timedelta(minutes=m), 60.0, T0) for m in (1, 10, 10, 100, 1000)]
    histogram = jct_histogram(records, bins=3)
    assert sum(histogram.counts) == 5
    assert histogram.edges[0] == pytest.approx(1.0)
    assert histogram.edges[-1] == pytest.approx(1000.0)
    assert histogram.counts == [1, 2, 2]
    assert jct_histogram([]).counts == []


def test_day_matrix_fills_missing_days_with_zero() -> None:
    """Users become series over the union of their days, 0 where one had no use."""
    series = day_matrix({"bob": {"2026-03-02": 1.5}, "alice": {"2026-03-01": 2.0}})
    assert list(series.ys) == ["alice", "bob"]
    assert series.ys["alice"] == [2.0, 0.0]
    assert series.ys["bob"] == [0.0, 1.5]
    assert series.x[1] - series.x[0] == 86400


def test_a_slow_page_polls_less_often() -> None:
    """A page polls at its pace, slowed to five times what its calls took, at most 30 s."""
    assert poll_interval(1.0, 1.0, 0.05) == 1.0
    assert poll_interval(1.0, 10.0, 0.05) == 10.0
    assert poll_interval(1.0, 1.0, 0.4) == 2.0
    assert poll_interval(1.0, 0.2, 0.0) == 1.0
    assert poll_interval(1.0, 1.0, 60.0) == 30.0


def test_placements_number_attempts_from_the_timeline() -> None:
    """Each `scheduled` starts an attempt; a migration moves the current one; other events
    are not placements."""

    def event(kind: str, reason: str) -> JobEvent:
        return JobEvent(1, T0, JobState.PENDING, JobState.RUNNING, kind, reason, 0)

    timeline = [
        event("submitted", "by alice"),
        event("scheduled", "placed on a:0"),
        event("migrated", "moved to b:1"),
        event("preempted", "for job 2"),
        event("scheduled", "placed on c:0"),
    ]
    found = [(p.attempt, p.event.reason) for p in placements(timeline)]
    assert found == [(1, "placed on a:0"), (1, "moved to b:1"), (2, "placed on c:0")]
