"""Mutual TLS both ways between a real master and a real worker agent (fake GPUs), with
certificates made at test time: the worker joins over TLS with its client certificate, the
master pushes assignments and stops to the worker's TLS port with its own, and callers
without a certificate, or without TLS at all, are turned away."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from clients import HadarClient, JobSpec, Program, Unavailable
from clients.config import resolve
from master.daemon import Master
from master.settings import Settings
from protos.hadar.v1 import coordinator_pb2, coordinator_pb2_grpc, worker_pb2, worker_pb2_grpc
from store.states import TaskState
from tests.integration.certificates import Pem, issue, make_ca
from tests.integration.worker.fake_master import eventually
from worker.agent.agent import WorkerAgent, settings_for_test
from worker.agent.users import FakeUsers
from worker.gpus import FakeGpuProvider

CLUSTER_TOKEN = "tls-cluster-token"


@dataclass
class Pki:
    ca: Pem
    master: Pem
    worker: Pem
    master_client: Pem
    worker_client: Pem
    user: Pem
    stranger: Pem  # signed by another CA


@dataclass
class TlsCluster:
    pki: Pki
    master: Master
    agent: WorkerAgent
    directory: Path

    def client(self, *, cert: Pem | None, timeout_s: float = 10.0) -> HadarClient:
        """A client over TLS trusting the CA, with `cert` as its client certificate."""
        token = self.master.create_token("tess")
        lines = [
            f'master = "{self.master.address}"',
            f'ca_file = "{self.pki.ca.cert}"',
            f'token = "{token}"',
        ]
        if cert is not None:
            lines += [f'cert_file = "{cert.cert}"', f'key_file = "{cert.key}"']
        config = self.directory / f"client-{len(list(self.directory.glob('client-*')))}.toml"
        config.write_text("\n".join(lines) + "\n")
        env = {"HADAR_CONFIG": str(config), "HOME": str(self.directory)}
        return HadarClient(config=resolve(timeout_s=timeout_s, env=env))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = make_ca(directory)
    other = make_ca(directory, "other-ca")
    return Pki(
        ca=ca,
        master=issue(ca, directory, "master"),
        worker=issue(ca, directory, "worker"),
        master_client=issue(ca, directory, "master-client"),
        worker_client=issue(ca, directory, "worker-client"),
        user=issue(ca, directory, "user"),
        stranger=issue(other, directory, "stranger"),
    )


@pytest.fixture(scope="module")
def tls_cluster(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    directory = tmp_path_factory.mktemp("tls-cluster")
    master = Master(
        Settings(
            listen="127.0.0.1:0",
            database=f"sqlite:///{directory / 'hadar.db'}",
            policy="fifo",
            round_seconds=3600,
            early_rounds=False,
            cluster_token=CLUSTER_TOKEN,
            cluster_token_file=str(directory / "cluster-token"),
            checkpoint_dir=str(directory / "checkpoints"),
            metrics_port=-1,
            grace_s=1.0,
            dispatch_timeout_s=5.0,
            tls_cert=str(pki.master.cert),
            tls_key=str(pki.master.key),
            tls_client_ca=str(pki.ca.cert),
            worker_ca_file=str(pki.ca.cert),
            worker_client_cert=str(pki.master_client.cert),
            worker_client_key=str(pki.master_client.key),
        )
    )
    master.start()
    settings = settings_for_test(
        master.address,
        directory / "worker-state",
        fake_gpus="v100:2",
        token=CLUSTER_TOKEN,
        master_ca_file=pki.ca.cert,
        master_client_cert=pki.worker_client.cert,
        master_client_key=pki.worker_client.key,
        tls_cert=pki.worker.cert,
        tls_key=pki.worker.key,
        tls_client_ca=pki.ca.cert,
    )
    # Not root, so jobs run as the agent's own user, whoever runs the tests.
    agent = WorkerAgent(
        settings, FakeGpuProvider.from_spec("v100:2"), users=FakeUsers(root=False), workloads=[]
    )
    agent.start()
    try:
        yield TlsCluster(pki, master, agent, directory)
    finally:
        agent.stop(grace_s=1.0)
        master.stop(grace=1.0)


def test_a_worker_joins_over_tls_and_the_master_pushes_to_it_over_tls(
    tls_cluster: TlsCluster,
) -> None:
    """The worker registers through the master's mutual-TLS port; a submitted job's START
    reaches the worker's mutual-TLS port and its process runs; a cancellation's stop
    reaches it too."""
    agent, master = tls_cluster.agent, tls_cluster.master
    assert agent.wait_registered(timeout_s=15), agent.status()
    with tls_cluster.client(cert=tls_cluster.pki.user) as hadar:
        assert [n.name for n in hadar.list_nodes()] == ["test-node"]
        job = hadar.submit_job(
            JobSpec(
                "sleeper",
                Program.command([sys.executable, "-c", "import time; time.sleep(60)"]),
                iterations=1,
                preemptible=False,
            )
        )
        result = master.run_round()
        assert result.started == (job.id,) and result.dispatch_failures == 0, result
        assert any(key[0] == job.id for key in agent.supervisor.running_keys())

        def task_states() -> list[TaskState]:
            return master.tx.read(lambda uow: [t.state for t in uow.tasks.active_for_job(job.id)])

        assert task_states() == [TaskState.STARTING]

        hadar.cancel_job(job.id)
        eventually(lambda: not agent.supervisor.running_keys(), timeout_s=15)


def test_callers_without_a_client_certificate_are_refused(tls_cluster: TlsCluster) -> None:
    """Both ports require a client certificate from the CA: none, or one from another CA,
    and the TLS handshake fails (UNAVAILABLE) before any call is made."""
    with tls_cluster.client(cert=None, timeout_s=2) as hadar, pytest.raises(Unavailable):
        hadar.whoami()
    with (
        tls_cluster.client(cert=tls_cluster.pki.stranger, timeout_s=2) as hadar,
        pytest.raises(Unavailable),
    ):
        hadar.whoami()
    with tls_cluster.client(cert=tls_cluster.pki.user) as hadar:
        assert hadar.whoami().user == "tess"

    roots = tls_cluster.pki.ca.cert.read_bytes()
    with grpc.secure_channel(
        tls_cluster.agent.address, grpc.ssl_channel_credentials(roots)
    ) as channel:
        stub = worker_pb2_grpc.WorkerStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetWorkerStatus(
                worker_pb2.GetWorkerStatusRequest(),
                metadata=(("authorization", f"Bearer {CLUSTER_TOKEN}"),),
                timeout=2,
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_callers_of_tls_ports_fail_with_unavailable(tls_cluster: TlsCluster) -> None:
    """A plaintext channel to the master's or the worker's TLS port: UNAVAILABLE."""
    token = (("authorization", f"Bearer {CLUSTER_TOKEN}"),)
    with grpc.insecure_channel(tls_cluster.master.address) as channel:
        coordinator = coordinator_pb2_grpc.CoordinatorStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as refused:
            coordinator.Heartbeat(
                coordinator_pb2.HeartbeatRequest(node="test-node"), metadata=token, timeout=2
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(tls_cluster.agent.address) as channel:
        worker = worker_pb2_grpc.WorkerStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as refused:
            worker.GetWorkerStatus(worker_pb2.GetWorkerStatusRequest(), metadata=token, timeout=2)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
