"""A real built-in workload (`python -m worker.workloads resnet`, PyTorch on the CPU) run by
the real agent: a lease with a budget ends LEASE_DONE after a checkpoint, and the next lease
resumes from it and completes the job."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from protos.hadar.v1 import common_pb2, worker_pb2
from tests.integration.worker.fake_master import FakeMaster, eventually, worker_stub
from worker.agent.agent import WorkerAgent, settings_for_test
from worker.gpus import FakeGpuProvider


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    fake = FakeMaster().start()
    yield fake
    fake.stop()


def test_resnet_lease_then_resume_to_completion(master: FakeMaster, tmp_path: Path) -> None:
    """Lease 1 runs 4 of 6 iterations and checkpoints (LEASE_DONE, 4); lease 2 resumes from
    the checkpoint and finishes (COMPLETED, 6), with progress relayed in between."""
    agent = WorkerAgent(
        settings_for_test(master.address, tmp_path / "state"),
        # A V100 at full host speed: no pacing, the test only waits for real compute.
        FakeGpuProvider.from_spec("v100:1", reference_speed=1.0),
        workloads=["resnet"],
    )
    agent.start()
    try:
        stub = worker_stub(agent.address)
        spec = common_pb2.JobSpec(name="resnet", num_gpus=1, iterations=6, batch_size=8)
        spec.workload.name = "resnet"

        def start(lease: int, budget: int, done: int) -> None:
            request = worker_pb2.ApplyAssignmentsRequest(
                round=lease,
                assignments=[
                    worker_pb2.TaskAssignment(
                        job_id=50,
                        lease=lease,
                        action=worker_pb2.ASSIGNMENT_ACTION_START,
                        spec=spec,
                        gpu_indices=[0],
                        gpu_type="v100",
                        iteration_budget=budget,
                        iterations_done=done,
                        checkpoint_dir=str(tmp_path / "checkpoints"),
                        user=pwd.getpwuid(os.geteuid()).pw_name,
                    )
                ],
            )
            (result,) = stub.ApplyAssignments(request, timeout=10).results
            assert result.outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED, result.message

        start(lease=1, budget=4, done=0)
        eventually(lambda: master.exits_for(50), timeout_s=60)
        first = master.exits_for(50)[0]
        assert first.kind == common_pb2.EXIT_KIND_LEASE_DONE, first.message
        assert first.iterations_done == 4

        start(lease=2, budget=0, done=4)
        eventually(lambda: len(master.exits_for(50)) == 2, timeout_s=60)
        second = master.exits_for(50)[1]
        assert second.kind == common_pb2.EXIT_KIND_COMPLETED, second.message
        assert second.iterations_done == 6
        leases = {p.lease for p in master.progress_for(50)}
        assert leases <= {1, 2} and leases
    finally:
        agent.stop(grace_s=5.0)
