"""The Hadar API's contract: validation names fields, auth, admin calls, watch, logs,
cluster status, workloads and tokens."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from protos.hadar.v1 import common_pb2, coordinator_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for


def spec(**changes: Any) -> common_pb2.JobSpec:
    base = common_pb2.JobSpec(
        name="ok", num_gpus=1, iterations=10, workload=common_pb2.WorkloadProgram(name="resnet")
    )
    for key, value in changes.items():
        if key == "command":
            base.command.argv.extend(value)
        elif key == "env":
            base.env.update(value)
        elif key == "allowed_gpu_types":
            base.allowed_gpu_types.extend(value)
        elif key == "workload":
            base.workload.name = str(value)
        else:
            setattr(base, key, value)
    return base


@dataclass(frozen=True)
class Failure:
    code: grpc.StatusCode
    details: str
    trailing: dict[str, str]


def error_of(call: Callable[[], object]) -> Failure:
    """The status a call fails with (the test fails if it succeeds)."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    trailing = {str(k): str(v) for k, v in (error.trailing_metadata() or ())}
    return Failure(error.code(), error.details() or "", trailing)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": ""}, "spec.name"),
        ({"name": "x" * 129}, "spec.name"),
        ({"num_gpus": 0}, "spec.num_gpus"),
        ({"num_gpus": 9}, "spec.num_gpus"),
        ({"iterations": 0}, "spec.iterations"),
        ({"workload": "nope"}, "spec.workload.name"),
        ({"env": {"1BAD": "x"}}, "spec.env['1BAD']"),
        ({"allowed_gpu_types": ["a100-80gb"]}, "spec.allowed_gpu_types[0]"),
        ({"priority": -1.0}, "spec.priority"),
        ({"checkpoint_dir": "relative/dir"}, "spec.checkpoint_dir"),
        ({"checkpoint_dir": "/scratch/alice/../../etc/x"}, "spec.checkpoint_dir"),
        ({"checkpoint_dir": "/scratch/\0/x"}, "spec.checkpoint_dir"),
        ({"workdir": "proj"}, "spec.workdir"),
        ({"workdir": "/home/alice/../bob"}, "spec.workdir"),
    ],
)
def test_validation_errors_name_the_field(
    cluster: Cluster, changes: dict[str, object], field: str
) -> None:
    """Each bad field yields INVALID_ARGUMENT whose message starts with the field path, and
    nothing is stored."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=4)
    cluster.worker(master, "n2", num_gpus=4, gpu_type="k80")
    api = cluster.api(master)
    error = error_of(lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(**changes))))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details.startswith(f"{field}: "), error.details
    assert error.trailing.get("x-hadar-field") == field
    assert list(api.ListJobs(hadar_pb2.ListJobsRequest()).jobs) == []


@pytest.mark.parametrize(
    "priority", [5e-324, 1e308, math.inf, -math.inf, math.nan, 0.0009, 1000.5, -1.0]
)
def test_a_priority_out_of_range_is_refused_naming_spec_priority(
    cluster: Cluster, priority: float
) -> None:
    """A weight that is not finite or outside 0.001 to 1000 is refused before it is stored:
    under gavel, 5e-324 once made every round's linear program fail for everyone."""
    master = cluster.master(policy="gavel")
    cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    error = error_of(
        lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(priority=priority)))
    )
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details.startswith("spec.priority: must be from 0.001 to 1000"), error.details
    assert error.trailing.get("x-hadar-field") == "spec.priority"
    assert list(api.ListJobs(hadar_pb2.ListJobsRequest()).jobs) == []


def test_priorities_at_both_ends_of_the_range_are_planned_under_gavel(cluster: Cluster) -> None:
    """The smallest and largest weights are accepted, stored as given, and gavel plans a
    round with both (and an unset one, which means 1)."""
    master = cluster.master(policy="gavel")
    cluster.worker(master, "n1", num_gpus=4)
    api = cluster.api(master)
    ids = {
        api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(priority=priority))).job.id: priority
        for priority in (0.001, 1000.0, 0.0)
    }
    stored = {j.id: j.spec.priority for j in api.ListJobs(hadar_pb2.ListJobsRequest()).jobs}
    assert stored == {job_id: priority or 1.0 for job_id, priority in ids.items()}
    assert sorted(master.run_round().started) == sorted(ids)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_gpus": 4097}, "spec.num_gpus"),
        ({"num_gpus": 2**32 - 1}, "spec.num_gpus"),
        ({"iterations": 10**12 + 1}, "spec.iterations"),
        ({"batch_size": 2**20 + 1}, "spec.batch_size"),
        ({"gpu_memory_bytes": 2**50 + 1}, "spec.gpu_memory_bytes"),
    ],
)
def test_numbers_past_their_bound_are_refused_before_any_worker_registered(
    cluster: Cluster, changes: dict[str, object], field: str
) -> None:
    """With no worker registered, the cluster's size bounds nothing yet: each count is
    still refused past its documented bound, naming the field."""
    master = cluster.master()
    api = cluster.api(master)
    error = error_of(lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(**changes))))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details.startswith(f"{field}: must be"), error.details
    assert list(api.ListJobs(hadar_pb2.ListJobsRequest()).jobs) == []


def test_submitted_directories_are_stored_normalized(cluster: Cluster) -> None:
    """Repeated and trailing slashes and '.' components are dropped from workdir and
    checkpoint_dir before the job is stored, so workers get the path that was checked."""
    master = cluster.master()
    cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    request = hadar_pb2.SubmitJobRequest(
        spec=spec(workdir="/home//alice/./proj/", checkpoint_dir="/scratch/alice/ckpt/")
    )
    job_id = api.SubmitJob(request).job.id
    stored = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job.spec
    assert (stored.workdir, stored.checkpoint_dir) == ("/home/alice/proj", "/scratch/alice/ckpt")


def test_a_gpu_count_past_the_store_is_refused_before_any_worker_registered(
    cluster: Cluster,
) -> None:
    """With no worker yet, a GPU count cannot be judged against the cluster, but one past
    past the documented bound (4096, the range hctl's --gpus takes; the store's column holds
    2**31 - 1) is still refused naming the field, and nothing is stored."""
    master = cluster.master()
    api = cluster.api(master)
    error = error_of(lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(num_gpus=2**31))))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details == "spec.num_gpus: must be 1 to 4096"
    assert list(api.ListJobs(hadar_pb2.ListJobsRequest()).jobs) == []


def test_missing_program_and_spec(cluster: Cluster) -> None:
    master = cluster.master()
    api = cluster.api(master)
    no_program = common_pb2.JobSpec(name="x", num_gpus=1, iterations=1)
    error = error_of(lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=no_program)))
    assert error.details.startswith("spec.program: ")
    error = error_of(lambda: api.SubmitJob(hadar_pb2.SubmitJobRequest()))
    assert error.details.startswith("spec: ")


def test_auth_rejects_missing_wrong_and_revoked_tokens(cluster: Cluster) -> None:
    """No token: UNAUTHENTICATED; the cluster token is not an API token; workers need the
    cluster token; a revoked token stops working."""
    master = cluster.master()
    api = cluster.api(master, "carol", admin=False)
    anonymous = Api(api.stub, ())
    assert (
        error_of(lambda: anonymous.WhoAmI(hadar_pb2.WhoAmIRequest())).code
        == grpc.StatusCode.UNAUTHENTICATED
    )
    as_worker = Api(api.stub, (("authorization", "Bearer cluster-secret"),))
    assert (
        error_of(lambda: as_worker.WhoAmI(hadar_pb2.WhoAmIRequest())).code
        == grpc.StatusCode.PERMISSION_DENIED
    )
    me = api.WhoAmI(hadar_pb2.WhoAmIRequest())
    assert (me.user, me.admin) == ("carol", False)

    worker = cluster.worker(master, "n1")
    worker.metadata = (("authorization", "Bearer wrong"),)
    assert error_of(worker.heartbeat).code == grpc.StatusCode.UNAUTHENTICATED

    mine = api.ListTokens(hadar_pb2.ListTokensRequest()).tokens
    assert [t.user for t in mine] == ["carol"]
    api.RevokeToken(hadar_pb2.RevokeTokenRequest(id=mine[0].id))
    assert (
        error_of(lambda: api.WhoAmI(hadar_pb2.WhoAmIRequest())).code
        == grpc.StatusCode.UNAUTHENTICATED
    )


def test_admin_calls_need_an_admin(cluster: Cluster) -> None:
    """Draining and creating tokens for others are admin-only; an admin drains and resumes
    a node and mints a token that works."""
    master = cluster.master()
    cluster.worker(master, "n1")
    user = cluster.api(master, "dave", admin=False)
    admin = cluster.api(master, "root", admin=True)
    denied = error_of(lambda: user.DrainNode(hadar_pb2.DrainNodeRequest(node="n1")))
    assert denied.code == grpc.StatusCode.PERMISSION_DENIED
    denied = error_of(
        lambda: user.CreateToken(hadar_pb2.CreateTokenRequest(user="eve", admin=False))
    )
    assert denied.code == grpc.StatusCode.PERMISSION_DENIED
    missing = error_of(lambda: admin.DrainNode(hadar_pb2.DrainNodeRequest(node="ghost")))
    assert missing.code == grpc.StatusCode.NOT_FOUND

    drained = admin.DrainNode(hadar_pb2.DrainNodeRequest(node="n1", reason="fan")).node
    assert drained.state == common_pb2.NODE_STATE_DRAINED and drained.reason == "fan"
    job = user.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    assert master.run_round().started == ()
    assert "waiting" in user.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job.reason
    resumed = admin.ResumeNode(hadar_pb2.ResumeNodeRequest(node="n1")).node
    assert resumed.state == common_pb2.NODE_STATE_READY
    assert master.run_round().started == (job.id,)

    minted = admin.CreateToken(hadar_pb2.CreateTokenRequest(user="eve", description="ci"))
    eve = Api(user.stub, (("authorization", f"Bearer {minted.token}"),))
    assert eve.WhoAmI(hadar_pb2.WhoAmIRequest()).user == "eve"
    listed = admin.ListTokens(hadar_pb2.ListTokensRequest(user="eve")).tokens
    assert [t.id for t in listed] == [minted.info.id]


def test_watch_jobs_streams_changes(cluster: Cluster) -> None:
    """WatchJobs sends the initial state, then every event of the selected job in order."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(iterations=50))).job
    stream = api.WatchJobs(
        hadar_pb2.WatchJobsRequest(job_ids=[job.id], include_initial=True), timeout=30
    )
    seen: list[tuple[str, int]] = []
    done = threading.Event()

    def read() -> None:
        for update in stream:
            seen.append((update.event.kind, update.job.state))
            if update.job.state == common_pb2.JOB_STATE_COMPLETED:
                break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_for(lambda: seen, what="initial state")
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.progress(job.id, 50)
    assert done.wait(30)
    stream.cancel()
    assert seen[0] == ("", common_pb2.JOB_STATE_PENDING)
    assert [k for k, _ in seen[1:]] == ["scheduled", "completed"]


def test_stream_logs_relays_from_the_worker(cluster: Cluster) -> None:
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    worker.log_lines[job.id] = b"epoch 1 loss 0.5\n"
    opening, *chunks = list(api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=job.id)))
    assert (opening.attempt, opening.data) == (1, b"")
    assert b"".join(c.data for c in chunks) == b"epoch 1 loss 0.5\n"
    assert chunks[0].node == "n1"
    missing = error_of(lambda: list(api.StreamLogs(hadar_pb2.StreamLogsRequest(job_id=999))))
    assert missing.code == grpc.StatusCode.NOT_FOUND


def test_cluster_status_nodes_and_workloads(cluster: Cluster) -> None:
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=4)
    cluster.worker(master, "n2", num_gpus=2, gpu_type="k80", workloads=("lstm",))
    api = cluster.api(master)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec(num_gpus=2))).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    status = api.GetClusterStatus(hadar_pb2.GetClusterStatusRequest())
    by_type = {g.type: (g.total, g.busy, g.idle, g.unavailable) for g in status.gpus}
    # fifo puts the 2-GPU resnet job on one type; either way 2 GPUs are busy.
    assert sorted(by_type) == ["k80", "v100"]
    assert sum(v[1] for v in by_type.values()) == 2
    assert by_type["v100"][0] == 4 and by_type["k80"][0] == 2
    assert status.policy == "fifo" and status.nodes_total == 2 and status.nodes_ready == 2
    assert status.last_round.number >= 1 and status.last_round.actions == 1
    counts = {c.state: c.count for c in status.jobs}
    assert counts[common_pb2.JOB_STATE_RUNNING] == 1
    nodes = api.ListNodes(hadar_pb2.ListNodesRequest()).nodes
    busy = [g for n in nodes for g in n.gpus if list(g.job_ids) == [job.id]]
    assert len(busy) == 2
    names = [w.name for w in api.ListWorkloads(hadar_pb2.ListWorkloadsRequest()).workloads]
    assert names == ["lstm", "resnet"]


def test_opaque_command_is_never_preempted(cluster: Cluster) -> None:
    """An opaque command keeps its GPUs even when a drained node makes the policy want them
    elsewhere; its default is non-preemptible."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    job = api.SubmitJob(
        hadar_pb2.SubmitJobRequest(
            spec=common_pb2.JobSpec(
                name="batch",
                num_gpus=2,
                iterations=10,
                command=common_pb2.CommandProgram(argv=["./run.sh"]),
            )
        )
    ).job
    assert not job.spec.preemptible
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    api.DrainNode(hadar_pb2.DrainNodeRequest(node="n1"))
    result = master.run_round()
    assert result.stopped == ()
    assert job.id in worker.running_jobs()
    assert not [s for s in worker.stops if s.job_id == job.id]


def test_heartbeat_from_unknown_node_asks_to_register(cluster: Cluster) -> None:
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    response = worker.coordinator.Heartbeat(
        coordinator_pb2.HeartbeatRequest(node="stranger"), metadata=worker.metadata, timeout=5
    )
    assert response.reregister


def test_a_preempted_job_says_which_job_took_its_gpus(cluster: Cluster) -> None:
    """When the policy gives a running job's GPU to another job, the running job's reason
    and history name the round and the job that took it."""
    master = cluster.master(policy="srtf")
    worker = cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)

    def submit(iterations: int) -> int:
        spec = common_pb2.JobSpec(
            name=f"train-{iterations}",
            num_gpus=1,
            iterations=iterations,
            workload=common_pb2.WorkloadProgram(name="resnet"),
        )
        return int(api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job.id)

    long_job = submit(100_000)
    master.run_round()
    wait_for(lambda: long_job in worker.running_jobs(), what="START of the long job")
    short_job = submit(10)
    result = master.run_round()
    assert result.stopped == (long_job,)
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=long_job, include_events=True))
    expected = f"preempted in round {result.number} for job {short_job}"
    assert got.job.reason.startswith(expected)
    assert got.events[-1].kind == "preempted"
    assert got.events[-1].reason.startswith(expected)


def test_hadare_forks_only_the_jobs_that_asked_to_be_elastic(cluster: Cluster) -> None:
    """On three idle nodes the default policy runs a job submitted without forkable on the
    one GPU it asked for; a forkable job may take the idle nodes as averaged copies."""
    master = cluster.master(policy="hadare")
    for name in ("n1", "n2", "n3"):
        cluster.worker(master, name, num_gpus=1)
    api = cluster.api(master)

    def submit(forkable: bool) -> int:
        spec = common_pb2.JobSpec(
            name="elastic" if forkable else "plain",
            num_gpus=1,
            iterations=100_000,
            forkable=forkable,
            workload=common_pb2.WorkloadProgram(name="resnet"),
        )
        return int(api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job.id)

    plain = submit(False)
    master.run_round()
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=plain)).job
    assert [len(t.gpu_indices) for t in got.tasks] == [1]
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=plain))

    elastic = submit(True)
    wait_for(
        lambda: not api.GetJob(hadar_pb2.GetJobRequest(job_id=plain)).job.tasks,
        what="the cancelled job's GPUs freed",
    )
    master.run_round()
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=elastic)).job
    assert got.spec.forkable
    assert len(got.tasks) > 1, "an idle cluster forks an elastic job into copies"
