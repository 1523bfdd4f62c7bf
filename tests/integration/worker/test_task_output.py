"""What a task prints, kept by the real worker agent: standard output and standard error
apart, every lease's output, what a killed job printed, and the job's own --output and
--error files. Real subprocesses against an in-process fake master."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from protos.hadar.v1 import common_pb2, worker_pb2
from tests.integration.worker.fake_master import FakeMaster, eventually
from tests.integration.worker.test_agent import apply, assignment, logs, make_agent, stub_for
from worker.agent.agent import WorkerAgent

STDERR = common_pb2.LOG_STREAM_STDERR


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    fake = FakeMaster().start()
    yield fake
    fake.stop()


@pytest.fixture
def agent(
    master: FakeMaster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WorkerAgent]:
    # The agent hands its environment down to jobs: it must not make them unbuffered.
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    worker = make_agent(master.address, tmp_path / "state")
    worker.start()
    yield worker
    worker.stop(grace_s=2.0)


def python_command(job_id: int, lease: int, code: str) -> worker_pb2.TaskAssignment:
    a = assignment(job_id, lease, command=True, iterations=1)
    a.spec.command.argv[:] = [sys.executable, "-c", code]
    return a


def test_what_a_job_printed_before_it_was_killed_is_in_its_log(
    master: FakeMaster, agent: WorkerAgent
) -> None:
    """A job killed at once (as a cancel kills it) keeps what it had printed: Python's output
    to a file is not left in a buffer that the kill throws away."""
    stub = stub_for(agent)
    code = "import time; print('hello from the job'); time.sleep(60)"
    (result,) = apply(stub, python_command(70, 1, code))
    assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message
    eventually(lambda: logs(stub, 70).get(0, b"") == b"hello from the job\n")
    stub.StopTask(worker_pb2.StopTaskRequest(job_id=70, checkpoint=False), timeout=5)
    eventually(lambda: master.exits_for(70))
    assert logs(stub, 70)[0] == b"hello from the job\n"


def test_standard_output_and_standard_error_are_kept_apart(
    master: FakeMaster, agent: WorkerAgent
) -> None:
    """Each rank's standard output and standard error are streamed apart, each marked."""
    stub = stub_for(agent)
    code = "import sys; print('result 42'); print('warning: slow', file=sys.stderr)"
    apply(stub, python_command(71, 1, code))
    eventually(lambda: master.exits_for(71))
    assert logs(stub, 71) == {0: b"result 42\n"}
    assert logs(stub, 71, stream=STDERR) == {0: b"warning: slow\n"}


def test_an_earlier_leases_output_is_still_served_after_a_newer_lease_started(
    master: FakeMaster, agent: WorkerAgent
) -> None:
    """After the job is placed again (a new lease: migration, resize, retry), the output of
    the earlier lease is still there, asked for by its lease; without a lease, the newest."""
    stub = stub_for(agent)
    apply(stub, python_command(72, 1, "import time; print('attempt one'); time.sleep(60)"))
    eventually(lambda: logs(stub, 72).get(0) == b"attempt one\n")
    apply(stub, python_command(72, 2, "print('attempt two')"))
    eventually(lambda: [e.lease for e in master.exits_for(72)] == [1, 2])
    assert logs(stub, 72, lease=1) == {0: b"attempt one\n"}
    assert logs(stub, 72, lease=2) == {0: b"attempt two\n"}
    assert logs(stub, 72) == {0: b"attempt two\n"}


def test_output_and_error_files_are_appended_in_the_workdir_with_the_job_id(
    master: FakeMaster, agent: WorkerAgent, tmp_path: Path
) -> None:
    """--output and --error name files relative to the workdir, %j is the job id; the job's
    output goes there and is still kept by the worker for `hctl logs`."""
    stub = stub_for(agent)
    workdir = tmp_path / "work"
    workdir.mkdir()
    code = "import sys; print('epoch 1'); print('oops', file=sys.stderr)"
    a = python_command(73, 1, code)
    a.spec.workdir = str(workdir)
    a.spec.output = "train-%j.out"
    a.spec.error = "logs-of-%x/train-%j.err"
    (workdir / "logs-of-job-73").mkdir()
    apply(stub, a)
    eventually(lambda: master.exits_for(73))
    eventually(lambda: (workdir / "train-73.out").read_text() == "epoch 1\n")
    eventually(lambda: (workdir / "logs-of-job-73" / "train-73.err").read_text() == "oops\n")
    eventually(lambda: logs(stub, 73) == {0: b"epoch 1\n"})
    assert logs(stub, 73, stream=STDERR) == {0: b"oops\n"}

    # Without --error, standard error goes to the --output file, as under sbatch.
    both = python_command(74, 1, code)
    both.spec.workdir = str(workdir)
    both.spec.output = str(workdir / "all-%j.txt")
    apply(stub, both)
    eventually(lambda: master.exits_for(74))
    eventually(
        lambda: (
            sorted((workdir / "all-74.txt").read_text().splitlines())
            == [
                "epoch 1",
                "oops",
            ]
        )
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as another user needs root")
def test_output_files_are_written_as_the_jobs_user_never_as_root(
    master: FakeMaster, monkeypatch: pytest.MonkeyPatch, shared_dir: Path
) -> None:
    """A root agent's job writes its --output file as the job's user: in the user's own
    directory the file is the user's; where the user may not write, nothing is written
    there (the log says so) and the job still runs, its output kept by the worker."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    tmp_path = shared_dir
    agent = make_agent(master.address, tmp_path / "state")
    agent.start()
    try:
        stub = stub_for(agent)
        nobody = pwd.getpwnam("nobody")
        mine = tmp_path / "nobody-home"
        mine.mkdir()
        os.chown(mine, nobody.pw_uid, nobody.pw_gid)
        forbidden = tmp_path / "root-only"
        forbidden.mkdir(mode=0o700)
        for job_id, target in ((75, mine / "out-%j.txt"), (76, forbidden / "out-%j.txt")):
            a = python_command(job_id, 1, "print('from the job')")
            a.user = "nobody"
            a.spec.command.argv[0] = "/usr/bin/python3"
            a.spec.workdir = str(mine)
            a.spec.output = str(target)
            (result,) = apply(stub, a)
            assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message
            eventually(lambda job_id=job_id: master.exits_for(job_id))  # type: ignore[misc]
        written = mine / "out-75.txt"
        eventually(lambda: written.exists() and written.read_text() == "from the job\n")
        assert written.stat().st_uid == nobody.pw_uid
        eventually(lambda: b"from the job\n" in logs(stub, 76).get(0, b""))
        assert not (forbidden / "out-76.txt").exists()
        assert b"hadar: cannot write" in logs(stub, 76)[0]
    finally:
        agent.stop(grace_s=2.0)


@pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as another user needs root")
def test_a_jobs_folders_and_files_on_the_worker_are_its_users_alone(
    master: FakeMaster, monkeypatch: pytest.MonkeyPatch, shared_dir: Path
) -> None:
    """Whatever the agent's umask, the folders a root agent makes for a job (its task
    folder with the logs, its default workdir and checkpoint folder) are 0700 and the job
    user's, the logs and the job's --output file 0600, and the agent's own state (which
    holds assignments, environment values included) root's alone."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    old_umask = os.umask(0o022)
    state = shared_dir / "state"
    agent = make_agent(master.address, state)
    agent.start()
    try:
        stub = stub_for(agent)
        nobody = pwd.getpwnam("nobody")
        a = python_command(77, 1, "print('weights')")
        a.user = "nobody"
        a.spec.command.argv[0] = "/usr/bin/python3"
        a.spec.output = "out-%j.txt"
        a.spec.env["API_KEY"] = "sk-secret"
        (result,) = apply(stub, a)
        assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message
        eventually(lambda: master.exits_for(77))
        task_dir = state / "tasks" / "job-77.task-0.lease-1"
        workdir = state / "jobs" / "job-77"
        eventually((workdir / "out-77.txt").exists)
        for folder in (task_dir, workdir, state / "checkpoints" / "job-77"):
            info = folder.stat()
            assert (oct(info.st_mode & 0o777), info.st_uid) == ("0o700", nobody.pw_uid), folder
        files = [p for p in task_dir.iterdir() if p.is_file()] + [workdir / "out-77.txt"]
        assert len(files) >= 3
        for path in files:
            assert path.stat().st_mode & 0o077 == 0, path
        agent_state = state / "agent"
        assert agent_state.stat().st_mode & 0o077 == 0
        for path in agent_state.iterdir():
            assert path.stat().st_mode & 0o077 == 0, path
    finally:
        agent.stop(grace_s=2.0)
        os.umask(old_umask)
