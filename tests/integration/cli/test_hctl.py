"""hctl against a real master with fake-GPU workers: output, exit codes, --json shapes."""

from __future__ import annotations

import json
import re
import threading

from clients.cli import shapes
from clients.cli.command import ExitCode
from protos.hadar.v1 import common_pb2
from tests.integration.cli.conftest import Cluster, Hctl, Result


def submit(hctl: Hctl, *args: str, user: str = "alice") -> int:
    result = hctl("submit", "--parsable", *args, user=user)
    assert result.code == 0, result.err
    return int(result.out)


def row(result_out: str, job_id: int) -> list[str]:
    """The queue row of a job, split on whitespace."""
    for line in result_out.splitlines():
        fields = line.split()
        if fields and fields[0] == str(job_id):
            return fields
    raise AssertionError(f"job {job_id} not in:\n{result_out}")


def test_a_job_from_submit_to_completion(hctl: Hctl, cluster: Cluster):
    """submit prints the id; queue, show and wait follow the job through its life."""
    result = hctl("submit", "--workload", "resnet", "--iterations", "100", "--name", "rn-a")
    assert result.code == 0
    assert re.fullmatch(
        r"submitted job (\d+) \(rn-a\): pending — follow it with `hctl show \1`\n", result.out
    )
    job = int(re.findall(r"\d+", result.out)[0])

    queue = hctl("queue")
    assert queue.code == 0
    assert queue.lines()[0].split() == [
        "ID",
        "NAME",
        "USER",
        "STATE",
        "GPUS",
        "NODE/REASON",
        "SUBMITTED",
        "ELAPSED",
        "PROGRESS",
    ]
    fields = row(queue.out, job)
    assert fields[1:5] == ["rn-a", "alice", "pending", "1"]
    assert fields[5].startswith("(")  # why it waits

    cluster.round()
    worker = cluster.worker_running(job)
    worker.report_progress(job, 40, iterations_per_s=4.0)

    running = row(hctl("queue", "--me").out, job)
    assert running[3] == "running"
    assert running[5] == f"{worker.node}[{worker.tasks[job].gpu_indices[0]}]"
    assert running[-2:] == ["40%", "40/100"]

    shown = hctl("show", str(job))
    assert shown.code == 0
    assert f"Job {job}  rn-a  (alice)" in shown.out
    assert "running" in shown.out
    assert "40% 40/100" in shown.out
    assert "ETA 15s (on its current GPUs)" in shown.out
    assert re.search(rf"^0\s+{worker.node}\s+\d\s+{worker.tasks[job].gpu_type}", shown.out, re.M)
    assert re.search(r"pending → running\s+scheduled", shown.out)

    worker.exit(job, common_pb2.EXIT_KIND_COMPLETED, iterations_done=100)
    waited = hctl("wait", str(job), "--timeout", "20")
    assert (waited.code, waited.out) == (0, f"job {job} (rn-a) completed\n")

    empty = hctl("queue")
    assert (empty.code, empty.out, empty.err) == (
        0,
        "",
        "no active jobs (add --all for finished ones)\n",
    )
    finished = row(hctl("queue", "--all").out, job)
    assert finished[3] == "completed" and finished[-2:] == ["100%", "100/100"]
    assert row(hctl("queue", "-t", "CD").out, job)[3] == "completed"


def test_json_outputs_match_their_documented_shapes(hctl: Hctl, cluster: Cluster):
    """Every read command's --json conforms to the shape documented in docs/cli.md."""
    job = submit(
        hctl, "--workload", "lstm", "--iterations", "50", "--gpu-type", "k80", "--env", "SEED=3"
    )
    submit(hctl, "--iterations", "5", "--name", "prep", "--", "bash", "-c", "true", user="bob")
    cluster.round()
    cluster.worker_running(job).report_progress(job, 10, iterations_per_s=2.0)

    outputs = {
        "queue": hctl("queue", "--all", "--json"),
        "show": hctl("show", str(job), "--json"),
        "nodes": hctl("nodes", "--json"),
        "status": hctl("status", "--json"),
        "workloads": hctl("workloads", "--json"),
        "whoami": hctl("whoami", "--json"),
        "admin token list": hctl("admin", "token", "list", "--json", user="root"),
        "admin token create": hctl("admin", "token", "create", "carol", "--json", user="root"),
        "submit": hctl("submit", "--workload", "resnet", "--iterations", "9", "--json"),
    }
    documents = {}
    for command, result in outputs.items():
        assert result.code == 0, (command, result.err)
        documents[command] = json.loads(result.out)
        assert shapes.check(documents[command], shapes.OUTPUTS[command]) == [], command

    shown = documents["show"]
    assert shown["job"]["state"] == "running"
    assert shown["job"]["spec"]["allowed_gpu_types"] == ["k80"]
    assert shown["job"]["spec"]["env"] == {"SEED": "3"}
    assert shown["eta_s"] == 20.0
    assert [e["kind"] for e in shown["events"]][:2] == ["submitted", "scheduled"]
    assert {j["user"] for j in documents["queue"]["jobs"]} == {"alice", "bob"}
    assert sorted(n["name"] for n in documents["nodes"]["nodes"]) == ["gpu-a", "gpu-b"]
    assert documents["status"]["status"]["nodes_ready"] == 2
    assert {g["type"]: g["total"] for g in documents["status"]["status"]["gpus"]} == {
        "k80": 2,
        "v100": 2,
    }
    assert documents["whoami"] == {
        "user": "alice",
        "admin": False,
        "master": cluster.address,
        "token_source": "argument",
    }
    assert documents["admin token create"]["token"]
    assert documents["admin token create"]["info"]["user"] == "carol"


def test_wait_exit_codes_tell_how_the_job_ended(hctl: Hctl, cluster: Cluster):
    """0 completed (tested above), 100 failed, 103 cancelled, 124 when the wait times out."""
    failing = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cancelled = submit(hctl, "--workload", "resnet", "--iterations", "10")
    slow = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cluster.round()
    cluster.worker_running(failing).exit(
        failing, common_pb2.EXIT_KIND_FAILED, exit_code=3, message="CUDA error"
    )
    result = hctl("wait", str(failing), "--timeout", "20")
    assert result.code == ExitCode.JOB_FAILED
    assert int(ExitCode.JOB_FAILED) == 100
    assert result.out.startswith(f"job {failing} (resnet) failed")

    assert hctl("cancel", str(cancelled)).code == 0
    assert hctl("wait", str(cancelled), "--timeout", "20").code == 103

    timed_out = hctl("wait", str(slow), "--timeout", "0.5")
    assert timed_out.code == 124
    assert timed_out.err == f"job {slow} did not finish within 0.5s\n"
    assert hctl("wait", "9999").code == ExitCode.NOT_FOUND


def test_cancel_rules_and_messages(hctl: Hctl, cluster: Cluster):
    """Owners cancel their jobs; others get exit 4; unknown ids exit 3; bulk needs --yes."""
    mine = submit(hctl, "--workload", "resnet", "--iterations", "10")
    bobs = submit(hctl, "--workload", "resnet", "--iterations", "10", user="bob")

    denied = hctl("cancel", str(bobs))
    assert denied.code == ExitCode.PERMISSION_DENIED
    assert denied.err.count("\n") == 1
    assert denied.err.startswith(f"error: cannot cancel job {bobs}: job {bobs} belongs to bob")

    missing = hctl("cancel", "9999")
    assert (missing.code, missing.err) == (
        ExitCode.NOT_FOUND,
        "error: job 9999 not found — list jobs with `hctl queue --all`\n",
    )

    refused = hctl("cancel", "--me", "-t", "pending")  # stdin is not a terminal here
    assert refused.code == ExitCode.USAGE
    assert "without confirmation — add --yes" in refused.err
    assert row(hctl("queue").out, mine)[3] == "pending"

    done = hctl("cancel", "--me", "-t", "pending", "--yes")
    assert (done.code, done.out) == (0, f"cancelled job {mine} (resnet)\n")
    again = hctl("cancel", str(mine))
    assert again.out == f"job {mine} (resnet) had already ended: cancelled\n"
    assert hctl("cancel", str(bobs), user="root").code == 0


def test_a_running_job_is_stopped_on_cancel(hctl: Hctl, cluster: Cluster):
    """Cancelling a running job stops its task on the worker and ends it cancelled."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cluster.round()
    worker = cluster.worker_running(job)
    result = hctl("cancel", str(job), "--reason", "wrong learning rate")
    assert result.code == 0
    shown = json.loads(hctl("show", str(job), "--json").out)
    assert shown["job"]["state"] == "cancelled"
    assert "wrong learning rate" in shown["events"][-1]["reason"]
    assert worker.tasks[job].gpu_indices  # it had been placed there


def test_master_rejections_name_the_field_and_exit_6(hctl: Hctl):
    """INVALID_ARGUMENT from the master becomes exit 6 with the field it names."""
    result = hctl("submit", "--workload", "resnet", "--iterations", "10", "--gpus", "5")
    assert result.code == ExitCode.INVALID_ARGUMENT
    assert result.err.startswith("error: the master rejected spec.num_gpus: asks for 5 GPUs")
    assert result.err.rstrip().endswith("see `hctl submit --help`")
    unknown = hctl("submit", "--workload", "nope", "--iterations", "10")
    assert unknown.code == 6
    assert "error: the master rejected spec.workload.name: unknown workload 'nope'" in unknown.err


def test_gpu_memory_no_gpu_has_is_refused_and_a_fitting_request_is_shown(hctl: Hctl):
    """--gpu-memory larger than every GPU of the cluster (16GiB here) is refused like a GPU
    count the cluster lacks (exit 6, naming the largest GPU memory); a request that fits is
    accepted, and `hctl show` prints it (--json as gpu_memory_bytes)."""
    refused = hctl("submit", "--workload", "resnet", "--iterations", "10", "--gpu-memory", "100GiB")
    assert refused.code == ExitCode.INVALID_ARGUMENT
    assert refused.err.startswith(
        "error: the master rejected spec.gpu_memory_bytes: asks for 100GiB per GPU but the "
        "largest GPU memory in the cluster is 16GiB"
    ), refused.err
    accepted = hctl(
        "submit",
        "--workload",
        "resnet",
        "--iterations",
        "10",
        "--gpu-memory",
        "12GiB",
        "--parsable",
    )
    assert accepted.code == 0, accepted.err
    job = accepted.out.strip()
    shown = hctl("show", job)
    assert "GPU memory 12GiB per GPU" in shown.out
    document = json.loads(hctl("show", job, "--json").out)
    assert document["job"]["spec"]["gpu_memory_bytes"] == 12 * 1024**3


def test_admin_commands_and_permissions(hctl: Hctl, cluster: Cluster):
    """drain/resume and tokens need an admin; users get exit 4 with advice."""
    denied = hctl("drain", "gpu-b", "--reason", "fan")
    assert denied.code == ExitCode.PERMISSION_DENIED
    assert "only admins may" in denied.err

    drained = hctl("drain", "gpu-b", "--reason", "replacing a fan", user="root")
    assert drained.code == 0
    assert drained.out == (
        "node gpu-b is drained: nothing runs on it and nothing new is placed — "
        "undo with `hctl resume gpu-b`\n"
    )
    nodes = {line.split()[0]: line.split() for line in hctl("nodes").lines()[1:]}
    assert nodes["gpu-b"][1] == "drained"
    assert "replacing a fan" in hctl("nodes").out
    assert hctl("resume", "gpu-b", user="root").out.startswith("node gpu-b is ready")
    assert hctl("drain", "gpu-z", user="root").code == ExitCode.NOT_FOUND

    per_gpu = hctl("nodes", "--gpus")
    assert [line.split()[:3] for line in per_gpu.lines()[1:]] == [
        ["gpu-a", "0", "v100"],
        ["gpu-a", "1", "v100"],
        ["gpu-b", "0", "k80"],
        ["gpu-b", "1", "k80"],
    ]

    own = hctl("admin", "token", "list")
    assert own.code == 0
    assert [line.split()[1] for line in own.lines()[1:]] == ["alice"]
    denied = hctl("admin", "token", "create", "mallory", user="alice")
    assert denied.code == ExitCode.PERMISSION_DENIED
    created = hctl("admin", "token", "create", "dave", "--description", "laptop", user="root")
    assert created.code == 0
    token = created.out.strip()
    assert "shown once" in created.err
    # `hctl token` is the short form of `hctl admin token`.
    listed = hctl("token", "list", "--user", "dave", "--json", user="root")
    (info,) = json.loads(listed.out)["tokens"]
    assert (info["user"], info["description"], info["revoked"]) == ("dave", "laptop", False)

    cluster.tokens["dave"] = token
    assert hctl("whoami", user="dave").out.startswith("dave (user) at ")
    assert hctl("admin", "token", "revoke", info["id"], user="root").code == 0
    cluster.master.auth.forget()  # revocation is immediate on the next check
    refused = hctl("whoami", user="dave")
    assert refused.code == ExitCode.PERMISSION_DENIED
    assert refused.err.startswith("error: the master did not accept your credentials")
    unknown = hctl("admin", "token", "revoke", "nope", user="root")
    assert unknown.code == ExitCode.NOT_FOUND
    assert "`hctl admin token list`" in unknown.err


def test_status_and_workloads_read_like_the_cluster(hctl: Hctl, cluster: Cluster):
    """status counts GPUs by type and state and names the last round; workloads lists them."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10", "--gpu-type", "v100")
    submit(hctl, "--workload", "resnet", "--iterations", "10", "--gpus", "2", "--gpu-type", "v100")
    cluster.round()
    status = hctl("status")
    assert status.code == 0
    assert "nodes       2 ready of 2" in status.out
    assert "1 running" in status.out and "1 pending" in status.out
    assert "queue length 1" in status.out
    assert re.search(r"last round\s+#1 .* by fifo", status.out)
    gpu_rows = {
        line.split()[0]: line.split()[1:]
        for line in status.lines()
        if line[:4] in ("v100", "k80 ", "all ")
    }
    assert gpu_rows["v100"] == ["2", "1", "1", "0"]
    assert gpu_rows["k80"] == ["2", "0", "2", "0"]
    assert gpu_rows["all"] == ["4", "1", "3", "0"]
    assert cluster.worker_running(job).node == "gpu-a"

    workloads = hctl("workloads")
    names = [line.split()[0] for line in workloads.lines()[1:]]
    assert "resnet" in names and "lstm" in names


def test_logs_relay_the_workers_output(hctl: Hctl, cluster: Cluster):
    """logs prints what the job wrote; --tail keeps the last lines; --label names the rank."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cluster.round()
    worker = cluster.worker_running(job)
    worker.write_log(job, "epoch 1\nepoch 2\nepoch 3\n")
    assert hctl("logs", str(job)).out == "epoch 1\nepoch 2\nepoch 3\n"
    assert hctl("logs", str(job), "--tail", "1").out == "epoch 3\n"
    labelled = hctl("logs", str(job), "--label", "--tail", "2").out
    assert labelled == f"[{worker.node} rank 0] epoch 2\n[{worker.node} rank 0] epoch 3\n"
    assert hctl("logs", "9999").code == ExitCode.NOT_FOUND
    waiting = submit(hctl, "--workload", "resnet", "--iterations", "10", "--gpus", "4")
    silent = hctl("logs", str(waiting))
    assert (silent.code, silent.out) == (0, "")
    assert silent.err == f"no output from job {waiting} (a job that has not run yet has none)\n"


def test_a_script_job_and_a_job_file(hctl: Hctl, tmp_path):
    """--script submits a managed script; -f reads TOML and flags override it."""
    script = submit(hctl, "--script", "--iterations", "7", "--", "python", "train.py", "--lr", "1")
    spec = json.loads(hctl("show", str(script), "--json").out)["job"]["spec"]
    assert spec["program"] == {
        "kind": "script",
        "workload": "",
        "argv": ["python", "train.py", "--lr", "1"],
    }
    assert spec["name"] == "train" and spec["preemptible"] is True

    job_file = tmp_path / "job.toml"
    job_file.write_text(
        'name = "from-file"\niterations = 30\nworkload = "lstm"\ngpus = 1\n'
        'gpu_types = ["v100"]\npriority = 2\n[env]\nA = "1"\n'
    )
    job = submit(hctl, "-f", str(job_file), "--priority", "3", "--env", "B=2")
    spec = json.loads(hctl("show", str(job), "--json").out)["job"]["spec"]
    assert (spec["name"], spec["iterations"], spec["priority"]) == ("from-file", 30, 3.0)
    assert spec["env"] == {"A": "1", "B": "2"}
    assert spec["allowed_gpu_types"] == ["v100"]
    assert spec["program"]["workload"] == "lstm"

    command = submit(hctl, "--iterations", "3", "--", "sleep", "1")
    shown = json.loads(hctl("show", str(command), "--json").out)["job"]["spec"]
    assert shown["program"]["kind"] == "command" and shown["preemptible"] is False


def test_logs_follow_until_the_job_ends(hctl: Hctl, cluster: Cluster):
    """logs -f prints output as it is written, under a header naming the attempt and its
    node (more attempts may follow), and returns 0 once the job has ended."""
    job = submit(hctl, "--workload", "resnet", "--iterations", "10")
    cluster.round()
    worker = cluster.worker_running(job)
    worker.write_log(job, "step 1\n")
    results: list[Result] = []
    follower = threading.Thread(target=lambda: results.append(hctl("logs", str(job), "-f")))
    follower.start()
    worker.write_log(job, "step 2\n")
    worker.exit(job, common_pb2.EXIT_KIND_COMPLETED, iterations_done=10)
    follower.join(30)
    assert not follower.is_alive(), "logs -f did not return after the job ended"
    (result,) = results
    header = f"==> job {job} attempt 1 on {worker.node} (lease {worker.tasks[job].lease}) <==\n"
    assert (result.code, result.out) == (0, header + "step 1\nstep 2\n")


def test_a_completed_command_shows_exit_code_0_and_a_failed_one_its_code(
    hctl: Hctl, cluster: Cluster
):
    """An opaque command reports no progress: once it exits 0 it is `completed (exit 0)`
    with its run time in `show`, `exit 0` in the queue and exit_code 0 in --json, never an
    iteration count; one exiting 2 shows exit code 2 the same ways."""
    ok = submit(hctl, "--iterations", "5", "--name", "ok", "--", "bash", "-c", "true")
    bad = submit(hctl, "--iterations", "5", "--name", "bad", "--", "bash", "-c", "exit 2")
    cluster.round()
    # The worker reports a command's iterations as all done when it exits 0.
    assert cluster.worker_running(ok).exit(ok, common_pb2.EXIT_KIND_COMPLETED, iterations_done=5)
    assert cluster.worker_running(bad).exit(
        bad, common_pb2.EXIT_KIND_FAILED, exit_code=2, message="boom"
    )

    for job, state, code in ((ok, "completed", 0), (bad, "failed", 2)):
        shown = hctl("show", str(job))
        assert shown.code == 0, shown.err
        assert re.search(rf"^progress\s+{state} \(exit {code}\) after \S+$", shown.out, re.M), (
            shown.out
        )
        assert f"; exit code {code};" in shown.out
        assert "100%" not in shown.out and "5/5" not in shown.out
        assert row(hctl("queue", "--all").out, job)[-2:] == ["exit", str(code)]
        document = json.loads(hctl("show", str(job), "--json").out)["job"]
        assert (document["state"], document["exit_code"]) == (state, code)
        assert document["reports_progress"] is False
    text = hctl("show", str(ok)).out
    assert re.search(r"^state\s+completed — completed \(exit 0\)$", text, re.M), text


def test_submit_retry_flags_are_shown_by_show(hctl: Hctl):
    """--no-requeue and --retries N reach the job's spec; `hctl show` and its --json tell
    the limit that applies (the default one when none was given); more than 10 is refused
    before sending, naming the flag and its range."""
    none = submit(hctl, "--no-requeue", "--iterations", "3", "--", "sleep", "1")
    shown = json.loads(hctl("show", str(none), "--json").out)["job"]
    assert (shown["spec"]["max_retries"], shown["retry_limit"]) == (0, 0)
    assert "0 retries of 0 allowed;" in hctl("show", str(none)).out

    once = submit(hctl, "--retries", "1", "--workload", "resnet", "--iterations", "3")
    shown = json.loads(hctl("show", str(once), "--json").out)["job"]
    assert (shown["spec"]["max_retries"], shown["retry_limit"]) == (1, 1)

    default = submit(hctl, "--workload", "resnet", "--iterations", "3")
    shown = json.loads(hctl("show", str(default), "--json").out)["job"]
    assert shown["spec"]["max_retries"] is None
    limit = shown["retry_limit"]
    assert f"0 retries of {limit} allowed (default)" in hctl("show", str(default)).out

    refused = hctl("submit", "--retries", "11", "--workload", "resnet", "--iterations", "3")
    assert refused.code == ExitCode.USAGE
    assert "--retries: 11 is out of range: 0..10" in refused.err


def test_elastic_is_asked_for_shown_and_refused_for_commands(hctl: Hctl):
    """Forking into averaged copies is opt-in: a job submitted without --elastic is not
    forkable; --elastic reaches the spec and is shown by show (text and --json) and by a +
    in the queue's GPUS column; an opaque command asking for it is refused naming the
    field."""
    plain = submit(hctl, "--workload", "resnet", "--iterations", "3", "--gpus", "2")
    elastic = submit(hctl, "--elastic", "--workload", "resnet", "--iterations", "3")
    assert json.loads(hctl("show", str(plain), "--json").out)["job"]["spec"]["forkable"] is False
    assert json.loads(hctl("show", str(elastic), "--json").out)["job"]["spec"]["forkable"] is True
    assert "elastic no;" not in hctl("show", str(elastic)).out
    assert "elastic yes (may run as averaged copies)" in hctl("show", str(elastic)).out
    assert "elastic no" in hctl("show", str(plain)).out
    queue = hctl("queue").out
    assert row(queue, plain)[4] == "2"
    assert row(queue, elastic)[4] == "1+"
    refused = hctl("submit", "--elastic", "--iterations", "3", "--", "sleep", "1")
    assert refused.code == ExitCode.INVALID_ARGUMENT
    assert "spec.forkable" in refused.err and "opaque commands" in refused.err
