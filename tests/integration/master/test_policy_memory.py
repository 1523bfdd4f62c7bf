"""What a policy learns in the daemon survives restarts: a-srpt learns from jobs that
complete (told once, by the next round), keeps its history in the store, and a restarted
master predicts as the one before it."""

from __future__ import annotations

from typing import Any

from master.daemon import Master
from master.rounds.snapshot import job_view
from master.scheduling.policies.a_srpt import ASrptPolicy
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import FakeWorker, wait_for

PARAMS = {"min_history": 3, "refit_every": 1}


def spec(iterations: int = 1000) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="train",
        num_gpus=1,
        iterations=iterations,
        workload=common_pb2.WorkloadProgram(name="resnet"),
    )


def predictor(master: Master) -> Any:
    policy = master.rounds.policy
    assert isinstance(policy, ASrptPolicy)
    return policy.predictor


def predicted(master: Master, job_id: int) -> float:
    """a-srpt's predicted total iterations for a stored job."""
    job = master.tx.read(lambda uow: uow.jobs.get(job_id))
    value: float = predictor(master).predict(job_view(job, None))
    return value


def run_to_completion_early(master: Master, worker: FakeWorker, api: Api, done: int) -> int:
    """A job submitted for 1,000 iterations whose program ends, successfully, at `done`."""
    job_id: int = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id
    assert job_id in master.run_round().started
    wait_for(lambda: job_id in worker.running_jobs(), what="START")
    worker.progress(job_id, done)
    assert worker.exit(job_id, common_pb2.EXIT_KIND_COMPLETED).accepted
    got = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    assert got.state == common_pb2.JOB_STATE_COMPLETED and got.iterations_done == done
    return job_id


def stored_history(master: Master) -> list[Any]:
    memory = master.tx.read(lambda uow: uow.memory.get("a-srpt"))
    assert memory is not None
    history: list[Any] = memory["history"]
    return history


def test_a_srpt_learns_from_completed_jobs_and_keeps_it_across_restarts(
    cluster: Cluster,
) -> None:
    """Alice's jobs, submitted for 1,000 iterations, end at 500. a-srpt's prediction for her
    next job starts at 1,000; each completion is told by the next round, once, and stored;
    a completion the master did not tell before it stopped is told by the next master's
    first round; after the third the prediction is about 500, and a master restarted on
    the same database predicts exactly the same from the stored history."""
    master = cluster.master(policy="a-srpt", policy_params=PARAMS)
    worker = cluster.worker(master, "n1", num_gpus=1)
    api = cluster.api(master, "alice", admin=False)
    first = run_to_completion_early(master, worker, api, 500)
    second = run_to_completion_early(master, worker, api, 500)
    probe = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id
    # The second completion is told by this round (the first one by the round that started
    # the second job).
    master.run_round()
    assert [c[5] for c in stored_history(master)] == [500.0, 500.0]
    assert master.tx.read(lambda uow: uow.memory.completions()) == []
    assert predicted(master, probe) == 1000.0  # fewer than min_history completions yet
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=probe))

    third = run_to_completion_early(master, worker, api, 500)
    # Stopped before any round told it: the notice waits in the store.
    master.stop(grace=0.5)
    pending = master.tx.read(lambda uow: uow.memory.completions())
    assert [job_id for job_id, _ in pending] == [third]
    assert first < second < third

    restarted = cluster.master(policy="a-srpt", policy_params=PARAMS)
    worker.connect(restarted.address)
    worker.register()
    assert len(predictor(restarted).history) == 2
    api = cluster.api(restarted, "alice", admin=False)
    probe = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec())).job.id
    restarted.run_round()
    assert len(stored_history(restarted)) == 3
    learned = predicted(restarted, probe)
    assert abs(learned - 500.0) < 50.0, learned
    # Rounds without completions learn nothing more.
    restarted.run_round()
    assert len(predictor(restarted).history) == 3
    restarted.stop(grace=0.5)

    again = cluster.master(policy="a-srpt", policy_params=PARAMS)
    assert len(predictor(again).history) == 3
    assert predicted(again, probe) == learned
