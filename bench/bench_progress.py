"""Master CPU per progress report of a worker that runs four tasks, and the SQL it costs.

Starts a master in this process (SQLite in a temporary folder or a throwaway PostgreSQL
schema), registers `--nodes` workers with four GPUs each, gives each a running job of four
tasks (written to the store directly, as bench_heartbeat does), then stores `--reports`
rounds of progress reports, one per worker per round, each moving its four tasks forward,
through the master's own JobManager.report_progress (no gRPC: the store path alone, one
report at a time). Prints the process's CPU per report and the SQL statements per report.

    .venv/bin/python bench/bench_progress.py [--reports 20] [--nodes 50] [--database URL]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_heartbeat import (  # noqa: E402
    StatementCount,
    bench_master,
    database_url,
    place_job,
    register,
)
from master.jobs.manager import ProgressUpdate  # noqa: E402
from protos.hadar.v1 import coordinator_pb2_grpc  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=20, help="reports per worker")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--database", default=None, help="SQLite (default) or PostgreSQL URL")
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory() as folder,
        database_url(args.database, Path(folder)) as url,
    ):
        master = bench_master(url, Path(folder), heartbeat_timeout_s=600.0)
        channel = grpc.insecure_channel(master.address)
        try:
            stub: Any = coordinator_pb2_grpc.CoordinatorStub(channel)  # type: ignore[no-untyped-call]
            placed = {}
            for n in range(args.nodes):
                node = register(stub, n)
                placed[node] = place_job(master, node)

            def report(iterations: int) -> None:
                for node, refs in placed.items():
                    stale = master.jobs.report_progress(
                        node,
                        [
                            ProgressUpdate(
                                job_id=r.job_id,
                                task_index=r.task_index,
                                lease=r.lease,
                                iterations_done=iterations,
                                iterations_per_s=10.0,
                                checkpoint_iterations=iterations,
                                gpu_type="v100",
                            )
                            for r in refs
                        ],
                    )
                    if any(stale):
                        raise SystemExit(f"a report of {node} was stale")

            report(10)  # warm-up: each task's first report starts it running
            with StatementCount(master.database.engine) as statements:
                cpu = time.process_time()
                wall = time.perf_counter()
                for i in range(args.reports):
                    report(20 + 10 * i)
                wall = time.perf_counter() - wall
                cpu = time.process_time() - cpu
        finally:
            channel.close()
            master.stop(grace=0.5)

    total = args.reports * args.nodes
    print(
        f"progress reports of 4 running tasks, {args.nodes} worker(s) x {args.reports} "
        f"reports, {master.database.dialect}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"CPU per report: {cpu / total * 1000:.2f} ms (wall {wall / total * 1000:.2f} ms)")
    print(f"SQL statements per report: {statements.count / total:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
