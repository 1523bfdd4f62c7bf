"""hctl's arrays and dependencies against a real master with fake-GPU workers: folding in
the queue, element ids in show/cancel/wait, and the refusals people see."""

from __future__ import annotations

import json

from clients.cli import shapes
from clients.cli.command import ExitCode
from tests.integration.cli.conftest import Cluster, Hctl
from tests.integration.cli.test_hctl import submit


def ids(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]


def test_an_array_in_queue_show_cancel_and_wait(hctl: Hctl, cluster: Cluster) -> None:
    """`--array 0-5%2`: the queue shows the two running elements and folds the pending
    ones into `A_[2-5%2]` (-r lists each); `show A_3` names the element and why it waits;
    `cancel A_3` cancels that element alone, `cancel A` the rest; `wait A` waits for all
    and exits as cancelled."""
    array = submit(hctl, "--array", "0-5%2", "--name", "sweep", "--iterations", "1", "--", "true")
    cluster.round()
    queue = hctl("queue")
    assert ids(queue.out) == [f"{array}_0", f"{array}_1", f"{array}_[2-5%2]"], queue.out
    assert f"waiting: array {array} at its limit of 2 running" in queue.out
    expanded = hctl("queue", "-r")
    assert ids(expanded.out) == [f"{array}_{i}" for i in range(6)], expanded.out
    document = json.loads(hctl("queue", "--json").out)
    assert shapes.check(document, shapes.OUTPUTS["queue"]) == []
    assert [j["spec"]["array_index"] for j in document["jobs"]] == list(range(6))
    assert {j["spec"]["array_job_id"] for j in document["jobs"]} == {array}

    shown = hctl("show", f"{array}_3")
    assert shown.code == 0, shown.err
    assert f"({array}_3)" in shown.out and f"array {array} at its limit of 2" in shown.out

    one = hctl("cancel", f"{array}_3")
    assert one.code == 0 and f"cancelled array element {array}_3" in one.out, one.out
    assert ids(hctl("queue", "-r").out) == [f"{array}_{i}" for i in (0, 1, 2, 4, 5)]
    missing = hctl("cancel", f"{array}_9")
    assert missing.code == ExitCode.NOT_FOUND and f"{array}_9" in missing.err, missing.err

    whole = hctl("cancel", str(array))
    assert whole.code == 0, whole.err
    assert f"cancelled array job {array} (sweep): 5 of 6 elements (1 had already ended)" in (
        whole.out
    )
    assert hctl("queue").out.strip() == "" or ids(hctl("queue").out) == []
    waited = hctl("wait", str(array), "--timeout", "20")
    assert waited.code == ExitCode.JOB_CANCELLED, (waited.code, waited.out, waited.err)
    assert "6 elements ended: 6 cancelled" in waited.out


def test_submit_json_lists_an_arrays_elements(hctl: Hctl) -> None:
    result = hctl("submit", "--json", "--array", "1,3,5", "--iterations", "1", "--", "true")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert shapes.check(document, shapes.OUTPUTS["submit"]) == []
    assert [e["spec"]["array_index"] for e in document["elements"]] == [1, 3, 5]
    assert document["elements"][0]["id"] == document["job"]["id"]


def test_dependencies_on_the_command_line(hctl: Hctl, cluster: Cluster) -> None:
    """--after-ok shows `waiting for job N` in the queue and a `depends on` line in show;
    an unknown id is refused naming it; bad --array and --dependency values are usage
    errors before anything is sent; an array above max_array_size is refused by the
    master."""
    first = submit(hctl, "--iterations", "1", "--name", "prep", "--", "sleep", "60")
    second = submit(
        hctl, "--iterations", "1", "--name", "train", "-d", f"afterok:{first}", "--", "true"
    )
    cluster.round()
    queue = hctl("queue")
    assert f"waiting for job {first} (afterok)" in queue.out, queue.out
    assert f"afterok:{first}" in hctl("show", str(second)).out

    unknown = hctl("submit", "--after-any", "4242", "--iterations", "1", "--", "true")
    assert unknown.code == ExitCode.INVALID_ARGUMENT and "4242" in unknown.err, unknown.err
    bad_array = hctl("submit", "--array", "5-1", "--iterations", "1", "--", "true")
    assert bad_array.code == ExitCode.USAGE and "ends before it starts" in bad_array.err
    bad_dep = hctl("submit", "-d", "after:3", "--iterations", "1", "--", "true")
    assert bad_dep.code == ExitCode.USAGE and "not a dependency" in bad_dep.err
    huge = hctl("submit", "--array", "0-1000", "--iterations", "1", "--", "true")
    assert huge.code == ExitCode.INVALID_ARGUMENT and "max_array_size" in huge.err, huge.err
    bad_ref = hctl("show", "12_x")
    assert bad_ref.code == ExitCode.USAGE and "not a job id" in bad_ref.err
