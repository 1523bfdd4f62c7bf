"""Many users on one master: everyone sees the queue, only a job's owner and admins see its
command, environment, paths, failure output and logs; text that others' screens print is
refused when it holds control or direction characters. Real gRPC, SQLite and PostgreSQL."""

from __future__ import annotations

import grpc
import pytest

from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for
from tests.integration.master.test_api import error_of, spec

SECRET = "sk-live-4242"


def _alices_job(**changes: object) -> common_pb2.JobSpec:
    base = spec(
        name="train-alice",
        command=["python", "train.py", f"--api-key={SECRET}"],
        env={"API_KEY": SECRET},
        workdir="/home/alice/project",
        checkpoint_dir="/home/alice/ckpt",
        output="out-%j.txt",
        job_type="secret-model",
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def _leaks(message: object) -> list[str]:
    """What of alice's private parts appears anywhere in a message."""
    text = str(message)
    return [s for s in (SECRET, "train.py", "/home/alice", "out-%j", "secret-model") if s in text]


def _alices_running_job(
    cluster: Cluster,
) -> tuple[FakeWorker, tuple[Api, Api, Api], common_pb2.Job]:
    """A master with one worker running alice's job; the APIs of alice, bob and an admin."""
    master = cluster.master()
    worker = cluster.worker(master, "n1")
    users = (
        cluster.api(master, "alice", admin=False),
        cluster.api(master, "bob", admin=False),
        cluster.api(master, "root", admin=True),
    )
    job = users[0].SubmitJob(hadar_pb2.SubmitJobRequest(spec=_alices_job())).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="the job to start")
    return worker, users, job


def test_other_users_see_the_queue_but_none_of_a_jobs_private_parts(cluster: Cluster) -> None:
    """bob reads alice's job as a queue shows it (id, user, name, state, GPUs, placement,
    reason): no command line, environment value, path, job type or failure output, in
    GetJob, ListJobs, WatchJobs and ListJobHistory alike; alice and an admin read it all."""
    worker, (alice, bob, root), job = _alices_running_job(cluster)

    seen = bob.GetJob(hadar_pb2.GetJobRequest(job_id=job.id, include_events=True))
    assert seen.job.private_hidden
    assert _leaks(seen) == []
    public = (seen.job.user, seen.job.spec.name, seen.job.spec.num_gpus)
    assert public == ("alice", "train-alice", 1)
    assert seen.job.state == common_pb2.JOB_STATE_RUNNING
    assert [t.node for t in seen.job.tasks] == ["n1"]
    assert seen.job.spec.WhichOneof("program") == "command"
    listed = bob.ListJobs(hadar_pb2.ListJobsRequest())
    assert [j.id for j in listed.jobs] == [job.id] and _leaks(listed) == []
    watched = next(iter(bob.WatchJobs(hadar_pb2.WatchJobsRequest(include_initial=True))))
    assert watched.job.id == job.id and _leaks(watched) == []

    for reader in (alice, root):
        whole = reader.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
        assert not whole.private_hidden
        assert whole.spec.env["API_KEY"] == SECRET
        assert list(whole.spec.command.argv)[-1] == f"--api-key={SECRET}"
        assert whole.spec.workdir == "/home/alice/project"

    worker.exit(job.id, common_pb2.EXIT_KIND_FAILED, exit_code=1, message=f"KeyError: {SECRET}")
    wait_for(
        lambda: (
            alice.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job.state
            == common_pb2.JOB_STATE_FAILED
        ),
        what="the job to fail",
    )
    mine = alice.GetJob(hadar_pb2.GetJobRequest(job_id=job.id, include_events=True))
    assert mine.job.failure_output == f"KeyError: {SECRET}"
    # The reason is public: it says what happened, not what the job printed.
    assert mine.job.reason.startswith("exit code 1 on n1")
    assert SECRET not in mine.job.reason and all(SECRET not in e.reason for e in mine.events)
    theirs = bob.GetJob(hadar_pb2.GetJobRequest(job_id=job.id, include_events=True))
    assert theirs.job.reason == mine.job.reason and _leaks(theirs) == []
    history = bob.ListJobHistory(hadar_pb2.ListJobHistoryRequest())
    assert [e.job.id for e in history.entries] == [job.id] and _leaks(history) == []


def test_a_waiting_job_listed_again_is_hidden_from_others_and_whole_for_its_readers(
    cluster: Cluster,
) -> None:
    """Listings remember the jobs they encoded: whoever lists first, in whatever order, bob
    never reads alice's private parts and alice and an admin always read them all; a change
    to the job shows in the next listing of each."""
    master = cluster.master()
    alice, bob, root = (
        cluster.api(master, "alice", admin=False),
        cluster.api(master, "bob", admin=False),
        cluster.api(master, "root", admin=True),
    )
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=_alices_job())).job

    def listed(api: Api) -> common_pb2.Job:
        (only,) = api.ListJobs(hadar_pb2.ListJobsRequest()).jobs
        assert isinstance(only, common_pb2.Job)
        return only

    for api in (bob, alice, bob, root, alice, bob):
        seen = listed(api)
        if api is bob:
            assert seen.private_hidden and _leaks(seen) == []
        else:
            assert not seen.private_hidden
            assert seen.spec.env["API_KEY"] == SECRET
    alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id, reason="not needed"))
    for api in (bob, alice):
        seen = listed(api)
        assert seen.state == common_pb2.JOB_STATE_CANCELLED
        assert seen.private_hidden == (api is bob)


def test_another_users_logs_are_permission_denied(cluster: Cluster) -> None:
    worker, (alice, bob, root), job = _alices_running_job(cluster)
    worker.log_lines[job.id] = f"token {SECRET}\n".encode()
    request = hadar_pb2.StreamLogsRequest(job_id=job.id)
    failure = error_of(lambda: list(bob.StreamLogs(request)))
    assert failure.code == grpc.StatusCode.PERMISSION_DENIED
    assert f"job {job.id} belongs to alice" in failure.details
    for reader in (alice, root):
        data = b"".join(c.data for c in reader.StreamLogs(request))
        assert data == f"token {SECRET}\n".encode()


def test_a_group_may_read_its_members_jobs_when_the_cluster_says_so(cluster: Cluster) -> None:
    """job_data_readers = "group" opens a job to the members of its owner's group (as
    fair_share_groups names them), and to nobody else."""
    master = cluster.master(
        job_data_readers="group", fair_share_groups={"vision": ["alice", "carol"]}
    )
    cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    carol = cluster.api(master, "carol", admin=False)
    bob = cluster.api(master, "bob", admin=False)
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=_alices_job())).job
    assert carol.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job.spec.env["API_KEY"] == SECRET
    assert bob.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job.private_hidden


@pytest.mark.parametrize(
    ("changes", "field", "code_point"),
    [
        ({"name": "evil\x1b]0;pwned\x07"}, "spec.name", "U+001B"),
        ({"name": "invoice\u202egnp.exe"}, "spec.name", "U+202E"),
        ({"name": "a\x9bb"}, "spec.name", "U+009B"),
        ({"job_type": "t\x1b[2J"}, "spec.job_type", "U+001B"),
        ({"output": "out\x1b[1A.txt"}, "spec.output", "U+001B"),
        ({"workdir": "/tmp/\u2066x"}, "spec.workdir", "U+2066"),
    ],
)
def test_text_others_print_is_refused_with_control_characters(
    cluster: Cluster, changes: dict[str, str], field: str, code_point: str
) -> None:
    master = cluster.master()
    cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    request = hadar_pb2.SubmitJobRequest(spec=spec(**changes))
    failure = error_of(lambda: alice.SubmitJob(request))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in failure.details and code_point in failure.details
    assert list(alice.ListJobs(hadar_pb2.ListJobsRequest()).jobs) == []


def test_reasons_people_give_are_refused_with_control_characters(cluster: Cluster) -> None:
    master = cluster.master()
    cluster.worker(master, "n1")
    alice = cluster.api(master, "alice", admin=False)
    job = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    failure = error_of(
        lambda: alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=job.id, reason="x\x1b[2J"))
    )
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT and "reason" in failure.details
    state = alice.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job.state
    assert state == common_pb2.JOB_STATE_PENDING
