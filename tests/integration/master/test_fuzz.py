"""Malformed and extreme requests against a real master: SubmitJob and every worker call.

Every request is answered, or refused with a specific status (INVALID_ARGUMENT naming its
field in the message and the x-hadar-field trailer); never INTERNAL or UNKNOWN. A refused
submission and a refused worker call store nothing (no row of nodes, GPUs, jobs, tasks,
events or throughputs changes), and the master stays healthy throughout. One master serves the
whole module to keep the run short.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from master.daemon import Master
from master.jobs.manager import Caller
from master.service.status import FIELD_METADATA_KEY
from protos.hadar.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, hadar_pb2
from store import UnitOfWork
from store.testing import backends, temporary_database_url
from tests.integration.master.conftest import CLUSTER_TOKEN, make_settings
from tests.integration.master.fakes import FakeWorker, wait_for
from tests.integration.master.protostrategies import around, of
from tests.integration.rpcs import Metadata, bearer, call, code_of

HADAR = hadar_pb2.DESCRIPTOR.services_by_name["Hadar"]
COORDINATOR = coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"]
EXAMPLES = int(os.environ.get("HADAR_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
Code = grpc.StatusCode
# What a worker call may change in the store.
WORKER_TABLES = ("nodes", "gpus", "jobs", "tasks", "job_events", "throughputs")
BACKGROUND_COLUMNS = frozenset({("nodes", "last_heartbeat"), ("gpus", "utilization")})
# A request is served, names its bad field, or is too large for gRPC to take at all.
ALLOWED = frozenset({Code.OK, Code.INVALID_ARGUMENT, Code.RESOURCE_EXHAUSTED})
# Reads and admin calls may also name something that does not exist or is in the wrong
# state; a watch may still be waiting when its short deadline passes, and logs relayed from
# a worker may find it unreachable.
QUERY_ALLOWED = ALLOWED | {
    Code.NOT_FOUND,
    Code.FAILED_PRECONDITION,
    Code.DEADLINE_EXCEEDED,
    Code.UNAVAILABLE,
}


@dataclass
class Target:
    master: Master
    channel: grpc.Channel
    user: Metadata
    worker: FakeWorker

    def call(
        self,
        service: Any,
        method: str,
        request: Message,
        metadata: Metadata,
        allowed: frozenset[Code] = ALLOWED,
        timeout: float = 30.0,
    ) -> Code:
        """Send `request` (reading a streamed answer up to its first message); check the
        status is allowed and that an INVALID_ARGUMENT names its field. Returns the status."""
        outcome = call(self.channel, service.methods_by_name[method], request, metadata, timeout)
        code, details = outcome.code, outcome.details
        assert code in allowed, f"{method}: {code.name} {details!r} for {_brief(request)}"
        if code is Code.INVALID_ARGUMENT:
            field = dict(outcome.trailing).get(FIELD_METADATA_KEY, "")
            assert field, f"{method}: no field named for {details!r}"
            assert details.startswith(f"{field}: "), (field, details)
        return code

    def job_count(self) -> int:
        return self.master.tx.read(lambda uow: sum(uow.jobs.count_by_state().values()))

    def rows(self) -> dict[str, list[str]]:
        """Every row of the tables a worker call may write, to compare before and after,
        less the liveness the master writes for every node on its own schedule (heartbeat
        times and GPU utilization, in batches between calls)."""
        with self.master.database.engine.connect() as connection:
            return {
                table: sorted(
                    repr(
                        tuple(
                            value
                            for column, value in row._mapping.items()
                            if (table, column) not in BACKGROUND_COLUMNS
                        )
                    )
                    for row in connection.execute(text(f"SELECT * FROM {table}")).all()
                )
                for table in WORKER_TABLES
            }


def _brief(request: Message) -> str:
    text = str(request)
    return text if len(text) < 600 else text[:600] + "..."


@pytest.fixture(scope="module", params=backends())
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    tmp_path: Path = tmp_path_factory.mktemp("fuzz")
    with temporary_database_url(request.param, tmp_path) as url:
        master = Master(make_settings(url, tmp_path))
        master.start()
        worker = FakeWorker("n1", master.address, CLUSTER_TOKEN, num_gpus=8)
        channel = grpc.insecure_channel(master.address)
        try:
            worker.register()
            user = bearer(master.create_token("fuzzer", admin=False))
            yield Target(master, channel, user, worker)
            assert_healthy(master, channel, user)
        finally:
            channel.close()
            worker.close()
            master.stop(grace=0.5)


def assert_healthy(master: Master, channel: grpc.Channel, user: Metadata) -> None:
    """The master still serves: health says SERVING and a plain call answers."""
    health = health_pb2_grpc.HealthStub(channel)
    answer = health.Check(health_pb2.HealthCheckRequest(service=HADAR.full_name), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    who = HADAR.methods_by_name["WhoAmI"]
    assert code_of(channel, who, hadar_pb2.WhoAmIRequest(), user) is Code.OK


def valid_spec() -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="ok", num_gpus=1, iterations=100, workload=common_pb2.WorkloadProgram(name="resnet")
    )


submissions = st.one_of(
    of(hadar_pb2.SubmitJobRequest),
    around(hadar_pb2.SubmitJobRequest(spec=valid_spec())),
    around(valid_spec()).map(lambda spec: hadar_pb2.SubmitJobRequest(spec=spec)),
    around(
        common_pb2.JobSpec(
            name="cmd", num_gpus=2, iterations=5, command=common_pb2.CommandProgram(argv=["x"])
        )
    ).map(lambda spec: hadar_pb2.SubmitJobRequest(spec=spec)),
)


def found_submissions() -> list[hadar_pb2.SubmitJobRequest]:
    """Requests that once crashed the master, always sent first."""
    out = []
    for change in (
        {"iterations": 2**64 - 1},
        {"gpu_memory_bytes": 2**63},
        {"batch_size": 2**32 - 1},
        {"job_type": "a\0b"},
    ):
        spec = valid_spec()
        for key, value in change.items():
            setattr(spec, key, value)
        out.append(hadar_pb2.SubmitJobRequest(spec=spec))
    with_env = valid_spec()
    with_env.env["¡\n"] = ""
    out.append(hadar_pb2.SubmitJobRequest(spec=with_env))
    out.append(hadar_pb2.SubmitJobRequest(spec=valid_spec(), idempotency_key="\0"))
    return out


def test_submit_job_survives_malformed_specs(target: Target) -> None:
    """Fuzzed submissions are accepted or refused with a named field (or, for an
    idempotency key already used with another spec, as ALREADY_EXISTS); a refused one
    stores nothing, an accepted one exactly one job (none for a repeated idempotency key);
    a scheduling round over everything accepted completes."""
    seen: dict[str, int] = {}

    @FUZZ
    @given(request=submissions)
    def submit(request: hadar_pb2.SubmitJobRequest) -> None:
        before = target.job_count()
        # A key the fuzzer already used with another spec is refused as such.
        allowed = ALLOWED | {Code.ALREADY_EXISTS} if request.idempotency_key else ALLOWED
        code = target.call(HADAR, "SubmitJob", request, target.user, allowed)
        seen[code.name] = seen.get(code.name, 0) + 1
        added = target.job_count() - before
        if code is not Code.OK:
            assert added == 0, f"a refused submission stored {added} job(s)"
        elif request.idempotency_key:
            assert added in (0, 1)
        else:
            assert added == 1

    for request in found_submissions():
        assert target.call(HADAR, "SubmitJob", request, target.user) is Code.INVALID_ARGUMENT
    submit()
    # The fuzzer reached past validation, not only into it.
    assert seen.get("OK", 0) > 0 and seen.get("INVALID_ARGUMENT", 0) > 0, seen
    result = target.master.run_round()
    assert result.started, "the round placed none of the accepted jobs"
    assert_healthy(target.master, target.channel, target.user)


@dataclass(frozen=True)
class RealTask:
    node: str
    job_id: int
    task_index: int
    lease: int


def a_running_task(target: Target) -> RealTask:
    """A task the master placed on n1, so fuzzed worker calls can name real ids: n1 registers
    afresh (earlier fuzzing may have reported odd GPUs for it), earlier jobs are cancelled
    to free its GPUs, and one plain job is placed there."""
    master = target.master
    target.worker.register()
    root = Caller(user="root", admin=True)
    for job in master.tx.read(lambda uow: uow.jobs.list_unfinished()):
        master.jobs.cancel(root, job.id, "making room")
    job, _ = master.jobs.submit(root, valid_spec())

    def placed() -> RealTask | None:
        master.run_round()

        def read(uow: UnitOfWork) -> RealTask | None:
            for task in uow.tasks.active_for_job(job.id):
                return RealTask(task.node, task.job_id, task.task_index, task.lease)
            return None

        return master.tx.read(read)

    found: RealTask = wait_for(placed, what="the job's task")
    return found


def worker_requests(real: RealTask) -> dict[str, st.SearchStrategy[Message]]:
    """Per Coordinator method: random requests, and ones built on real names and ids."""
    job_id, task_index, lease = real.job_id, real.task_index, real.lease
    gpu = common_pb2.Gpu(index=0, type="v100", health=common_pb2.GPU_HEALTH_HEALTHY)
    task = common_pb2.WorkerTask(
        job_id=job_id, task_index=task_index, lease=lease, state=common_pb2.TASK_STATE_RUNNING
    )
    return {
        "RegisterWorker": st.one_of(
            of(coordinator_pb2.RegisterWorkerRequest),
            around(
                coordinator_pb2.RegisterWorkerRequest(
                    node="fuzz-node", address="127.0.0.1:1", gpus=[gpu], tasks=[task]
                )
            ),
        ),
        "Heartbeat": st.one_of(
            of(coordinator_pb2.HeartbeatRequest),
            around(coordinator_pb2.HeartbeatRequest(node=real.node, tasks=[task], gpus=[gpu])),
        ),
        "ReportProgress": st.one_of(
            of(coordinator_pb2.ReportProgressRequest),
            around(
                coordinator_pb2.ReportProgressRequest(
                    node=real.node,
                    reports=[
                        coordinator_pb2.ProgressReport(
                            job_id=job_id,
                            task_index=task_index,
                            lease=lease,
                            iterations_done=1,
                            iterations_per_s=1.0,
                            gpu_type="v100",
                        )
                    ],
                )
            ),
        ),
        "TaskExited": st.one_of(
            of(coordinator_pb2.TaskExitedRequest),
            around(
                coordinator_pb2.TaskExitedRequest(
                    node=real.node,
                    job_id=job_id,
                    task_index=task_index,
                    lease=lease,
                    kind=common_pb2.EXIT_KIND_STOPPED,
                )
            ),
        ),
        "ReportProfile": st.one_of(
            of(coordinator_pb2.ReportProfileRequest),
            around(
                coordinator_pb2.ReportProfileRequest(
                    node=real.node,
                    entries=[
                        coordinator_pb2.ProfileEntry(
                            workload="resnet", gpu_type="v100", num_gpus=1, iterations_per_s=5.0
                        )
                    ],
                )
            ),
        ),
    }


def found_worker_requests(real: RealTask) -> dict[str, list[Message]]:
    """Worker requests that once crashed the master, always sent first."""
    huge = 2**64 - 1
    gpu = common_pb2.Gpu(index=0, type="v100")
    return {
        "RegisterWorker": [
            coordinator_pb2.RegisterWorkerRequest(
                node="x", address="h:1", gpus=[gpu], tasks=[common_pb2.WorkerTask(lease=huge)]
            ),
            coordinator_pb2.RegisterWorkerRequest(
                node="x", address="h:1", gpus=[common_pb2.Gpu(index=2**32 - 1, type="v100")]
            ),
            coordinator_pb2.RegisterWorkerRequest(
                node="x", address="h:1", gpus=[gpu], agent_version="\0"
            ),
        ],
        "Heartbeat": [
            coordinator_pb2.HeartbeatRequest(
                node=real.node, tasks=[common_pb2.WorkerTask(job_id=huge)]
            ),
            coordinator_pb2.HeartbeatRequest(
                node=real.node, gpus=[common_pb2.Gpu(index=0, type="v" * 65)]
            ),
        ],
        "ReportProgress": [
            coordinator_pb2.ReportProgressRequest(
                node=real.node,
                reports=[coordinator_pb2.ProgressReport(job_id=real.job_id, lease=huge)],
            ),
            coordinator_pb2.ReportProgressRequest(
                node=real.node,
                reports=[coordinator_pb2.ProgressReport(task_index=2**32 - 1)],
            ),
        ],
        "TaskExited": [
            coordinator_pb2.TaskExitedRequest(
                node=real.node, job_id=huge, kind=common_pb2.EXIT_KIND_FAILED
            ),
        ],
        "ReportProfile": [
            coordinator_pb2.ReportProfileRequest(
                entries=[
                    coordinator_pb2.ProfileEntry(
                        workload="resnet", gpu_type="v100", num_gpus=2**32 - 1, iterations_per_s=1
                    )
                ]
            ),
        ],
    }


def test_every_worker_call_is_covered() -> None:
    """A new Coordinator RPC fails here until the fuzzer below sends it requests too."""
    real = RealTask("n", 1, 0, 1)
    assert set(worker_requests(real)) == {m.name for m in COORDINATOR.methods}
    assert set(found_worker_requests(real)) == {m.name for m in COORDINATOR.methods}


@pytest.mark.parametrize("method", [m.name for m in COORDINATOR.methods])
def test_worker_calls_survive_malformed_requests(target: Target, method: str) -> None:
    """Fuzzed worker calls are answered or refused with a named field, never a crash; a
    refused call changes no row."""
    real = a_running_task(target)
    strategy = worker_requests(real)[method]
    seen: dict[str, int] = {}

    @FUZZ
    @given(request=strategy)
    def send(request: Message) -> None:
        before = target.rows()
        code = target.call(COORDINATOR, method, request, bearer(CLUSTER_TOKEN))
        seen[code.name] = seen.get(code.name, 0) + 1
        if code is not Code.OK:
            assert target.rows() == before, f"a refused {method} changed the store"

    for request in found_worker_requests(real)[method]:
        before = target.rows()
        code = target.call(COORDINATOR, method, request, bearer(CLUSTER_TOKEN))
        assert code is Code.INVALID_ARGUMENT, (method, request)
        assert target.rows() == before, f"a refused {method} changed the store"
    send()
    assert seen.get("OK", 0) > 0, seen
    assert_healthy(target.master, target.channel, target.user)
    # The worker that was there all along can still talk to the master.
    stub = coordinator_pb2_grpc.CoordinatorStub(target.channel)  # type: ignore[no-untyped-call]
    call: Callable[..., Any] = stub.Heartbeat
    call(coordinator_pb2.HeartbeatRequest(node="n1"), metadata=bearer(CLUSTER_TOKEN), timeout=10)


def found_queries() -> list[tuple[str, Message, Code]]:
    """Hadar requests that once crashed the master, always sent first, with the code each
    must get (a job id past what the store holds names no job: NOT_FOUND)."""
    huge = 2**64 - 1
    bad = Code.INVALID_ARGUMENT
    return [
        ("GetJob", hadar_pb2.GetJobRequest(job_id=huge), Code.NOT_FOUND),
        ("CancelJob", hadar_pb2.CancelJobRequest(job_id=huge), Code.NOT_FOUND),
        ("StreamLogs", hadar_pb2.StreamLogsRequest(job_id=huge), Code.NOT_FOUND),
        (
            "WatchJobs",
            hadar_pb2.WatchJobsRequest(job_ids=[huge], include_initial=True),
            Code.NOT_FOUND,
        ),
        ("ListJobs", hadar_pb2.ListJobsRequest(page_token="9" * 30), bad),
        ("ListJobs", hadar_pb2.ListJobsRequest(page_token="\u00b2"), bad),
        ("ListJobs", hadar_pb2.ListJobsRequest(user="a\0"), bad),
        ("DrainNode", hadar_pb2.DrainNodeRequest(node="a\0"), bad),
        ("CreateToken", hadar_pb2.CreateTokenRequest(user="b", description="\0"), bad),
        ("CreateToken", hadar_pb2.CreateTokenRequest(user="b\0"), bad),
        ("ListTokens", hadar_pb2.ListTokensRequest(user="\0"), bad),
        ("RevokeToken", hadar_pb2.RevokeTokenRequest(id="\0"), bad),
        ("GetUsage", hadar_pb2.GetUsageRequest(user="a\0"), bad),
        ("GetUsage", hadar_pb2.GetUsageRequest(by=99), bad),  # type: ignore[arg-type]
        ("GetUsage", hadar_pb2.GetUsageRequest(since=Timestamp(seconds=2**62)), bad),
        ("ListJobHistory", hadar_pb2.ListJobHistoryRequest(page_token="9" * 30), bad),
        ("ListJobHistory", hadar_pb2.ListJobHistoryRequest(states=[99]), bad),  # type: ignore[list-item]
        ("SetNotifyDefault", hadar_pb2.SetNotifyDefaultRequest(url="http://[::1"), bad),
        ("SetNotifyDefault", hadar_pb2.SetNotifyDefaultRequest(url="http://h:99999/"), bad),
        ("SetNotifyDefault", hadar_pb2.SetNotifyDefaultRequest(url="http://h\0/"), bad),
        ("SetNotifyDefault", hadar_pb2.SetNotifyDefaultRequest(url="http://h/", on=[99]), bad),  # type: ignore[list-item]
        ("GetNotifyDefault", hadar_pb2.GetNotifyDefaultRequest(user="a\0"), bad),
    ]


OTHER_HADAR = [m.name for m in HADAR.methods if m.name != "SubmitJob"]
# A terminal is its owner's alone: an admin's attach to another's session is refused.
OWNER_ONLY = frozenset({"AttachJob"})


@pytest.mark.parametrize("method", OTHER_HADAR)
def test_other_user_calls_survive_malformed_requests(target: Target, method: str) -> None:
    """Every other Hadar call, fuzzed with an admin's token (so every check past the
    credentials runs), is answered or refused with a specific status, never a crash."""
    admin = bearer(target.master.create_token("root", admin=True))
    descriptor = HADAR.methods_by_name[method]
    # A watch with nothing to report waits out its deadline: fewer, shorter calls.
    streaming = descriptor.server_streaming
    timeout = 0.5 if streaming else 30.0
    allowed = QUERY_ALLOWED | ({Code.PERMISSION_DENIED} if method in OWNER_ONLY else set())
    for name, request, expected in found_queries():
        if name == method:
            assert target.call(HADAR, name, request, admin, allowed) is expected, request

    @settings(FUZZ, max_examples=max(10, EXAMPLES // (8 if streaming else 3)))
    @given(request=of(GetMessageClass(descriptor.input_type)))
    def send(request: Message) -> None:
        target.call(HADAR, method, request, admin, allowed, timeout)

    send()
    assert_healthy(target.master, target.channel, target.user)
