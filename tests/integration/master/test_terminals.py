"""AttachJob: an interactive job's terminal relayed by the master to its worker's
AttachTask, against real gRPC servers (the master, and fake workers whose terminal
echoes what is typed)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from functools import partial
from typing import Any

import grpc
import pytest

from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for
from tests.integration.master.test_api import error_of, spec


class Keyboard:
    """The input side of an AttachJob call: the first message, then whatever is typed."""

    def __init__(self, job_id: int, rows: int = 24, cols: int = 80) -> None:
        self._typed: queue.Queue[common_pb2.TerminalInput | None] = queue.Queue()
        self._typed.put(
            common_pb2.TerminalInput(
                job_id=job_id, size=common_pb2.WindowSize(rows=rows, cols=cols)
            )
        )

    def type(self, data: bytes) -> None:
        self._typed.put(common_pb2.TerminalInput(data=data))

    def resize(self, rows: int, cols: int) -> None:
        self._typed.put(common_pb2.TerminalInput(size=common_pb2.WindowSize(rows=rows, cols=cols)))

    def close(self) -> None:
        self._typed.put(None)

    def __iter__(self) -> Iterator[common_pb2.TerminalInput]:
        while (item := self._typed.get()) is not None:
            yield item


def _session(cluster: Cluster, **master_settings: Any) -> tuple[Api, FakeWorker, int]:
    master = cluster.master(**master_settings)
    worker = cluster.worker(master, "n1")
    api = cluster.api(master, "alice", admin=False)
    job = api.SubmitJob(
        hadar_pb2.SubmitJobRequest(
            spec=spec(workload="", iterations=0, command=["bash"], interactive=True)
        )
    ).job
    master.run_round()
    wait_for(lambda: job.id in worker.running_jobs(), what="START")
    return api, worker, job.id


def _read_all(api: Api, job_id: int) -> list[common_pb2.TerminalOutput]:
    return list(_attach(api, Keyboard(job_id)))


def _attach(api: Api, keyboard: Keyboard) -> Any:
    return api.stub.AttachJob(iter(keyboard), metadata=api.metadata, timeout=20)


def test_the_owner_types_into_the_terminal_and_gets_the_exit_code(cluster: Cluster) -> None:
    """Typed bytes and window sizes reach the worker's terminal of the job's current lease,
    what it shows comes back, and the last message is the command's exit."""
    api, worker, job_id = _session(cluster)
    lease = worker.applied[-1].lease
    keyboard = Keyboard(job_id, rows=40, cols=120)
    call = _attach(api, keyboard)
    keyboard.type(b"ls\r")
    shown = next(call)
    assert shown.data == b"echo:ls\r"
    keyboard.resize(50, 132)
    keyboard.type(b"exit 3")
    last = next(call)
    assert (last.exited, last.exit_code) == (True, 3)
    assert list(call) == []
    assert worker.terminal_events == [f"attach {job_id} {lease} 40x120", "size 50x132", "exit 3"]


def test_only_the_owner_may_attach_not_even_an_admin(cluster: Cluster) -> None:
    """Typing into a session is acting as its user: another user, admin or not, is refused
    before anything reaches the worker; the admin is told how to end it instead."""
    _, worker, job_id = _session(cluster)
    master = cluster.masters[0]
    for user, admin in (("bob", False), ("root", True)):
        other = cluster.api(master, user, admin=admin)
        failure = error_of(partial(_read_all, other, job_id))
        assert failure.code == grpc.StatusCode.PERMISSION_DENIED
        assert "only its owner may attach" in failure.details
    assert "hctl cancel" in failure.details
    assert worker.terminal_events == []


def test_a_job_that_is_not_interactive_has_no_terminal(cluster: Cluster) -> None:
    """A batch job is refused with the command that reads its output."""
    master = cluster.master()
    cluster.worker(master, "n1")
    api = cluster.api(master, "alice", admin=False)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job
    failure = error_of(lambda: list(_attach(api, Keyboard(job.id))))
    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION
    assert f"hctl logs {job.id}" in failure.details


def test_a_caller_that_goes_away_hangs_up_the_session(cluster: Cluster) -> None:
    """When the client's call ends before the command has exited, the master cancels its
    call to the worker, which hangs the terminal up."""
    api, worker, job_id = _session(cluster)
    keyboard = Keyboard(job_id)
    call = _attach(api, keyboard)
    keyboard.type(b"x")
    next(call)
    call.cancel()
    wait_for(lambda: worker.terminal_events[-1:] == ["hung up"], timeout=10, what="the hang-up")


def test_the_stream_cap_holds_for_terminals_and_others_are_served(cluster: Cluster) -> None:
    """A terminal is a stream: past the user's cap the next is refused at once, naming the
    cap, while another user's calls are served; an idle terminal holds up nobody else."""
    api, _, job_id = _session(cluster, max_streams_per_user=1)
    keyboard = Keyboard(job_id)
    held = _attach(api, keyboard)
    keyboard.type(b"x")
    next(held)  # attached, and now idle
    failure = error_of(lambda: list(_attach(api, Keyboard(job_id))))
    assert failure.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_streams_per_user" in failure.details
    bob = cluster.api(cluster.masters[0], "bob", admin=False)
    assert bob.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job.id == job_id
    keyboard.type(b"exit 0")
    assert next(held).exited


def test_a_gone_worker_gives_a_clear_error_not_a_hang(cluster: Cluster) -> None:
    """A session whose worker no longer answers ends the call with UNAVAILABLE naming the
    node, within the master's worker call timeout."""
    api, worker, job_id = _session(cluster)
    worker.close()
    failure = error_of(lambda: list(_attach(api, Keyboard(job_id))))
    assert failure.code == grpc.StatusCode.UNAVAILABLE
    assert f"the terminal of job {job_id} on n1" in failure.details


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"workload": "resnet"}, "runs a command"),
        ({"preemptible": True}, "never preempted"),
        ({"array": "0-3"}, "cannot be an array"),
        ({"max_retries": 2}, "never retried"),
        ({"output": "out-%j.txt"}, "no output files"),
    ],
)
def test_an_interactive_spec_that_cannot_be_one_is_refused(
    cluster: Cluster, changes: dict[str, Any], words: str
) -> None:
    """A session is one command on one terminal: a program, preemption, an array, retries
    or output files are refused on `spec.interactive`, saying why."""
    master = cluster.master()
    api = cluster.api(master, "alice", admin=False)
    base: dict[str, Any] = {"workload": "", "iterations": 0, "command": ["bash"]}
    if "workload" in changes:
        base = {}
    failure = error_of(
        lambda: api.SubmitJob(
            hadar_pb2.SubmitJobRequest(spec=spec(interactive=True, **base, **changes))
        )
    )
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.trailing.get("x-hadar-field") == "spec.interactive"
    assert words in failure.details


def test_an_interactive_job_is_stored_as_one_and_never_preemptible(cluster: Cluster) -> None:
    """The spec reads back interactive, and not preemptible (so rounds pin it)."""
    master = cluster.master()
    api = cluster.api(master, "alice", admin=False)
    job = api.SubmitJob(
        hadar_pb2.SubmitJobRequest(
            spec=spec(workload="", iterations=0, command=["bash"], interactive=True)
        )
    ).job
    read = api.GetJob(hadar_pb2.GetJobRequest(job_id=job.id)).job
    assert read.spec.interactive
    assert read.spec.HasField("preemptible") is False or read.spec.preemptible is False


def test_a_worker_that_vanishes_mid_session_ends_the_call_not_hangs_it(
    cluster: Cluster,
) -> None:
    """Once the store has the session's task ended while its worker's stream stays silent
    (the worker vanished without a word), the call ends with UNAVAILABLE saying so, within
    seconds."""
    api, worker, job_id = _session(cluster)
    keyboard = Keyboard(job_id)
    call = _attach(api, keyboard)
    keyboard.type(b"x")
    next(call)
    worker.exit(job_id, common_pb2.EXIT_KIND_FAILED, exit_code=1)
    failure = error_of(lambda: list(call))
    assert failure.code == grpc.StatusCode.UNAVAILABLE
    assert "no longer answers" in failure.details
    wait_for(lambda: worker.terminal_events[-1:] == ["hung up"], timeout=10, what="the hang-up")
