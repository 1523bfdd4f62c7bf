"""hctl hold, release, requeue and update against a real master with fake-GPU workers: what
people see, the exit codes scripts branch on, array ids, and --json."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from clients.cli import shapes
from clients.cli.command import ExitCode
from protos.hadar.v1 import common_pb2
from tests.integration.cli.conftest import Cluster, Hctl
from tests.integration.cli.test_hctl import submit


def shown(hctl: Hctl, job: str) -> dict[str, object]:
    document = json.loads(hctl("show", job, "--json").out)
    job_document: dict[str, object] = document["job"]
    return job_document


def eventually(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_held_array_elements_release_one_then_all(hctl: Hctl, cluster: Cluster) -> None:
    """`submit --hold` holds every element of an array; `release A_1` lets that element
    alone run; `hold A` on the array leaves the running element be; `release A` lets the
    rest run. The queue says who holds a job and how to release it."""
    array = submit(hctl, "--hold", "--array", "0-2", "--iterations", "1", "--", "true")
    cluster.round()
    queue = hctl("queue", "-r")
    assert queue.out.count("held by alice") == 3, queue.out
    one = hctl("release", f"{array}_1")
    assert one.code == 0, one.err
    assert one.out.startswith(f"job {array}_1 (true): released"), one.out
    cluster.round()
    running = shown(hctl, f"{array}_1")
    assert running["state"] == "running"
    assert shown(hctl, f"{array}_0")["state"] == "pending"

    again = hctl("hold", str(array))
    assert again.code == 0, again.err
    assert again.out.startswith(f"array job {array} (true): its waiting elements held"), again.out
    whole = hctl("release", str(array), "--json")
    assert whole.code == 0, whole.err
    document = json.loads(whole.out)
    assert shapes.check(document, shapes.OUTPUTS["release"]) == []
    cluster.round()
    states = {shown(hctl, f"{array}_{i}")["state"] for i in range(3)}
    assert states == {"running"}, states


def test_refusals_exit_codes_and_what_to_run_instead(hctl: Hctl, cluster: Cluster) -> None:
    """Another user's job exits 4 naming the owner; holding a running job exits 7 naming
    `hctl requeue --hold`; a value the master refuses exits 6 naming the field; a completed
    job cannot be requeued (7); one refusal does not stop the other jobs named."""
    bobs = submit(hctl, "--iterations", "1", "--", "true", user="bob")
    mine = submit(hctl, "--workload", "resnet", "--iterations", "10")
    denied = hctl("hold", str(bobs), str(mine))
    assert denied.code == ExitCode.PERMISSION_DENIED, denied.err
    assert denied.err.startswith(f"error: cannot hold job {bobs}: job {bobs} belongs to bob")
    assert f"job {mine} (resnet): held" in denied.out
    assert hctl("release", str(mine)).code == 0
    cluster.round()
    cluster.worker_running(mine)
    busy = hctl("hold", str(mine))
    assert busy.code == ExitCode.CONFLICT, busy.err
    assert f"hctl requeue --hold {mine}" in busy.err

    too_many = hctl("update", str(mine), "--gpus", "64")
    assert too_many.code == ExitCode.CONFLICT, too_many.err
    assert "num_gpus" in too_many.err and "requeue --hold" in too_many.err
    waiting = submit(hctl, "--hold", "--workload", "resnet", "--iterations", "10")
    big = hctl("update", str(waiting), "--gpus", "64")
    assert big.code == ExitCode.INVALID_ARGUMENT, big.err
    assert "num_gpus: asks for 64 GPUs" in big.err
    nothing = hctl("update", str(waiting))
    assert nothing.code == ExitCode.USAGE and "--time" in nothing.err

    done = submit(hctl, "--iterations", "1", "--", "true")
    cluster.round()
    worker = cluster.worker_running(done)
    worker.exit(done, common_pb2.EXIT_KIND_COMPLETED)
    eventually(lambda: shown(hctl, str(done))["state"] == "completed", "completion")
    refused = hctl("requeue", str(done))
    assert refused.code == ExitCode.CONFLICT, refused.err
    assert "COMPLETED; a completed job cannot be requeued" in refused.err


def test_requeue_a_running_command_runs_it_again_from_the_start(
    hctl: Hctl, cluster: Cluster
) -> None:
    """A running opaque command is stopped and requeued: it is placed again only once its
    previous run has exited, and the requeue (who, why) is in its history. `update` changes
    a running job's time limit and priority, and --json prints the job after it."""
    job = submit(hctl, "--iterations", "1", "--name", "prep", "--", "sh", "-c", "sleep 60")
    cluster.round()
    first = cluster.worker_running(job)
    lease = first.tasks[job].lease
    updated = hctl("update", str(job), "--time", "2h", "--priority", "0.5", "--json")
    assert updated.code == 0, updated.err
    document = json.loads(updated.out)
    assert shapes.check(document, shapes.OUTPUTS["update"]) == []
    assert document["jobs"][0]["spec"]["time_limit_s"] == 7200
    assert document["jobs"][0]["spec"]["priority"] == 0.5

    requeued = hctl("requeue", str(job), "--reason", "wrong input")
    assert requeued.code == 0, requeued.err
    assert "requeued (stopping it, then it runs again from the start)" in requeued.out
    eventually(lambda: first.tasks[job].exited, "the stop to reach the worker")
    assert shown(hctl, str(job))["reason"] == "requeued by alice: wrong input"
    # Until the master has the stopped run's exit, the job is not placed again.
    eventually(
        lambda: not cluster.master.tx.read(lambda uow: uow.tasks.active_for_job(job)),
        "the previous run's exit to be recorded",
    )
    cluster.round()
    again = cluster.worker_running(job)
    assert again.tasks[job].lease > lease
    events = json.loads(hctl("show", str(job), "--json").out)["events"]
    requeue = next(e for e in events if e["kind"] == "requeued")
    assert requeue["reason"] == "requeued by alice: wrong input"
    assert shown(hctl, str(job))["requeues"] == 1


def test_a_job_file_with_hold_is_stored_held(hctl: Hctl, cluster: Cluster, tmp_path: Path) -> None:
    """`hold = true` in a job file stores the job held, as --hold does; the submit line says
    how to release it."""
    job_file = tmp_path / "job.toml"
    job_file.write_text('iterations = 1\ncommand = "true"\nhold = true\n')
    submitted = hctl("submit", "-f", str(job_file))
    assert submitted.code == 0, submitted.err
    job_id = int(submitted.out.split()[2])
    assert f"held: `hctl release {job_id}` lets it run" in submitted.out
    cluster.round()
    job = shown(hctl, str(job_id))
    assert (job["state"], job["held_by"]) == ("pending", "alice")


def test_update_dependency_preemptibility_signal_and_notifications_of_a_waiting_job(
    hctl: Hctl, cluster: Cluster
) -> None:
    """`hctl update` sets sbatch-style dependencies, --no-preemptible, --signal and
    --notify-on on a held command, and `none` clears the dependencies and the warning; a
    bad value is a usage error (exit 2) naming its flag before anything is sent."""
    first = submit(hctl, "--hold", "--iterations", "1", "--", "true")
    job = submit(hctl, "--hold", "--iterations", "1", "--", "true")
    result = hctl(
        "update",
        str(job),
        "--dependency",
        f"afterok:{first}",
        "--no-preemptible",
        "--signal",
        "USR1@90",
        "--notify-on",
        "fail",
    )
    assert result.code == 0, result.err
    spec = shown(hctl, str(job))["spec"]
    assert isinstance(spec, dict)
    assert spec["dependencies"] == [{"kind": "afterok", "job_id": first}]
    assert spec["preemptible"] is False
    assert (spec["warn_signal"], spec["warn_before_s"]) == (10, 90)
    assert spec["notify_on"] == ["failed", "timeout"]
    cleared = hctl("update", str(job), "--dependency", "none", "--signal", "none")
    assert cleared.code == 0, cleared.err
    spec = shown(hctl, str(job))["spec"]
    assert isinstance(spec, dict)
    assert spec["dependencies"] == [] and spec["warn_signal"] == 0
    bad = hctl("update", str(job), "--signal", "KILL")
    assert bad.code == ExitCode.USAGE and "--signal" in bad.err, bad.err
