"""A round renews only the leases that need it: a real master and in-process fake workers,
rounds run by hand at chosen times.

- A round soon after another leaves the leases its workers acknowledged alone; once the
  renewal age has passed, a round renews them all.
- A worker that gets a push in the round anyway (a start) gets its renewals with it.
- A renewal its worker did not answer is sent again by the next round.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from master.daemon import Master
from protos.hadar.v1 import common_pb2, hadar_pb2, worker_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for


def _job(api: Api, name: str) -> int:
    spec = common_pb2.JobSpec(
        name=name, num_gpus=1, iterations=10_000, workload=common_pb2.WorkloadProgram(name="resnet")
    )
    job_id: int = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job.id
    return job_id


def _round(master: Master, at: datetime) -> int:
    return master.rounds.run(at).number


def _sent(worker: FakeWorker, number: int, action: int) -> set[int]:
    """Jobs `worker` was sent `action` for by round `number`."""
    return {a.job_id for a in worker.applied if a.round == number and a.action == action}


def _running(worker: FakeWorker) -> set[int]:
    return worker.running_jobs()


def test_a_round_renews_only_the_leases_that_need_it(cluster: Cluster) -> None:
    master = cluster.master(round_seconds=60, dispatch_timeout_s=0.5, dispatch_attempts=1)
    age = master.settings.lease_renewal_age_s
    assert age == 30.0
    workers = [cluster.worker(master, name, num_gpus=2) for name in ("n1", "n2")]
    api = cluster.api(master)
    first = [_job(api, f"job-{i}") for i in range(2)]
    t0 = datetime.now(UTC)
    _round(master, t0)
    wait_for(
        lambda: set().union(*map(_running, workers)) == set(first), what="the first jobs to start"
    )

    extend = worker_pb2.ASSIGNMENT_ACTION_EXTEND
    start = worker_pb2.ASSIGNMENT_ACTION_START
    # Tasks the book does not know yet (just started) are renewed.
    number = _round(master, t0 + timedelta(seconds=1))
    for worker in workers:
        assert _sent(worker, number, extend) == _running(worker), worker.name

    # Soon after: every lease was acknowledged, nothing is renewed.
    number = _round(master, t0 + timedelta(seconds=2))
    for worker in workers:
        assert _sent(worker, number, extend) == set(), worker.name

    # A start goes to one worker, which gets its renewals with it; the other gets nothing.
    added = _job(api, "job-added")
    number = _round(master, t0 + timedelta(seconds=3))
    (target,) = [w for w in workers if _sent(w, number, start)]
    assert _sent(target, number, start) == {added}
    assert _sent(target, number, extend) == _running(target) - {added}
    (other,) = [w for w in workers if w is not target]
    assert other.applied and _sent(other, number, extend) == set()
    wait_for(lambda: added in _running(target), what="the added job to start")

    # Past the renewal age every lease is renewed (the added job's too: its start's lease
    # was not booked).
    number = _round(master, t0 + timedelta(seconds=3 + age))
    for worker in workers:
        assert _sent(worker, number, extend) == _running(worker), worker.name

    # A renewal that did not reach its worker is sent again by the next round, while the
    # one acknowledged just before is not.
    frozen = other
    frozen.freeze()
    late = t0 + timedelta(seconds=4 + 2 * age)
    number = _round(master, late)
    assert _sent(target, number, extend) == _running(target)
    frozen.thaw()
    # The frozen worker applies the timed-out push once thawed; the master counted it lost.
    wait_for(lambda: _sent(frozen, number, extend), what="the late push to arrive")
    number = _round(master, late + timedelta(seconds=1))
    assert _sent(frozen, number, extend) == _running(frozen)
    assert _sent(target, number, extend) == set()
