"""Why each waiting job waits is what the last round decided, shown by GetJob and ListJobs
from the master's memory and not written to the store: a round over a queue whose head
moved (every job behind it now waits behind another) writes no job row. A reason the store
holds that is newer than the round's (a state change, a hold) is shown instead, and a
master that starts shows the stored reasons until its first round."""

from __future__ import annotations

from master.daemon import Master
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.test_planning_process import reasons, submit

SUBMITTED = "waiting for the next scheduling round"


def listed(api: Api) -> dict[int, str]:
    return {job.id: job.reason for job in api.ListJobs(hadar_pb2.ListJobsRequest()).jobs}


def stored(master: Master, job_ids: list[int]) -> dict[int, tuple[str, int]]:
    jobs = master.tx.read(lambda uow: uow.jobs.get_many(job_ids))
    return {job_id: (job.reason, job.version) for job_id, job in jobs.items()}


def test_waiting_reasons_are_shown_from_the_round_and_not_stored(cluster: Cluster) -> None:
    master = cluster.master(policy="fifo")
    cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    first = submit(api, 2)
    behind = [submit(api, 1) for _ in range(5)]
    result = master.run_round()
    assert result.started == (first,)
    shown = reasons(api, behind)
    # The first job behind waits for GPUs; the four behind it wait behind that one.
    assert shown[behind[0]].startswith("waiting: needs 1 GPUs of one type")
    assert {shown[j] for j in behind[1:]} == {f"waiting: queued behind job {behind[0]} (fifo)"}
    assert {j: listed(api)[j] for j in behind} == shown
    assert not reasons(api, [first])[first].startswith("waiting")
    # No row of a waiting job was written.
    assert stored(master, behind) == dict.fromkeys(behind, (SUBMITTED, 1))

    # A later round's reasons replace the earlier ones: the head moved.
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=behind[0], reason="not needed"))
    master.run_round()
    now = reasons(api, behind[1:])
    assert now[behind[1]].startswith("waiting: needs 1 GPUs of one type")
    assert {now[j] for j in behind[2:]} == {f"waiting: queued behind job {behind[1]} (fifo)"}
    # A state change since the round is newer than its reason.
    assert reasons(api, [behind[0]])[behind[0]] == "cancelled by alice: not needed"


def test_a_hold_since_the_round_shows_its_own_reason(cluster: Cluster) -> None:
    """A hold is stored after the round that gave the job its waiting reason; the hold's
    reason is what the job shows, before and after the next round."""
    master = cluster.master(policy="fifo")
    cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    first = submit(api, 1)
    second, third = submit(api, 1), submit(api, 1)
    master.run_round()
    assert reasons(api, [third])[third] == f"waiting: queued behind job {second} (fifo)"
    held = api.HoldJob(hadar_pb2.HoldJobRequest(job_id=third)).job
    assert held.reason == f"held by alice (hctl release {third} to let it run)"
    assert reasons(api, [third])[third] == held.reason
    master.run_round()
    assert reasons(api, [third])[third] == held.reason
    assert api.GetJob(hadar_pb2.GetJobRequest(job_id=first)).job.state == (
        common_pb2.JOB_STATE_RUNNING
    )


def test_a_master_that_starts_shows_the_stored_reasons_until_its_first_round(
    cluster: Cluster,
) -> None:
    master = cluster.master(policy="fifo")
    cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master)
    submit(api, 1)
    waiting = [submit(api, 1), submit(api, 1)]
    master.run_round()
    assert reasons(api, waiting)[waiting[1]] == f"waiting: queued behind job {waiting[0]} (fifo)"
    master.stop()
    again = cluster.master(policy="fifo")
    after = cluster.api(again)
    assert reasons(after, waiting) == dict.fromkeys(waiting, SUBMITTED)
    again.run_round()
    assert reasons(after, waiting)[waiting[1]] == f"waiting: queued behind job {waiting[0]} (fifo)"
