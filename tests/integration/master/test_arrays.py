"""Job arrays and dependencies through a real master, its database (SQLite and PostgreSQL)
and fake workers: submission, the running cap, cancelling an element or a whole array,
dependencies satisfied, broken and unknown, and both surviving a master restart."""

from __future__ import annotations

from functools import partial

import grpc

from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.integration.master.conftest import Api, Cluster
from tests.integration.master.fakes import wait_for
from tests.integration.master.test_api import error_of


def command(name: str = "sweep", **fields: object) -> common_pb2.JobSpec:
    spec = common_pb2.JobSpec(
        name=name,
        num_gpus=1,
        iterations=1,
        command=common_pb2.CommandProgram(argv=["bash", "run.sh"]),
        output="out-%j.txt",
    )
    for key, value in fields.items():
        if isinstance(value, list):
            getattr(spec, key).extend(value)
        else:
            setattr(spec, key, value)
    return spec


def submit(api: Api, spec: common_pb2.JobSpec) -> common_pb2.Job:
    job: common_pb2.Job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=spec)).job
    return job


def elements(api: Api, array_id: int) -> list[common_pb2.Job]:
    jobs = api.ListJobs(hadar_pb2.ListJobsRequest(array_job_id=array_id, page_size=1000)).jobs
    return sorted(jobs, key=lambda j: j.spec.array_index)


def get(api: Api, job_id: int) -> common_pb2.Job:
    job: common_pb2.Job = api.GetJob(hadar_pb2.GetJobRequest(job_id=job_id)).job
    return job


def running(api: Api, array_id: int) -> list[int]:
    return [
        e.spec.array_index
        for e in elements(api, array_id)
        if e.state == common_pb2.JOB_STATE_RUNNING
    ]


def test_an_array_is_one_job_per_index_with_its_index_in_env_and_output(
    cluster: Cluster,
) -> None:
    """`0-15:4,20` makes five jobs; the first's id is the array's; each element has its
    own id, HADAR_ARRAY_INDEX/HADAR_ARRAY_JOB_ID/HADAR_ARRAY_TASK_COUNT, and %A/%a replaced
    in its output file (the worker's %j is kept)."""
    master = cluster.master()
    api = cluster.api(master)
    first = submit(api, command(array="0-15:4,20", output="o-%A_%a-%j-%%a"))
    found = elements(api, first.id)
    assert [e.spec.array_index for e in found] == [0, 4, 8, 12, 20]
    assert len({e.id for e in found}) == 5 and found[0].id == first.id
    for element in found:
        assert element.spec.array_job_id == first.id
        assert element.spec.array == "0,4,8,12,20"
        assert element.spec.env["HADAR_ARRAY_INDEX"] == str(element.spec.array_index)
        assert element.spec.env["HADAR_ARRAY_JOB_ID"] == str(first.id)
        assert element.spec.env["HADAR_ARRAY_TASK_COUNT"] == "5"
        assert element.spec.output == f"o-{first.id}_{element.spec.array_index}-%j-%%a"
        assert element.state == common_pb2.JOB_STATE_PENDING


def test_malformed_and_oversized_arrays_are_refused_and_store_nothing(cluster: Cluster) -> None:
    """A bad spec or one above max_array_size is INVALID_ARGUMENT on spec.array; %a in a
    plain job's output is refused; nothing is stored."""
    master = cluster.master(max_array_size=10)
    api = cluster.api(master)
    for bad in ("3-1", "1-x", "0-5%0", "%4", "0-10"):
        failure = error_of(partial(submit, api, command(array=bad)))
        assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, bad
        assert failure.details.startswith("spec.array:"), failure.details
    assert "max_array_size" in error_of(lambda: submit(api, command(array="0-10"))).details
    plain = error_of(lambda: submit(api, command(output="x-%a")))
    assert plain.code == grpc.StatusCode.INVALID_ARGUMENT and "no array" in plain.details
    assert list(api.ListJobs(hadar_pb2.ListJobsRequest()).jobs) == []


def test_the_cap_keeps_at_most_n_elements_running_and_says_why_the_rest_wait(
    cluster: Cluster,
) -> None:
    """With %2 on a cluster with room for all, each round runs at most two elements; the
    others wait with the array's reason; as elements end, the next ones start, lowest
    index first."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=8)
    api = cluster.api(master)
    first = submit(api, command(array="0-5%2"))
    master.run_round()
    assert running(api, first.id) == [0, 1]
    waiting = [e for e in elements(api, first.id) if e.state == common_pb2.JOB_STATE_PENDING]
    assert {e.reason for e in waiting} == {f"waiting: array {first.id} at its limit of 2 running"}
    # Another round changes nothing while both run.
    master.run_round()
    assert running(api, first.id) == [0, 1]
    ids = {e.spec.array_index: e.id for e in elements(api, first.id)}
    wait_for(lambda: ids[0] in worker.running_jobs(), what="element 0 on the worker")
    worker.exit(ids[0], common_pb2.EXIT_KIND_COMPLETED)
    master.run_round()
    assert running(api, first.id) == [1, 2]
    # A plain job beside the array is not held back by it.
    other = submit(api, command(name="other"))
    master.run_round()
    assert get(api, other.id).state == common_pb2.JOB_STATE_RUNNING
    assert len(running(api, first.id)) == 2


def test_cancel_one_element_or_the_whole_array(cluster: Cluster) -> None:
    """CancelJob on an element's id cancels that element alone; with whole_array on the
    array's id every unfinished element is cancelled (running ones are stopped) and ended
    ones keep their state."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=8)
    api = cluster.api(master)
    first = submit(api, command(array="0-3"))
    ids = [e.id for e in elements(api, first.id)]
    master.run_round()
    wait_for(lambda: set(ids) <= worker.running_jobs(), what="all four on the worker")
    worker.exit(ids[3], common_pb2.EXIT_KIND_COMPLETED)
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=ids[1]))
    states = [e.state for e in elements(api, first.id)]
    assert states == [
        common_pb2.JOB_STATE_RUNNING,
        common_pb2.JOB_STATE_CANCELLED,
        common_pb2.JOB_STATE_RUNNING,
        common_pb2.JOB_STATE_COMPLETED,
    ]
    # The array's id alone (without whole_array) is its first element only.
    api.CancelJob(hadar_pb2.CancelJobRequest(job_id=first.id, whole_array=True, reason="sweep"))
    states = [e.state for e in elements(api, first.id)]
    assert states == [
        common_pb2.JOB_STATE_CANCELLED,
        common_pb2.JOB_STATE_CANCELLED,
        common_pb2.JOB_STATE_CANCELLED,
        common_pb2.JOB_STATE_COMPLETED,
    ]
    assert get(api, ids[2]).reason.endswith(": sweep")
    wait_for(
        lambda: {s.job_id for s in worker.stops} >= {ids[0], ids[1], ids[2]},
        what="stop orders for the running elements",
    )


def test_a_dependent_waits_then_starts_once_its_dependency_completed(cluster: Cluster) -> None:
    """after_ok: the dependent is not offered to the policy while the dependency runs
    (reason `waiting for job N`), and starts in the round after it completed."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=8)
    api = cluster.api(master)
    first = submit(api, command(name="prep"))
    second = submit(api, command(name="train", after_ok=[first.id]))
    assert list(second.spec.after_ok) == [first.id]
    master.run_round()
    assert get(api, first.id).state == common_pb2.JOB_STATE_RUNNING
    waiting = get(api, second.id)
    assert waiting.state == common_pb2.JOB_STATE_PENDING
    assert waiting.reason == f"waiting for job {first.id} (afterok)"
    wait_for(lambda: first.id in worker.running_jobs(), what="the dependency on the worker")
    worker.exit(first.id, common_pb2.EXIT_KIND_COMPLETED)
    master.run_round()
    assert get(api, second.id).state == common_pb2.JOB_STATE_RUNNING


def test_a_dependent_whose_dependency_failed_is_cancelled_naming_it(cluster: Cluster) -> None:
    """after_ok on a job that FAILED: the dependent is CANCELLED with the dependency and
    its end state in the reason, and so is a job depending on that dependent; after_fail
    on the same failed job runs; after_any runs too."""
    master = cluster.master(max_retries=0)
    worker = cluster.worker(master, "n1", num_gpus=8)
    api = cluster.api(master)
    first = submit(api, command(name="prep"))
    ok = submit(api, command(name="ok", after_ok=[first.id]))
    chained = submit(api, command(name="chained", after_ok=[ok.id]))
    on_fail = submit(api, command(name="cleanup", after_fail=[first.id]))
    on_any = submit(api, command(name="report", after_any=[first.id]))
    master.run_round()
    wait_for(lambda: first.id in worker.running_jobs(), what="the dependency on the worker")
    worker.exit(first.id, common_pb2.EXIT_KIND_FAILED, exit_code=1)
    assert get(api, first.id).state == common_pb2.JOB_STATE_FAILED
    master.run_round()
    cancelled = get(api, ok.id)
    assert cancelled.state == common_pb2.JOB_STATE_CANCELLED
    assert cancelled.reason == (
        f"dependency afterok:{first.id} can never be satisfied: job {first.id} ended FAILED"
    )
    assert get(api, chained.id).state == common_pb2.JOB_STATE_CANCELLED
    assert f"job {ok.id} ended CANCELLED" in get(api, chained.id).reason
    assert get(api, on_fail.id).state == common_pb2.JOB_STATE_RUNNING
    assert get(api, on_any.id).state == common_pb2.JOB_STATE_RUNNING


def test_after_fail_on_a_completed_job_is_cancelled(cluster: Cluster) -> None:
    """after_fail can no longer be satisfied once the job COMPLETED."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=8)
    api = cluster.api(master)
    first = submit(api, command(name="prep"))
    on_fail = submit(api, command(name="cleanup", after_fail=[first.id]))
    master.run_round()
    wait_for(lambda: first.id in worker.running_jobs(), what="the dependency on the worker")
    worker.exit(first.id, common_pb2.EXIT_KIND_COMPLETED)
    master.run_round()
    got = get(api, on_fail.id)
    assert got.state == common_pb2.JOB_STATE_CANCELLED
    assert got.reason.endswith(f"job {first.id} ended COMPLETED")


def test_a_dependency_on_an_array_waits_for_all_its_elements(cluster: Cluster) -> None:
    """An array's id in after_ok stands for every element: the dependent starts only once
    the last one completed."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=8)
    api = cluster.api(master)
    first = submit(api, command(array="0-2"))
    ids = [e.id for e in elements(api, first.id)]
    merge = submit(api, command(name="merge", after_ok=[first.id]))
    master.run_round()
    wait_for(lambda: set(ids) <= worker.running_jobs(), what="the elements on the worker")
    for job_id in ids[:2]:
        worker.exit(job_id, common_pb2.EXIT_KIND_COMPLETED)
    master.run_round()
    assert get(api, merge.id).state == common_pb2.JOB_STATE_PENDING
    assert get(api, merge.id).reason == f"waiting for job {first.id} (afterok)"
    worker.exit(ids[2], common_pb2.EXIT_KIND_COMPLETED)
    master.run_round()
    assert get(api, merge.id).state == common_pb2.JOB_STATE_RUNNING


def test_unknown_dependencies_are_refused_naming_the_id(cluster: Cluster) -> None:
    """A dependency on a job that does not exist is INVALID_ARGUMENT on its field, naming
    the id; nothing is stored, so no job can wait on a job submitted later and no cycle can
    form."""
    master = cluster.master()
    api = cluster.api(master)
    known = submit(api, command())
    failure = error_of(lambda: submit(api, command(after_ok=[known.id], after_any=[4242])))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.details == (
        "spec.after_any: job 4242 does not exist (a job can only depend on jobs already submitted)"
    )
    assert [j.id for j in api.ListJobs(hadar_pb2.ListJobsRequest()).jobs] == [known.id]


def test_dependencies_and_caps_survive_a_master_restart(cluster: Cluster) -> None:
    """Dependencies and an array's cap are stored: a new master on the same database
    still holds the dependent and keeps the cap."""
    master = cluster.master()
    api = cluster.api(master)
    first = submit(api, command(name="prep"))
    array = submit(api, command(array="0-3%1", after_ok=[first.id]))
    master.stop(grace=0.5)
    cluster.masters.remove(master)

    again = cluster.master()
    worker = cluster.worker(again, "n1", num_gpus=8)
    api = cluster.api(again)
    again.run_round()
    assert get(api, first.id).state == common_pb2.JOB_STATE_RUNNING
    assert all(e.state == common_pb2.JOB_STATE_PENDING for e in elements(api, array.id))
    assert get(api, array.id).reason == f"waiting for job {first.id} (afterok)"
    wait_for(lambda: first.id in worker.running_jobs(), what="the dependency on the worker")
    worker.exit(first.id, common_pb2.EXIT_KIND_COMPLETED)
    again.run_round()
    assert running(api, array.id) == [0]
