"""Worker-side master fencing: an order from a master older than one the worker has already
obeyed is refused with FAILED_PRECONDITION and changes nothing, also after the worker's
restart (the highest epoch seen is kept on disk)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos.hadar.v1 import worker_pb2
from tests.integration.worker.fake_master import FakeMaster, eventually
from tests.integration.worker.test_agent import assignment, make_agent, stub_for
from worker.agent.fence import EPOCH_FILE, EpochFence, FencedError


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    fake = FakeMaster().start()
    yield fake
    fake.stop()


def test_the_fence_admits_the_same_or_newer_epochs_and_keeps_the_highest_on_disk(
    tmp_path: Path,
) -> None:
    """Equal and newer epochs pass (a newer one is written to disk first); an older one
    raises FencedError naming both epochs; a new fence on the same directory remembers."""
    fence = EpochFence(tmp_path)
    with fence.admit(0):
        pass
    with fence.admit(3):
        pass
    assert (tmp_path / "agent" / EPOCH_FILE).read_text() == '{"epoch": 3}'
    with fence.admit(3):
        pass
    ran = []
    with pytest.raises(FencedError, match=r"epoch 2.*follows epoch 3"), fence.admit(2):
        ran.append(True)
    assert ran == []
    assert EpochFence(tmp_path).highest == 3
    with pytest.raises(FencedError), EpochFence(tmp_path).admit(0):
        pass


def test_an_older_masters_orders_are_refused_and_change_nothing_even_after_a_restart(
    master: FakeMaster, tmp_path: Path
) -> None:
    """After an order of epoch 5, a START and a StopTask of epoch 4 are answered
    FAILED_PRECONDITION ("fenced: ...") and start or stop nothing; a restarted worker on the
    same state directory still refuses epoch 4 and still obeys epoch 5."""
    agent = make_agent(master.address, tmp_path / "state")
    agent.start()
    stub = stub_for(agent)
    response = stub.ApplyAssignments(
        worker_pb2.ApplyAssignmentsRequest(
            round=1, assignments=[assignment(31, 1, iterations=100_000)], master_epoch=5
        ),
        timeout=5,
    )
    assert response.results[0].outcome == worker_pb2.ASSIGNMENT_OUTCOME_APPLIED
    eventually(lambda: master.progress_for(31))

    with pytest.raises(grpc.RpcError) as refused:
        stub.ApplyAssignments(
            worker_pb2.ApplyAssignmentsRequest(
                round=2, assignments=[assignment(32, 1, gpus=(1,))], master_epoch=4
            ),
            timeout=5,
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = refused.value.details() or ""
    assert details.startswith("fenced:")
    assert "epoch 4" in details and "epoch 5" in details
    with pytest.raises(grpc.RpcError) as stop_refused:
        stub.StopTask(
            worker_pb2.StopTaskRequest(job_id=31, checkpoint=True, master_epoch=4), timeout=5
        )
    assert stop_refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert [(t.job_id, t.lease) for t in agent.supervisor.snapshot()] == [(31, 1)]
    assert master.exits_for(31) == []

    agent.stop(stop_tasks=False)
    again = make_agent(master.address, tmp_path / "state")
    again.start()
    try:
        stub = stub_for(again)
        with pytest.raises(grpc.RpcError) as after_restart:
            stub.StopTask(
                worker_pb2.StopTaskRequest(job_id=31, checkpoint=True, master_epoch=4), timeout=5
            )
        assert after_restart.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert [(t.job_id, t.lease) for t in again.supervisor.snapshot()] == [(31, 1)]
        stopped = stub.StopTask(
            worker_pb2.StopTaskRequest(job_id=31, checkpoint=True, master_epoch=5), timeout=5
        )
        assert stopped.was_running
        eventually(lambda: master.exits_for(31), timeout_s=20)
    finally:
        again.stop(grace_s=1.0)


def test_an_unreadable_epoch_file_is_moved_aside_with_a_warning(tmp_path: Path) -> None:
    """A corrupt master-epoch.json does not stop the worker: it is kept aside as .corrupt,
    a warning names it, and the fence starts again from the next order's epoch."""
    path = tmp_path / "agent" / EPOCH_FILE
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    fence = EpochFence(tmp_path)
    assert fence.highest == 0
    assert len(fence.warnings) == 1 and EPOCH_FILE in fence.warnings[0]
    assert (tmp_path / "agent" / f"{EPOCH_FILE}.corrupt").read_text() == "{not json"
    with fence.admit(4):
        pass
    assert EpochFence(tmp_path).highest == 4
