"""Webhook notifications: how soon a job's end reaches its endpoint, and what hung
endpoints cost the scheduling rounds.

An in-process master (SQLite in a temporary directory, default webhook settings) and a
local HTTP endpoint. Phase 1 ends N jobs (cancellation, with notify_on CANCELLED) and
measures the time from the end's commit to the POST's arrival. Phase 2 times R rounds
with no webhook in flight, then R rounds while H calls hang on an endpoint that accepts
connections and never answers (each held for webhook_timeout_s).

    .venv/bin/python bench/bench_webhooks.py [--jobs 200] [--hung 40] [--rounds 20]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import structlog

from master.daemon import Master
from master.settings import Settings
from protos.hadar.v1 import common_pb2, hadar_pb2, hadar_pb2_grpc


class Endpoint:
    def __init__(self) -> None:
        self.arrivals: dict[int, float] = {}
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                job_id = int(body.split(b'"job_id": ')[1].split(b",")[0])
                with endpoint.lock:
                    endpoint.arrivals.setdefault(job_id, time.monotonic())
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def spec(url: str) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="bench",
        num_gpus=1,
        iterations=10,
        workload=common_pb2.WorkloadProgram(name="resnet"),
        notify_url=url,
        notify_on=[common_pb2.JOB_STATE_CANCELLED],
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--hung", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    endpoint = Endpoint()
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(1024)
    hung_url = f"http://127.0.0.1:{hole.getsockname()[1]}/hook"
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        settings = Settings(
            listen="127.0.0.1:0",
            database=f"sqlite:///{Path(tmp) / 'bench.db'}",
            policy="fifo",
            round_seconds=3600,
            early_rounds=False,
            auth="none",
            cluster_token="bench",
            cluster_token_file=str(Path(tmp) / "token"),
            checkpoint_dir=str(Path(tmp) / "ckpt"),
            metrics_port=-1,
        )
        master = Master(settings)
        master.start()
        try:
            channel = grpc.insecure_channel(master.address)
            api: Any = hadar_pb2_grpc.HadarStub(channel)  # type: ignore[no-untyped-call]
            meta = (("x-hadar-user", "bench"),)
            url = f"http://127.0.0.1:{endpoint.port}/hook"
            ended: dict[int, float] = {}
            for _ in range(args.jobs):
                job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(url)), metadata=meta).job
                api.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id), metadata=meta)
                ended[job.id] = time.monotonic()
            deadline = time.monotonic() + 120
            while len(endpoint.arrivals) < args.jobs and time.monotonic() < deadline:
                time.sleep(0.05)
            latencies = [
                endpoint.arrivals[j] - t for j, t in ended.items() if j in endpoint.arrivals
            ]
            print(f"phase 1: {len(latencies)}/{args.jobs} delivered")
            print(
                f"  end -> POST latency: p50 {statistics.median(latencies) * 1000:.0f} ms, "
                f"p95 {percentile(latencies, 0.95) * 1000:.0f} ms, "
                f"max {max(latencies) * 1000:.0f} ms"
            )

            def rounds() -> list[float]:
                out = []
                for _ in range(args.rounds):
                    began = time.perf_counter()
                    master.run_round()
                    out.append(time.perf_counter() - began)
                return out

            quiet = rounds()
            for _ in range(args.hung):
                job = api.SubmitJob(
                    hadar_pb2.SubmitJobRequest(spec=spec(hung_url)), metadata=meta
                ).job
                api.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id), metadata=meta)
            time.sleep(0.5)  # let the sender take the hung calls (a bench, not a test)
            busy = rounds()
            print(f"phase 2: {args.rounds} rounds each, {args.hung} calls hanging in the second")
            for label, values in (("no webhook in flight", quiet), ("calls hanging", busy)):
                print(
                    f"  {label:>21}: median {statistics.median(values) * 1000:.1f} ms, "
                    f"max {max(values) * 1000:.1f} ms"
                )
            channel.close()
        finally:
            # Reset the hung connections first, so their calls end before the master does.
            hole.close()
            master.stop(grace=0.5)


if __name__ == "__main__":
    main()
