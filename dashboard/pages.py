"""One function per page: the calls it makes to the master (as the logged-in user) and what
its template gets. Errors propagate as the client's exceptions; the app turns them into a
404 page, the login page or the outage banner."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request

from clients.cli.arrays import display_id
from clients.errors import HadarError, PermissionDenied
from clients.types import Job, JobState, UsageGrouping
from dashboard.views import (
    QueueFilter,
    Series,
    day_matrix,
    gpus_by_type,
    history_span,
    jct_histogram,
    placements,
    queue_page,
    troubled_nodes,
    utilization_over_time,
)
from protos.arrays import parse_job_ref

if TYPE_CHECKING:
    from dashboard.app import Dashboard
    from dashboard.sessions import Session

View = Callable[["Dashboard", "Session", Request], tuple[str, dict[str, Any]]]

EXPIRED_NOTE = "your session ended or your token is no longer accepted: log in again"
LOG_TAIL_LINES = 40
# Users whose day-by-day use the history page plots (the heaviest).
HISTORY_USERS = 8
HISTORY_REFRESH_S = 10.0


# -- template filters ----------------------------------------------------------------------------


def when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def ago(value: datetime | None) -> str:
    if value is None:
        return ""
    return duration((datetime.now(UTC) - value).total_seconds())


def chart(
    kind: str, series: Series, *, unit: str = "", labels: Sequence[str] = ()
) -> dict[str, Any]:
    """What dashboard.js draws with uPlot: 'line' over time (x in Unix seconds), or 'bars'
    over categories (x is 0, 1, ... and `labels` names each)."""
    x = series.x if kind == "line" else [float(i) for i in range(len(labels))]
    return {
        "kind": kind,
        "unit": unit,
        "x": x,
        "labels": list(labels),
        "series": [{"label": k, "values": v} for k, v in series.ys.items()],
    }


def day_labels(series: Series) -> list[str]:
    return [datetime.fromtimestamp(x, UTC).strftime("%m-%d") for x in series.x]


# -- pages ------------------------------------------------------------------------------------


def cluster(board: Dashboard, session: Session, request: Request) -> tuple[str, dict[str, Any]]:
    client = session.client
    status = client.cluster_status()
    nodes = client.list_nodes()
    running = client.list_jobs(states=(JobState.RUNNING,))
    owners = {job.id: job.user for job in running}
    return "cluster.html", {
        "status": status,
        "groups": gpus_by_type(nodes, owners),
        "troubled": troubled_nodes(nodes),
        "nodes": nodes,
    }


def queue(board: Dashboard, session: Session, request: Request) -> tuple[str, dict[str, Any]]:
    params = request.query_params
    chosen = QueueFilter.parse(params.get("user"), params.get("state"), params.get("page"))
    jobs = session.client.list_jobs(user=chosen.user or None, states=chosen.states)
    return "queue.html", queue_context(
        jobs, chosen, params.get("state") or "", board.settings.page_size
    )


def queue_context(
    jobs: Sequence[Job], chosen: QueueFilter, state_param: str, page_size: int
) -> dict[str, Any]:
    """What queue.html gets for these jobs (already filtered by the master)."""
    shown = queue_page(jobs, chosen.page, page_size)

    def link(page: int) -> str:
        query = {k: v for k, v in (("user", chosen.user), ("state", state_param)) if v}
        query["page"] = str(page)
        return "/queue?" + urlencode(query)

    return {
        "filter": chosen,
        "state_param": state_param,
        "shown": shown,
        "link": link,
        "states": [s for s in JobState if s.value != "unspecified"],
        "display_id": display_id,
    }


def job(board: Dashboard, session: Session, request: Request) -> tuple[str, dict[str, Any]]:
    client = session.client
    ref = parse_job_ref(request.path_params["ref"])
    job_id = ref.job_id
    if ref.array_index is not None:
        job_id = client.find_element(ref.job_id, ref.array_index).id
    described = client.describe_job(job_id)
    found = described.job
    board.progress.record(found, time.time())
    times, done, rates = board.progress.series(found.id)
    tail = ""
    output_note = ""
    if found.private_hidden:
        output_note = "its output and command are its owner's only"
    else:
        try:
            chunks = list(client.stream_logs(found.id, tail_lines=LOG_TAIL_LINES))
        except PermissionDenied:
            chunks = []
            output_note = "its output is its owner's only"
        except HadarError as exc:
            # The page stands without it: the master answered, the log's node may not.
            chunks = []
            output_note = f"its output cannot be read right now ({exc})"
        last = max((c.attempt for c in chunks), default=0)
        text = b"".join(c.data for c in chunks if c.data and c.attempt == last)
        tail = "\n".join(text.decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:])
    progress_chart = chart(
        "line",
        Series(
            [float(t) for t in times],
            {"iterations": [float(n) for n in done], "it/s": list(rates)},
        ),
    )
    return "job.html", {
        "job": found,
        "events": described.events,
        "shown_id": display_id(found),
        "placements": placements(described.events),
        "tail": tail,
        "output_note": output_note,
        "progress_chart": progress_chart if len(times) > 1 else None,
    }


def users(board: Dashboard, session: Session, request: Request) -> tuple[str, dict[str, Any]]:
    client = session.client
    fair = client.fair_share()
    since = datetime.now(UTC) - timedelta(days=30)
    by_user = client.usage(by=UsageGrouping.USER)
    by_type = client.usage(by=UsageGrouping.GPU_TYPE)
    by_day = client.usage(by=UsageGrouping.DAY, since=since)
    groups: dict[str, dict[str, float]] = {}
    for row in fair.rows:
        group = groups.setdefault(row.group or "(none)", {"users": 0, "gpus": 0, "usage": 0.0})
        group["users"] += 1
        group["gpus"] += row.gpus
        group["usage"] += row.usage_gpu_seconds / 3600.0
    days = day_matrix({"GPU-hours": {r.key: r.gpu_hours for r in by_day.rows}})
    return "users.html", {
        "fair": fair,
        "by_user": by_user,
        "by_type": by_type,
        "groups": groups,
        "day_chart": chart("bars", days, unit="GPU-h", labels=day_labels(days)) if days.x else None,
    }


def history(board: Dashboard, session: Session, request: Request) -> tuple[str, dict[str, Any]]:
    client = session.client
    now = datetime.now(UTC)
    records = client.job_history(since=now - timedelta(days=7), limit=5000)
    running = client.list_jobs(states=(JobState.RUNNING,))
    total_gpus = sum(g.total for g in client.cluster_status().gpus)
    span = history_span(records, running, now)
    utilization = utilization_over_time(records, running, total_gpus, now, span, bins=60)
    since = now - timedelta(days=14)
    heaviest = client.usage(by=UsageGrouping.USER, since=since).rows
    per_user = {
        row.key: {
            day.key: day.gpu_hours
            for day in client.usage(user=row.key, by=UsageGrouping.DAY, since=since).rows
        }
        for row in sorted(heaviest, key=lambda r: -r.gpu_seconds)[:HISTORY_USERS]
    }
    days = day_matrix(per_user)
    # About sqrt(n) bins, 3 to 12: a handful of jobs is not spread over a dozen empty bins.
    jct = jct_histogram(records, bins=min(12, max(3, math.isqrt(len(records)))))
    jct_labels = _bin_labels(jct.edges)
    jct_series = Series([], {"jobs": [float(c) for c in jct.counts]})
    return "history.html", {
        # What it shows moves over hours: no need to ask the master every second.
        "refresh": HISTORY_REFRESH_S,
        "span": span,
        "utilization_chart": chart("line", utilization, unit="%"),
        "days_chart": (
            chart("bars", days, unit="GPU-h", labels=day_labels(days)) if days.x else None
        ),
        "jct": jct,
        "jct_chart": chart("bars", jct_series, labels=jct_labels) if jct.counts else None,
        "jct_labels": jct_labels,
        "ended": len(records),
    }


def _bin_labels(edges: Sequence[float]) -> list[str]:
    return [f"{lo:g}-{hi:g} min" for lo, hi in itertools.pairwise(edges)]
