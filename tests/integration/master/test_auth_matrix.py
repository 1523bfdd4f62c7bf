"""Who may call what on the master, for every RPC of the Hadar and Coordinator services.

The methods come from the service descriptors, so a new RPC is swept as soon as it exists.
Requests are empty: the credentials are checked before anything reads the request.
"""

from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from master.daemon import Master
from master.jobs.manager import Caller
from master.service.access import AccessInterceptor, access_table, current_caller
from protos.hadar.v1 import common_pb2, coordinator_pb2, hadar_pb2
from tests.integration.master.conftest import CLUSTER_TOKEN, Cluster
from tests.integration.rpcs import Metadata, bearer, code_of, methods, path_of

HADAR = hadar_pb2.DESCRIPTOR.services_by_name["Hadar"]
COORDINATOR = coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"]
OK = grpc.StatusCode.OK
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
REFUSALS = {UNAUTHENTICATED, PERMISSION_DENIED}


def sweep(
    master: Master, service: object, metadata: Metadata, timeout: float = 10.0
) -> dict[str, grpc.StatusCode]:
    """The status of an empty request to every method of `service`, by method name."""
    with grpc.insecure_channel(master.address) as channel:
        return {
            m.name: code_of(channel, m, metadata=metadata, timeout=timeout)
            for m in methods(service)  # type: ignore[arg-type]
        }


def every(service: object, code: grpc.StatusCode) -> dict[str, grpc.StatusCode]:
    return {m.name: code for m in methods(service)}  # type: ignore[arg-type]


def test_the_services_have_methods_to_sweep() -> None:
    """Guards the sweeps below against passing vacuously."""
    assert {"SubmitJob", "CancelJob", "WatchJobs", "DrainNode"} <= {m.name for m in HADAR.methods}
    assert {"RegisterWorker", "Heartbeat"} <= {m.name for m in COORDINATOR.methods}
    assert any(m.server_streaming for m in HADAR.methods)


def test_no_token_is_unauthenticated_everywhere(cluster: Cluster) -> None:
    """Without credentials, or with malformed ones, every user and worker call is
    UNAUTHENTICATED."""
    master = cluster.master()
    for metadata in (
        (),
        (("authorization", "Bearer"),),
        (("authorization", "Bearer   "),),
        (("authorization", f"Basic {CLUSTER_TOKEN}"),),
        (("authorization", CLUSTER_TOKEN),),
    ):
        assert sweep(master, HADAR, metadata) == every(HADAR, UNAUTHENTICATED), metadata
        assert sweep(master, COORDINATOR, metadata) == every(COORDINATOR, UNAUTHENTICATED)


def test_unknown_and_revoked_tokens_are_unauthenticated_everywhere(cluster: Cluster) -> None:
    master = cluster.master()
    admin = cluster.api(master, "root", admin=True)
    token = master.create_token("carol")
    assert sweep(master, HADAR, bearer("not-a-token")) == every(HADAR, UNAUTHENTICATED)
    (issued,) = admin.ListTokens(hadar_pb2.ListTokensRequest(user="carol")).tokens
    admin.RevokeToken(hadar_pb2.RevokeTokenRequest(id=issued.id))
    assert sweep(master, HADAR, bearer(token)) == every(HADAR, UNAUTHENTICATED)
    assert sweep(master, COORDINATOR, bearer(token)) == every(COORDINATOR, UNAUTHENTICATED)


def test_api_tokens_are_not_worker_credentials(cluster: Cluster) -> None:
    """A user's or an admin's API token calls no Coordinator method: only the cluster token
    does, and anything else is UNAUTHENTICATED there."""
    master = cluster.master()
    for admin in (False, True):
        token = master.create_token("dave", admin=admin)
        assert sweep(master, COORDINATOR, bearer(token)) == every(COORDINATOR, UNAUTHENTICATED)


def test_the_cluster_token_is_not_an_api_token(cluster: Cluster) -> None:
    master = cluster.master()
    assert sweep(master, HADAR, bearer(CLUSTER_TOKEN)) == every(HADAR, PERMISSION_DENIED)


def test_right_credentials_pass_the_check(cluster: Cluster) -> None:
    """The sweeps above are not refusing everything: an admin's token gets past the check on
    every Hadar method and the cluster token on every Coordinator method (an empty request
    may still be invalid, or a watch still waiting for its first change)."""
    master = cluster.master()
    token = master.create_token("root", admin=True)
    for name, code in sweep(master, HADAR, bearer(token), timeout=1.0).items():
        assert code not in REFUSALS, (name, code)
    for name, code in sweep(master, COORDINATOR, bearer(CLUSTER_TOKEN)).items():
        assert code not in REFUSALS, (name, code)


def test_admin_calls_refuse_other_users(cluster: Cluster) -> None:
    """Draining, resuming, managing other people's tokens (or admin tokens) and their default
    webhooks are for admins:
    a user gets PERMISSION_DENIED and changes nothing; an admin passes the same requests."""
    master = cluster.master()
    cluster.worker(master, "n1")
    user = cluster.api(master, "erin", admin=False)
    admin = cluster.api(master, "root", admin=True)
    (roots,) = [
        t for t in admin.ListTokens(hadar_pb2.ListTokensRequest()).tokens if t.user == "root"
    ]

    def requests() -> dict[str, object]:
        return {
            "DrainNode": hadar_pb2.DrainNodeRequest(node="n1"),
            "ResumeNode": hadar_pb2.ResumeNodeRequest(node="n1"),
            "CreateToken(other user)": hadar_pb2.CreateTokenRequest(user="frank"),
            "CreateToken(admin)": hadar_pb2.CreateTokenRequest(admin=True),
            "ListTokens(other user)": hadar_pb2.ListTokensRequest(user="root"),
            "SetNotifyDefault(other user)": hadar_pb2.SetNotifyDefaultRequest(
                user="frank", url="https://hooks.example.org/frank"
            ),
            "GetNotifyDefault(other user)": hadar_pb2.GetNotifyDefaultRequest(user="frank"),
            "ClearNotifyDefault(other user)": hadar_pb2.ClearNotifyDefaultRequest(user="frank"),
            "RevokeToken(other user's)": hadar_pb2.RevokeTokenRequest(id=roots.id),
        }

    def codes(metadata: Metadata) -> dict[str, grpc.StatusCode]:
        out = {}
        with grpc.insecure_channel(master.address) as channel:
            for label, request in requests().items():
                method = HADAR.methods_by_name[label.split("(")[0]]
                out[label] = code_of(channel, method, request, metadata)  # type: ignore[arg-type]
        return out

    assert codes(user.metadata) == dict.fromkeys(requests(), PERMISSION_DENIED)
    (n1,) = admin.ListNodes(hadar_pb2.ListNodesRequest()).nodes
    assert n1.state == common_pb2.NODE_STATE_READY
    assert [t.user for t in admin.ListTokens(hadar_pb2.ListTokensRequest()).tokens] == [
        "erin",
        "root",
    ]
    # The admin revokes their own token last of all, so this sweep goes in order.
    assert codes(admin.metadata) == dict.fromkeys(requests(), OK)


def test_only_the_owner_or_an_admin_cancels_a_job(cluster: Cluster) -> None:
    master = cluster.master()
    alice = cluster.api(master, "alice", admin=False)
    bob = cluster.api(master, "bob", admin=False)
    admin = cluster.api(master, "root", admin=True)
    spec = common_pb2.JobSpec(
        name="x", num_gpus=1, iterations=1, workload=common_pb2.WorkloadProgram(name="resnet")
    )
    first = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job
    second = alice.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job
    with grpc.insecure_channel(master.address) as channel:
        refused = code_of(
            channel,
            HADAR.methods_by_name["CancelJob"],
            hadar_pb2.CancelJobRequest(job_id=first.id),
            bob.metadata,
        )
    assert refused == PERMISSION_DENIED
    assert alice.GetJob(hadar_pb2.GetJobRequest(job_id=first.id)).job.state == (
        common_pb2.JOB_STATE_PENDING
    )
    by_admin = admin.CancelJob(hadar_pb2.CancelJobRequest(job_id=first.id)).job
    assert by_admin.state == common_pb2.JOB_STATE_CANCELLED
    by_owner = alice.CancelJob(hadar_pb2.CancelJobRequest(job_id=second.id)).job
    assert by_owner.state == common_pb2.JOB_STATE_CANCELLED


def test_health_and_reflection_stay_open(cluster: Cluster) -> None:
    """Load balancers and grpcurl probe without credentials."""
    master = cluster.master()
    with grpc.insecure_channel(master.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service=HADAR.full_name), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        listed = {s.name for s in next(replies).list_services_response.service}
        assert {HADAR.full_name, COORDINATOR.full_name} <= listed


def test_a_method_without_an_access_rule_is_refused(cluster: Cluster) -> None:
    """A method the access table does not name is refused even to an admin, and its handler
    never runs; a named one reaches its handler with the authenticated caller."""
    master = cluster.master()
    token = master.create_token("root", admin=True)
    ran: list[Caller] = []

    def handler(request: bytes, context: grpc.ServicerContext) -> bytes:
        ran.append(current_caller())
        return request

    unnamed, named = f"/{HADAR.full_name}/NotInTheProto", path_of(HADAR.methods_by_name["WhoAmI"])
    behaviour = grpc.unary_unary_rpc_method_handler(handler)
    service = grpc.method_handlers_generic_handler(
        HADAR.full_name, {"NotInTheProto": behaviour, "WhoAmI": behaviour}
    )
    table = access_table()
    assert unnamed not in table and named in table
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2),
        interceptors=[AccessInterceptor(master.auth, master.metrics, table)],
    )
    server.add_generic_rpc_handlers((service,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                channel.unary_unary(unnamed, None, None)(b"", metadata=bearer(token), timeout=5)
                raise AssertionError("an unnamed method was served")
            except grpc.RpcError as exc:
                assert exc.code() == PERMISSION_DENIED
            assert ran == []
            channel.unary_unary(named, None, None)(b"", metadata=bearer(token), timeout=5)
    finally:
        server.stop(0)
    assert ran == [Caller(user="root", admin=True)]


def test_without_auth_everyone_is_an_admin(cluster: Cluster) -> None:
    """auth = "none" (local development): no credentials needed; the user comes from the
    x-hadar-user header and is an admin."""
    master = cluster.master(auth="none", cluster_token="")
    for name, code in sweep(master, HADAR, (), timeout=1.0).items():
        assert code not in REFUSALS, (name, code)
    for name, code in sweep(master, COORDINATOR, ()).items():
        assert code not in REFUSALS, (name, code)
    with grpc.insecure_channel(master.address) as channel:
        who = channel.unary_unary(
            path_of(HADAR.methods_by_name["WhoAmI"]),
            request_serializer=hadar_pb2.WhoAmIRequest.SerializeToString,
            response_deserializer=hadar_pb2.WhoAmIResponse.FromString,
        )(hadar_pb2.WhoAmIRequest(), metadata=(("x-hadar-user", "gina"),), timeout=5)
    assert (who.user, who.admin) == ("gina", True)
