"""The dashboard's queue page with 5,000 queued jobs: a real master (SQLite, token auth) in
its own process, the dashboard app in this one (Starlette's test client, no network between
browser and app), timed from the request to the last byte of the page. Each request lists
every active job from the master, folds and cuts them into one page, and renders it.

    .venv/bin/python bench/bench_dashboard.py [--jobs 5000] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_cli import USER, percentile, start_filled_master, wait_answering
from clients.client import HadarClient
from dashboard.app import create_app
from dashboard.settings import DashboardSettings


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000, help="queued jobs (default 5000)")
    parser.add_argument("--runs", type=int, default=30, help="page loads timed per page")
    args = parser.parse_args()

    python = sys.executable
    workdir = Path(tempfile.mkdtemp(prefix="hadar-bench-dashboard-"))
    master, port, token = start_filled_master(python, workdir, args.jobs)
    address = f"127.0.0.1:{port}"
    results: dict[str, list[float]] = {}
    try:
        with HadarClient(address, token=token, timeout=5) as probe:
            wait_answering(probe, master)
        web = TestClient(create_app(DashboardSettings(master=address, call_timeout_s=30)))
        assert web.post("/login", data={"token": token}).status_code == 200
        pages = {
            "queue, page 1 of all": "/queue",
            "queue, page 25 of all": "/queue?page=25",
            f"queue, {USER}'s jobs": f"/queue?user={USER}",
            "queue poll (live part only)": "/queue",
        }
        for what, path in pages.items():
            headers = {"HX-Request": "true"} if "poll" in what else {}
            web.get(path, headers=headers)  # warm: templates compiled, channel open
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                answer = web.get(path, headers=headers)
                times.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text[:500]
            results[what] = times
        # What each of those requests waits for first: the master's listing of every job.
        from clients.types import ACTIVE_JOB_STATES

        with HadarClient(address, token=token, timeout=30) as client:
            listings = []
            for _ in range(args.runs):
                started = time.perf_counter()
                client.list_jobs(states=ACTIVE_JOB_STATES)
                listings.append(time.perf_counter() - started)
            results[f"(client.list_jobs of all {args.jobs})"] = listings
    finally:
        master.terminate()
        master.wait(timeout=60)

    print(
        f"dashboard queue page against a master on SQLite with {args.jobs} queued jobs; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end"
    )
    print(f"{'what':<36}{'p50 ms':>10}{'p99 ms':>10}{'min ms':>10}")
    for what, values in results.items():
        print(
            f"{what:<36}{statistics.median(values) * 1e3:>10.1f}"
            f"{percentile(values, 0.99) * 1e3:>10.1f}{min(values) * 1e3:>10.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
