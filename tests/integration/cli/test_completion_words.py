"""`hctl __complete KIND`: the words shell completion asks the master for."""

from __future__ import annotations

from tests.integration.cli.conftest import Cluster, Hctl


def test_complete_prints_your_active_jobs_and_the_clusters_nodes_and_types(
    hctl: Hctl, cluster: Cluster
) -> None:
    """Your pending and running jobs (not others', not ended ones; `recent-jobs` adds your
    ended ones), the nodes, their GPU types and the workloads they run, one word a line."""
    mine = [
        int(hctl("submit", "--parsable", "--workload", "resnet", "--iterations", "9").out)
        for _ in range(2)
    ]
    hctl("submit", "--parsable", "--workload", "resnet", "--iterations", "9", user="bob")
    assert hctl("cancel", str(mine[1])).code == 0

    assert hctl("__complete", "jobs").out.split() == [str(mine[0])]
    # For requeue, logs and show: the ended one too, after the active ones.
    assert hctl("__complete", "recent-jobs").out.split() == [str(mine[0]), str(mine[1])]
    assert hctl("__complete", "nodes").out.split() == ["gpu-a", "gpu-b"]
    assert hctl("__complete", "gpu-types").out.split() == ["k80", "v100"]
    assert "resnet" in hctl("__complete", "workloads").out.split()


def test_complete_against_a_master_that_is_not_there_prints_nothing(hctl: Hctl) -> None:
    """A TAB with no master: no words, no error on the user's command line, exit 0."""
    result = hctl("--master", "127.0.0.1:1", "--timeout", "1", "__complete", "nodes")
    assert (result.code, result.out, result.err) == (0, "", "")
