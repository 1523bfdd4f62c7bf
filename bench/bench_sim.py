"""Simulator and policy speed.

1. Gavel's 96-job trace (max_min_fairness.trace) on v100:8,p100:16,k80:24 under fifo,
   srtf, las and gavel: total wall time (target < 5 s).
2. A generated 10,000-job trace on 1,024 GPUs (256 each of v100, p100, k80, a100-40gb)
   under las: wall time (target < 60 s), rounds, planning time per round.
3. gavel's planning time per round with 1,000 active jobs on 512 GPUs of 4 types.
4. ``--scale``: the scale benchmark, every policy (or ``--policies``) on a generated
   10,000-job trace (Gavel's job mix, Poisson arrivals every :data:`SCALE_INTERARRIVAL_S`
   seconds on average, every job shareable) on 1,024 GPUs in thirds (:data:`SCALE_CLUSTER`,
   8 per server), 360 s rounds: per policy wall and CPU seconds against its target
   (:data:`SCALE_TARGETS_S`), rounds, preemptions, migrations and planning time. Each
   policy runs in its own process, ``--workers`` at a time, stopped after ``--cpu-limit``
   CPU seconds; ``--write`` puts the table into docs/benchmarks.md. A name may carry one
   parameter, e.g. ``gavel.warm_from=0``.
5. ``--gavel-repo DIR --gavel-python PATH``: the scale trace under ``gavel`` side by side
   with Gavel's own simulator (a checkout of stanford-futuredata/gavel at DIR, with its
   RPC stubs built, run by the interpreter PATH whose environment has its dependencies)
   running ``max_min_fairness_perf`` on the same jobs, written in Gavel's trace format to
   a temporary file, on the same cluster (same GPU counts, 8 GPUs per server) and the same
   throughput table. Both run at once, each in its own process on a CPU of its own,
   ``--repeat`` times (2 by default) with the CPUs swapped each time; each one's wall and
   CPU seconds (the whole process: start-up, trace and simulation) and average JCT are
   printed with Gavel's wall time over ours over all runs. Gavel is stopped after
   ``--gavel-limit`` CPU seconds, or three times that in wall seconds; ``--write`` puts
   the table into docs/benchmarks.md.

    .venv/bin/python bench/bench_sim.py [--gavel-data DIR] [--skip-large]
    .venv/bin/python bench/bench_sim.py --scale [--policies a,b] [--workers K]
                                        [--cpu-limit S] [--write]
    .venv/bin/python bench/bench_sim.py --gavel-repo DIR --gavel-python PATH
                                        [--gavel-limit S] [--cpu-limit S] [--repeat N]
                                        [--write]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.machine import LOOP_STEPS, python_loop_s  # noqa: E402
from bench.markdown import write_section  # noqa: E402
from master.scheduling.plan import Allocation  # noqa: E402
from master.scheduling.policy import available_policies, make_policy  # noqa: E402
from master.scheduling.throughput import ThroughputModel  # noqa: E402
from master.scheduling.views import ClusterView, JobView, Snapshot  # noqa: E402
from master.sim.cluster_spec import build_cluster  # noqa: E402
from master.sim.data import GAVEL_DIR  # noqa: E402
from master.sim.engine import SimConfig, simulate  # noqa: E402
from master.sim.generate import generate_trace  # noqa: E402
from master.sim.metrics import summarize  # noqa: E402
from master.sim.trace import TraceJob, read_gavel_trace  # noqa: E402

DEFAULT_DATA = GAVEL_DIR
FOUR_TYPES = ("v100", "p100", "k80", "a100-40gb")

SCALE_JOBS = 10_000
#: 1,024 GPUs as near to thirds as whole 8-GPU servers allow.
SCALE_CLUSTER = {"v100": 344, "p100": 344, "k80": 336}
#: About 80 % offered load on SCALE_CLUSTER: a job of the generator's mix needs about
#: 115,000 V100 GPU-seconds on average, and the cluster holds about 856 V100 equivalents
#: (P100s run Gavel's job types 1.06x, K80s 0.44x as fast as a V100, on average).
SCALE_INTERARRIVAL_S = 170.0
SCALE_SEED = 1
HEURISTICS = ("fifo", "las", "slurm", "srtf")
#: Wall-time targets on the 2-core development machine.
SCALE_TARGETS_S = {"gavel": 40.0, **dict.fromkeys(HEURISTICS, 30.0)}
RESEARCH_TARGET_S = 120.0
BEGIN = "<!-- sim-scale: written by bench/bench_sim.py --scale --write -->"
END = "<!-- /sim-scale -->"


def bench_gavel_trace(data: Path, model: ThroughputModel) -> None:
    jobs = read_gavel_trace(data / "traces" / "max_min_fairness.trace")
    cluster = build_cluster("v100:8,p100:16,k80:24")
    total = 0.0
    print("1. max_min_fairness.trace (96 jobs), v100:8,p100:16,k80:24, 360 s rounds")
    for name in ("fifo", "srtf", "las", "gavel"):
        started = time.perf_counter()
        result = simulate(make_policy(name), jobs, cluster, model, SimConfig())
        elapsed = time.perf_counter() - started
        total += elapsed
        s = summarize(result)
        print(
            f"   {name:6s} {elapsed:6.2f} s  rounds {s.rounds:4d}"
            f"  avg JCT {s.avg_jct_s / 3600:5.2f} h"
            f"  plan {s.plan_ms_mean:6.2f} ms mean / {s.plan_ms_max:6.1f} ms max"
        )
    print(f"   total: {total:.2f} s (target < 5 s)")


def bench_large_las(model: ThroughputModel) -> None:
    counts = dict.fromkeys(FOUR_TYPES, 256)
    cluster = ClusterView.from_counts(counts, gpus_per_server=8)
    # Offered load about 80 %: the trace's work in V100 GPU-seconds over its arrival span
    # times the cluster's capacity in V100 equivalents (mean speed ratio per type).
    jobs = generate_trace(10_000, model, mean_interarrival_s=120.0, seed=1)
    print("2. generated 10,000 jobs on 1,024 GPUs (4 types x 256, 8 per server), las")
    started = time.perf_counter()
    result = simulate(make_policy("las"), jobs, cluster, model, SimConfig())
    elapsed = time.perf_counter() - started
    s = summarize(result)
    print(
        f"   {elapsed:.1f} s wall (target < 60 s); {s.rounds} rounds; utilization "
        f"{s.utilization:.1%}; avg JCT {s.avg_jct_s / 3600:.2f} h; "
        f"plan {s.plan_ms_mean:.2f} ms mean / {s.plan_ms_max:.1f} ms max"
    )


def bench_gavel_planning(model: ThroughputModel) -> None:
    counts = dict.fromkeys(FOUR_TYPES, 128)
    cluster = ClusterView.from_counts(counts, gpus_per_server=8)
    trace = generate_trace(1000, model, mean_interarrival_s=0.0, seed=2)
    jobs = tuple(
        JobView(
            id=j.id,
            job_type=j.job_type,
            num_gpus=j.num_gpus,
            total_iterations=j.iterations or 1.0,
            batch_size=j.batch_size,
        )
        for j in trace
    )
    policy = make_policy("gavel")
    times: list[float] = []
    current: dict[int, Allocation] = {}
    for round_number in range(6):
        # Departures and arrivals every round force a fresh LP solve, the expensive case.
        live = tuple(
            JobView(
                id=j.id + 1000 * (round_number if j.id % 10 == 0 else 0),
                job_type=j.job_type,
                num_gpus=j.num_gpus,
                total_iterations=j.total_iterations,
                batch_size=j.batch_size,
                current=current.get(j.id),
            )
            for j in jobs
        )
        snapshot = Snapshot(cluster, live, round_number, 360.0, model)
        started = time.process_time()
        plan = policy.plan(snapshot, 360.0 * round_number)
        times.append(time.process_time() - started)
        current = {job_id: alloc for job_id, alloc in plan.allocations.items() if job_id < 1000}
    print(
        "3. gavel planning, 1,000 active jobs on 512 GPUs (4 types x 128), 100 leaving and "
        "100 arriving each round: LP solved cold in the first round, warm-started after"
    )
    print(
        f"   CPU per round: first {times[0] * 1000:.0f} ms; then "
        f"{statistics.fmean(times[1:]) * 1000:.0f} ms mean, {max(times[1:]) * 1000:.0f} ms max "
        f"over {len(times) - 1} rounds"
    )


def scale_jobs(model: ThroughputModel) -> list[TraceJob]:
    """The scale benchmark's trace."""
    return [
        dataclasses.replace(job, shareable=True)
        for job in generate_trace(
            SCALE_JOBS, model, mean_interarrival_s=SCALE_INTERARRIVAL_S, seed=SCALE_SEED
        )
    ]


def scale_one(name: str, data: Path) -> dict[str, Any]:
    """One policy over the scale trace, in this process: its figures as a dict."""
    model = ThroughputModel.from_gavel_json(data / "simulation_throughputs.json")
    cluster = ClusterView.from_counts(SCALE_CLUSTER, gpus_per_server=8)
    jobs = scale_jobs(model)
    policy_name, _, setting = name.partition(".")
    params: dict[str, Any] = {}
    if setting:
        # POLICY.PARAM=NUMBER, e.g. gavel.warm_from=0
        key, _, value = setting.partition("=")
        params[key] = float(value) if "." in value else int(value)
    policy = make_policy(policy_name, **params)
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate(policy, jobs, cluster, model, SimConfig())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    s = summarize(result)
    return {
        "policy": name,
        "wall_s": wall,
        "cpu_s": cpu,
        "rounds": s.rounds,
        "max_active": max(r.active_jobs for r in result.rounds),
        "preemptions": s.preemptions,
        "migrations": s.migrations,
        "planning_s": s.planning_s,
        "plan_ms_mean": s.plan_ms_mean,
        "plan_ms_p99": s.plan_ms_p99,
        "avg_jct_h": s.avg_jct_s / 3600.0,
        "finished": sum(1 for job in result.jobs if not job.failed),
    }


def target_s(name: str) -> float:
    return SCALE_TARGETS_S.get(name.partition(".")[0], RESEARCH_TARGET_S)


def run_scale(names: list[str], data: Path, workers: int, cpu_limit: int) -> list[dict[str, Any]]:
    """Each policy in its own process, ``workers`` at a time; one that uses more than
    ``cpu_limit`` CPU seconds is stopped and reported as such. The limit is on CPU time,
    not wall time, so that other work on a shared machine does not stop a run early.
    Each row is printed to stderr as it comes."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit + 5))

    def one(name: str) -> dict[str, Any]:
        command = [sys.executable, __file__, "--scale-one", name, "--gavel-data", str(data)]
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, preexec_fn=limit
        )
        row: dict[str, Any]
        if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            row = {"policy": name, "timed_out": cpu_limit}
        elif done.returncode != 0:
            row = {"policy": name, "error": done.stderr.strip().splitlines()[-1:]}
        else:
            row = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(row), file=sys.stderr, flush=True)
        return row

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, names))


def scale_lines(rows: list[dict[str, Any]], load: str) -> list[str]:
    lines = [
        BEGIN,
        "",
        f"{SCALE_JOBS:,} generated jobs (seed {SCALE_SEED}, Poisson arrivals every "
        f"{SCALE_INTERARRIVAL_S:.0f} s on average, every job shareable) on "
        + ", ".join(f"{t}:{c}" for t, c in SCALE_CLUSTER.items())
        + f" (8 GPUs per server), 360 s rounds; {load}:",
        "",
        "| policy | wall s | CPU s | target s | rounds | max active | preemptions | "
        "migrations | planning s | plan ms mean / p99 | avg JCT h |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name = row["policy"]
        if "timed_out" in row:
            lines.append(
                f"| {name} | | > {row['timed_out']:.0f} (stopped) | {target_s(name):.0f} "
                "| | | | | | | |"
            )
            continue
        if "error" in row:
            lines.append(f"| {name} | failed: {' '.join(row['error'])} | | | | | | | | | |")
            continue
        lines.append(
            f"| {name} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | {target_s(name):.0f} "
            f"| {row['rounds']:,} | {row['max_active']:,} | {row['preemptions']:,} "
            f"| {row['migrations']:,} | {row['planning_s']:.1f} "
            f"| {row['plan_ms_mean']:.2f} / {row['plan_ms_p99']:.1f} | {row['avg_jct_h']:.2f} |"
        )
    lines += ["", END]
    return lines


GAVEL_POLICY = "max_min_fairness_perf"
GAVEL_DRIVER = Path("scheduler") / "scripts" / "drivers" / "simulate_scheduler_with_trace.py"
#: Gavel's wall time over ours that the comparison aims at.
GAVEL_TARGET_RATIO = 10.0
GAVEL_BEGIN = "<!-- sim-vs-gavel: written by bench/bench_sim.py --gavel-repo DIR --write -->"
GAVEL_END = "<!-- /sim-vs-gavel -->"
_GAVEL_JCT = re.compile(r"^Average job completion time: ([0-9.eE+-]+) seconds", re.MULTILINE)
_GAVEL_JOB_LINE = re.compile(r"^Job \d+: ", re.MULTILINE)
_BATCH_SIZE = re.compile(r" \(batch size \d+\)")


def gavel_trace_line(job: TraceJob) -> str:
    """One job as a line of Gavel's ``.trace`` format (see :mod:`master.sim.trace`).

    The format carries the job type, GPU count, iterations, priority and arrival time;
    the columns that only a real run reads (command, directory, step flag, data flag) get
    placeholders, and the SLO column -1 (none). The user, the shareable and forkable
    marks, allowed types and time limits have no column and are left out."""
    iterations = job.iterations
    if iterations is None or iterations != int(iterations):
        # Gavel reads total_steps with int(), so anything else would not survive the trip.
        raise ValueError(f"job {job.id}: Gavel's format needs a whole iteration count")
    if "\t" in job.job_type or "\n" in job.job_type:
        raise ValueError(f"job {job.id}: job type {job.job_type!r} has a tab or newline")
    fields = [
        job.job_type,
        "true",
        ".",
        "--num_steps",
        "0",
        str(int(iterations)),
        str(job.num_gpus),
        repr(job.priority),
        "-1",
        repr(job.arrival_s),
    ]
    return "\t".join(fields) + "\n"


def write_gavel_trace(path: Path, jobs: list[TraceJob]) -> None:
    """The jobs in Gavel's trace format, in arrival order (Gavel numbers them by line and
    requires arrival times that never decrease)."""
    ordered = sorted(jobs, key=lambda j: (j.arrival_s, j.id))
    with path.open("w") as handle:
        handle.writelines(gavel_trace_line(job) for job in ordered)


def gavel_table(
    table: dict[str, Any], jobs: list[TraceJob], model: ThroughputModel
) -> tuple[dict[str, Any], list[TraceJob]]:
    """Gavel's throughput table with what it lacks for these jobs added, and the jobs
    that needed it.

    The table profiles some job types on one GPU only, and Gavel's simulator looks a
    job's rate up by its exact GPU count, failing on any other; the generator gives those
    types 2 to 8 GPUs too. Each missing (job type, GPU count) gets, on each GPU type, the
    rate our model uses for it, so the two simulators run every job at the same speed."""
    added = json.loads(json.dumps(table))
    needed: list[TraceJob] = []
    for job in jobs:
        key = repr((job.job_type, job.num_gpus))
        missing = [t for t in SCALE_CLUSTER if key not in table[t]]
        if missing:
            needed.append(job)
        for gpu_type in missing:
            rate = model.throughput(job.job_type, gpu_type, job.num_gpus)
            added[gpu_type][key] = {"null": rate}
    return added, needed


@dataclasses.dataclass(frozen=True, slots=True)
class Measured:
    """A finished child process: exit status, wall seconds from start to exit, CPU
    seconds (user + system) of the process and its threads, and the limit that stopped it
    ("" when none did)."""

    returncode: int
    wall_s: float
    cpu_s: float
    stopped: str


def run_measured(
    command: list[str],
    *,
    cwd: Path | None,
    output: Path,
    cpu_limit: int,
    wall_limit: float,
    cpu: int | None = None,
) -> Measured:
    """Run ``command`` with stdout and stderr into ``output``, on CPU ``cpu`` alone when
    given. Its CPU time comes from wait4 on that one child, so two children running at
    once are measured apart."""

    guard = threading.Lock()
    exited = False
    killed = False

    def kill() -> None:
        nonlocal killed
        with guard:
            if not exited:
                killed = True
                os.kill(process.pid, signal.SIGKILL)

    with output.open("w") as sink:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT)
    # Set from outside: a preexec_fn is not safe while other threads start processes.
    resource.prlimit(process.pid, resource.RLIMIT_CPU, (cpu_limit, cpu_limit + 5))
    if cpu is not None:
        os.sched_setaffinity(process.pid, {cpu})
    timer = threading.Timer(wall_limit, kill)
    timer.start()
    # Wait without reaping first, so that the timer can never signal a reused pid.
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
    wall = time.perf_counter() - started
    with guard:
        exited = True
    timer.cancel()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    stopped = ""
    if killed:
        stopped = f"{wall_limit:.0f} s wall"
    elif process.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        stopped = f"{cpu_limit} CPU s"
    return Measured(process.returncode, wall, usage.ru_utime + usage.ru_stime, stopped)


def run_versus_gavel(
    data: Path, repo: Path, python: Path, cpu_limit: int, gavel_limit: int, repeat: int = 1
) -> dict[str, Any]:
    """Ours (``gavel``) and Gavel's simulator (``max_min_fairness_perf``) on the scale
    trace at the same time, each in its own process, ``repeat`` times: both rows of each
    run and what was compared. With two CPUs or more each runs on a CPU of its own, and
    the two swap CPUs from one run to the next: the CPUs of a virtual machine can differ in
    speed by more than the simulators' difference should be judged on."""
    driver = repo / GAVEL_DRIVER
    if not driver.is_file():
        raise SystemExit(f"{driver}: not found; --gavel-repo is a checkout of Gavel")
    throughputs = (data / "simulation_throughputs.json").resolve()
    model = ThroughputModel.from_gavel_json(throughputs)
    jobs = scale_jobs(model)
    with tempfile.TemporaryDirectory(prefix="bench-sim-gavel-") as scratch:
        workdir = Path(scratch)
        trace = workdir / "scale.trace"
        write_gavel_trace(trace, jobs)
        # The file Gavel reads must describe the jobs ours runs.
        assert read_gavel_trace(trace) == [plain_gavel_job(job) for job in jobs]
        table, filled_in = gavel_table(json.loads(throughputs.read_text()), jobs, model)
        gavel_throughputs = workdir / "throughputs.json"
        gavel_throughputs.write_text(json.dumps(table))
        per_type = [SCALE_CLUSTER.get(t, 0) for t in ("v100", "p100", "k80")]
        assert sum(per_type) == sum(SCALE_CLUSTER.values()), "Gavel knows v100/p100/k80 only"
        gavel_command = [
            str(python),
            str(driver.resolve()),
            "--trace_file",
            str(trace),
            "--policy",
            GAVEL_POLICY,
            "--throughputs_file",
            str(gavel_throughputs),
            "--cluster_spec",
            ":".join(str(n) for n in per_type),
            "--num_gpus_per_server",
            "8:8:8",
            "--time_per_iteration",
            "360",
            "--seed",
            str(SCALE_SEED),
        ]
        ours_command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--scale-one",
            "gavel",
            "--gavel-data",
            str(data),
        ]
        gavel_log, ours_log = workdir / "gavel.log", workdir / "ours.log"
        load_start = os.getloadavg()[0]
        python_loop = python_loop_s()
        cpus = sorted(os.sched_getaffinity(0))
        runs: list[list[dict[str, Any]]] = []
        for index in range(repeat):
            # Ours on the first CPU in even runs, Gavel on it in odd ones.
            pair = (cpus[index % 2], cpus[(index + 1) % 2]) if len(cpus) >= 2 else (None, None)
            with ThreadPoolExecutor(max_workers=2) as pool:
                gavel_run = pool.submit(
                    run_measured,
                    gavel_command,
                    cwd=repo / "scheduler",
                    output=gavel_log,
                    cpu_limit=gavel_limit,
                    wall_limit=3.0 * gavel_limit,
                    cpu=pair[1],
                )
                ours_run = pool.submit(
                    run_measured,
                    ours_command,
                    cwd=None,
                    output=ours_log,
                    cpu_limit=cpu_limit,
                    wall_limit=3.0 * cpu_limit,
                    cpu=pair[0],
                )
                gavel, ours = gavel_run.result(), ours_run.result()
            runs.append(
                [
                    {**ours_row(ours, ours_log.read_text()), "cpu": pair[0]},
                    {**gavel_row(gavel, gavel_log.read_text()), "cpu": pair[1]},
                ]
            )
        load_end = os.getloadavg()[0]
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
        check=False,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "runs": runs,
        "gavel_commit": commit or "unknown",
        "load": (load_start, load_end),
        "python_loop_s": python_loop,
        "filled_in": sorted({(job.job_type, job.num_gpus) for job in filled_in}),
        "filled_in_jobs": len(filled_in),
    }


def plain_gavel_job(job: TraceJob) -> TraceJob:
    """What Gavel's format keeps of a job: it has no column for the rest."""
    return TraceJob(
        id=job.id,
        arrival_s=job.arrival_s,
        job_type=job.job_type,
        num_gpus=job.num_gpus,
        iterations=job.iterations,
        priority=job.priority,
        batch_size=job.batch_size,
    )


def ours_row(run: Measured, log: str) -> dict[str, Any]:
    row: dict[str, Any] = {"simulator": "Hadar (`hctl simulate`)", "policy": "gavel"}
    if run.stopped:
        return {**row, "stopped": run.stopped}
    if run.returncode != 0:
        return {**row, "error": (log.strip().splitlines() or ["no output"])[-1]}
    figures = json.loads(log.strip().splitlines()[-1])
    return {
        **row,
        "wall_s": run.wall_s,
        "cpu_s": run.cpu_s,
        "sim_wall_s": figures["wall_s"],
        "sim_cpu_s": figures["cpu_s"],
        "avg_jct_h": figures["avg_jct_h"],
        "finished": figures["finished"],
    }


def gavel_row(run: Measured, log: str) -> dict[str, Any]:
    row: dict[str, Any] = {"simulator": "Gavel (`simulate_scheduler_with_trace.py`)"}
    row["policy"] = GAVEL_POLICY
    if run.stopped:
        return {**row, "stopped": run.stopped, "cpu_s": run.cpu_s}
    jct = _GAVEL_JCT.search(log)
    if run.returncode != 0 or jct is None:
        return {**row, "error": (log.strip().splitlines() or ["no output"])[-1]}
    return {
        **row,
        "wall_s": run.wall_s,
        "cpu_s": run.cpu_s,
        "avg_jct_h": float(jct.group(1)) / 3600.0,
        "finished": len(_GAVEL_JOB_LINE.findall(log)),
    }


def versus_lines(result: dict[str, Any], cpu_limit: int) -> list[str]:
    runs = result["runs"]
    start, end = result["load"]
    pinned = runs[0][0]["cpu"] is not None
    how = (
        "both at once, each in its own process on a CPU of its own, the two swapping CPUs "
        f"from one run to the next ({len(runs)} runs)"
        if pinned
        else f"both at once, each in its own process ({len(runs)} runs)"
    )
    lines = [
        GAVEL_BEGIN,
        "",
        f"The scale trace above ({SCALE_JOBS:,} jobs, "
        + ", ".join(f"{t}:{c}" for t, c in SCALE_CLUSTER.items())
        + ", 8 GPUs per server, 360 s rounds, the same throughput table) under our `gavel` "
        f"and under Gavel's own simulator (commit {result['gavel_commit']}) running "
        f"`{GAVEL_POLICY}`, {how}; wall and CPU seconds are the whole process (start-up, "
        f"trace, simulation); a {LOOP_STEPS:,}-step Python loop took "
        f"{result['python_loop_s']:.2f} s before the runs; load average {start:.1f} at the "
        f"start, {end:.1f} at the end:",
        "",
        "| run | simulator | policy | CPU | wall s | CPU s | avg JCT h | jobs finished |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for number, pair in enumerate(runs, 1):
        for row in pair:
            cpu = "-" if row["cpu"] is None else str(row["cpu"])
            head = f"| {number} | {row['simulator']} | `{row['policy']}` | {cpu} "
            if "stopped" in row:
                lines.append(head + f"| not finished after {row['stopped']} | | | |")
            elif "error" in row:
                lines.append(head + f"| failed: {row['error']} | | | |")
            else:
                lines.append(
                    head + f"| {row['wall_s']:.1f} | {row['cpu_s']:.1f} "
                    f"| {row['avg_jct_h']:.2f} | {row['finished']:,} |"
                )
    lines.append("")
    finished = all("wall_s" in row for pair in runs for row in pair)
    ours_rows = [pair[0] for pair in runs]
    gavel_rows = [pair[1] for pair in runs]
    if finished:
        ratio = sum(r["wall_s"] for r in gavel_rows) / sum(r["wall_s"] for r in ours_rows)
        cpu_ratio = sum(r["cpu_s"] for r in gavel_rows) / sum(r["cpu_s"] for r in ours_rows)
        each = ", ".join(f"{g['wall_s'] / o['wall_s']:.1f}x" for o, g in runs)
        verdict = "meets" if ratio >= GAVEL_TARGET_RATIO else "misses"
        sim_wall = max(r["sim_wall_s"] for r in ours_rows)
        lines.append(
            f"Gavel's wall time over ours, all runs together: {ratio:.1f}x (CPU: "
            f"{cpu_ratio:.1f}x; run by run {each}), which {verdict} the "
            f"{GAVEL_TARGET_RATIO:.0f}x target. Our simulation alone took at most "
            f"{sim_wall:.1f} s wall (target < {target_s('gavel'):.0f} s)."
        )
    elif any("stopped" in g for g in gavel_rows) and all("wall_s" in o for o in ours_rows):
        slowest = min(g["cpu_s"] for g in gavel_rows if "stopped" in g)
        lines.append(
            f"Gavel had not finished after its limit ({slowest:.0f} CPU s), "
            f"{slowest / max(o['cpu_s'] for o in ours_rows):.0f}x our CPU time at the least."
        )
    else:
        lines.append(f"No ratio: a run did not finish (our limit {cpu_limit} CPU s).")
    if result["filled_in_jobs"]:
        kinds = sorted({_BATCH_SIZE.sub("", job_type) for job_type, _ in result["filled_in"]})
        lines += [
            "",
            f"Gavel's throughput table has no figure for {result['filled_in_jobs']:,} of the "
            f"jobs ({', '.join(kinds)} on more than one GPU: it has those job types, at "
            "every batch size, on one GPU only) "
            "and its simulator stops at a job it has none for; the copy of the table "
            "handed to it adds, for those, the rates our model uses.",
        ]
    lines += ["", GAVEL_END]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gavel-data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--skip-large", action="store_true", help="skip the 10,000-job run")
    parser.add_argument("--scale", action="store_true", help="the 10,000-job scale benchmark")
    parser.add_argument("--scale-one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--policies", default=None, help="comma-separated (default: all)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cpu-limit", type=int, default=600, help="CPU seconds per policy")
    parser.add_argument("--write", action="store_true", help="write into docs/benchmarks.md")
    parser.add_argument("--gavel-repo", type=Path, default=None, help="a checkout of Gavel")
    parser.add_argument(
        "--gavel-python", type=Path, default=None, help="the interpreter to run Gavel with"
    )
    parser.add_argument("--gavel-limit", type=int, default=1200, help="CPU seconds for Gavel")
    parser.add_argument(
        "--repeat", type=int, default=2, help="side-by-side runs, swapping CPUs between them"
    )
    args = parser.parse_args()
    if args.gavel_repo is not None or args.gavel_python is not None:
        if args.gavel_repo is None or args.gavel_python is None:
            parser.error("--gavel-repo and --gavel-python go together")
        result = run_versus_gavel(
            args.gavel_data,
            args.gavel_repo,
            args.gavel_python,
            args.cpu_limit,
            args.gavel_limit,
            args.repeat,
        )
        print(json.dumps(result["runs"]), file=sys.stderr)
        lines = versus_lines(result, args.cpu_limit)
        print("\n".join(lines))
        if args.write:
            write_section(ROOT / "docs" / "benchmarks.md", GAVEL_BEGIN, GAVEL_END, lines)
        return
    if args.scale_one is not None:
        print(json.dumps(scale_one(args.scale_one, args.gavel_data)))
        return
    if args.scale:
        names = args.policies.split(",") if args.policies else available_policies()
        started = os.getloadavg()[0]
        rows = run_scale(names, args.gavel_data, args.workers, args.cpu_limit)
        load = (
            f"load average {started:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
            f"({args.workers} at a time)"
        )
        lines = scale_lines(rows, load)
        print("\n".join(lines))
        if args.write:
            write_section(ROOT / "docs" / "benchmarks.md", BEGIN, END, lines)
        return
    model = ThroughputModel.from_gavel_json(args.gavel_data / "simulation_throughputs.json")
    bench_gavel_trace(args.gavel_data, model)
    if not args.skip_large:
        bench_large_las(model)
    bench_gavel_planning(model)


if __name__ == "__main__":
    main()
