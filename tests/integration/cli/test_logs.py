"""hctl logs against a real master and fake workers that keep every attempt's output as a
real worker does: attempts, standard error, jobs that did not start or printed nothing."""

from __future__ import annotations

import json

from clients.cli.command import ExitCode
from protos.hadar.v1 import common_pb2
from tests.integration.cli.conftest import Cluster, Hctl
from tests.integration.cli.test_hctl import submit


def test_logs_of_a_job_that_did_not_start_say_why_not_that_the_master_is_unreachable(
    hctl: Hctl, cluster: Cluster
) -> None:
    """A job whose start the worker refused has no output: logs says so with the start
    failure and exit code 9, not "cannot reach the master" (exit 5)."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10")
    for worker in cluster.workers.values():
        worker.fail_starts[job] = "workdir /data/alice does not exist on this node"
    cluster.round()
    shown = json.loads(hctl("show", str(job), "--json").out)["job"]
    assert shown["state"] == "failed"
    result = hctl("logs", str(job))
    assert result.code == ExitCode.NOT_STARTED, result.err
    assert result.out == ""
    assert f"job {job} has no output: it did not start: could not start on gpu-" in result.err
    assert "workdir /data/alice does not exist on this node" in result.err
    assert "cannot reach the master" not in result.err


def test_logs_show_every_attempt_under_a_header_and_one_with_attempt(
    hctl: Hctl, cluster: Cluster
) -> None:
    """After the job is placed again, the first attempt's output is still there: logs
    prints every attempt in order under a header naming its node, --attempt N only that
    one, bare."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cluster.round()
    first = cluster.worker_running(job)
    first_lease = first.tasks[job].lease
    first.write_log(job, "first run\n")
    first.exit(job, common_pb2.EXIT_KIND_STOPPED)
    cluster.round()
    second = cluster.worker_running(job)
    second_lease = second.tasks[job].lease
    assert second_lease > first_lease
    second.write_log(job, "second run\n")
    everything = hctl("logs", str(job))
    assert everything.code == 0, everything.err
    assert everything.out == (
        f"==> job {job} attempt 1 of 2 on {first.node} (lease {first_lease}) <==\n"
        "first run\n"
        f"==> job {job} attempt 2 of 2 on {second.node} (lease {second_lease}) <==\n"
        "second run\n"
    )
    assert hctl("logs", str(job), "--attempt", "1").out == "first run\n"
    missing = hctl("logs", str(job), "--attempt", "3")
    assert missing.code == ExitCode.NOT_FOUND
    assert "has no attempt 3 (it has had 2)" in missing.err


def test_logs_print_standard_error_on_stderr_apart_from_standard_output(
    hctl: Hctl, cluster: Cluster
) -> None:
    """What the job wrote to standard error goes to hctl's standard error, its standard
    output to standard output."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cluster.round()
    worker = cluster.worker_running(job)
    worker.write_log(job, "epoch 1\n")
    worker.write_log(job, "warning: slow data loader\n", stderr=True)
    result = hctl("logs", str(job))
    assert (result.code, result.out) == (0, "epoch 1\n")
    assert result.err == "warning: slow data loader\n"
    labelled = hctl("logs", str(job), "--label")
    assert labelled.err == f"[{worker.node} rank 0 stderr] warning: slow data loader\n"


def test_logs_of_a_job_that_ran_and_printed_nothing_say_so(hctl: Hctl, cluster: Cluster) -> None:
    """A job that runs without printing anything: logs says so plainly, and succeeds."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cluster.round()
    cluster.worker_running(job)
    result = hctl("logs", str(job))
    assert (result.code, result.out) == (0, "")
    assert result.err == f"job {job} printed no output\n"


def test_submit_output_and_error_files_are_part_of_the_spec(hctl: Hctl) -> None:
    """--output and --error are kept with the job (and shown); a pattern with a replacement
    the worker does not make is refused at submission."""
    job = submit(
        hctl,
        "--workload",
        "resnet",
        "--iterations",
        "10",
        "--output",
        "train-%j.out",
        "-e",
        "/shared/logs/%u/train-%j.err",
    )
    spec = json.loads(hctl("show", str(job), "--json").out)["job"]["spec"]
    assert (spec["output"], spec["error"]) == ("train-%j.out", "/shared/logs/%u/train-%j.err")
    assert "train-%j.out" in hctl("show", str(job)).out
    refused = hctl("submit", "--workload", "resnet", "--iterations", "1", "--output", "x-%Q.out")
    assert refused.code == ExitCode.INVALID_ARGUMENT
    assert "spec.output: unknown replacement %Q" in refused.err
    not_array = hctl("submit", "--workload", "resnet", "--iterations", "1", "--output", "x-%A.out")
    assert not_array.code == ExitCode.INVALID_ARGUMENT
    assert "spec.output: %A names an array's id or index; the job is no array" in not_array.err


def test_logs_blame_the_worker_not_the_master_when_a_worker_is_down(
    hctl: Hctl, cluster: Cluster
) -> None:
    """The master answers but the job's worker does not: logs names the worker and the
    attempt it could not read, not "cannot reach the master"."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cluster.round()
    worker = cluster.worker_running(job)
    worker.write_log(job, "epoch 1\n")
    worker.close()
    result = hctl("logs", str(job))
    assert result.code == ExitCode.UNAVAILABLE
    assert f"cannot read all of job {job}'s output: logs of attempt 1 of job {job} on " in (
        result.err
    )
    assert worker.node in result.err
    assert "cannot reach the master" not in result.err
