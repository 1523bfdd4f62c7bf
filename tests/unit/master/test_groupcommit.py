"""The group committer: what arrives during a commit goes into the next one, in arrival
order; each caller gets its own outcome."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from master.process.groupcommit import GroupCommitter


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class Recorder:
    """A commit function that records its groups; the first group waits for `release`."""

    def __init__(self, fail_item: int | None = None) -> None:
        self.groups: list[list[int]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.fail_item = fail_item

    def __call__(self, items: Sequence[int]) -> list[int | Exception]:
        self.groups.append(list(items))
        if len(self.groups) == 1:
            self.entered.set()
            assert self.release.wait(10)
        return [ValueError(f"bad {i}") if i == self.fail_item else i * 10 for i in items]


def queued(committer: GroupCommitter[int, int], count: int) -> Callable[[], bool]:
    return lambda: committer.queued == count


def start(committer: GroupCommitter[int, int], item: int, results: dict[int, object]) -> None:
    def call() -> None:
        try:
            results[item] = committer.run(item)
        except Exception as exc:
            results[item] = exc

    threading.Thread(target=call, daemon=True).start()


def test_items_that_arrive_during_a_commit_share_the_next_one_in_arrival_order() -> None:
    """While the first commit is under way, five more callers queue; they are committed
    together in one group, in the order they arrived, and each gets its own result."""
    recorder = Recorder()
    committer: GroupCommitter[int, int] = GroupCommitter(recorder)
    results: dict[int, object] = {}
    start(committer, 0, results)
    assert recorder.entered.wait(10)
    for item in range(1, 6):
        start(committer, item, results)
        wait_until(queued(committer, item), f"item {item} to queue")
    recorder.release.set()
    wait_until(lambda: len(results) == 6, "every caller to be answered")
    assert recorder.groups == [[0], [1, 2, 3, 4, 5]]
    assert results == {i: i * 10 for i in range(6)}
    stats = committer.stats
    assert (stats.groups, stats.items, stats.largest) == (2, 6, 5)


def test_a_long_queue_is_committed_in_groups_of_at_most_max_group() -> None:
    """Five items queued behind a commit, with groups of at most two: they are committed
    two, two and one, in arrival order."""
    recorder = Recorder()
    committer: GroupCommitter[int, int] = GroupCommitter(recorder, max_group=2)
    results: dict[int, object] = {}
    start(committer, 0, results)
    assert recorder.entered.wait(10)
    for item in range(1, 6):
        start(committer, item, results)
        wait_until(queued(committer, item), f"item {item} to queue")
    recorder.release.set()
    wait_until(lambda: len(results) == 6, "every caller to be answered")
    assert recorder.groups == [[0], [1, 2], [3, 4], [5]]
    assert results == {i: i * 10 for i in range(6)}


def test_one_refused_item_fails_only_its_own_caller() -> None:
    """An item whose outcome is an exception raises it to its caller; the others of its
    group get their results."""
    recorder = Recorder(fail_item=3)
    committer: GroupCommitter[int, int] = GroupCommitter(recorder)
    results: dict[int, object] = {}
    start(committer, 0, results)
    assert recorder.entered.wait(10)
    for item in range(1, 5):
        start(committer, item, results)
        wait_until(queued(committer, item), f"item {item} to queue")
    recorder.release.set()
    wait_until(lambda: len(results) == 5, "every caller to be answered")
    assert isinstance(results.pop(3), ValueError)
    assert results == {0: 0, 1: 10, 2: 20, 4: 40}


def test_a_failed_commit_fails_its_group_and_the_next_group_commits() -> None:
    """An exception from the commit itself goes to every caller of that group; callers
    after it are committed as usual."""
    calls: list[list[int]] = []

    def commit(items: Sequence[int]) -> list[int | Exception]:
        calls.append(list(items))
        if len(calls) == 1:
            raise RuntimeError("database gone")
        return list(items)

    committer: GroupCommitter[int, int] = GroupCommitter(commit)
    with pytest.raises(RuntimeError, match="database gone"):
        committer.run(1)
    assert committer.run(2) == 2


def test_many_concurrent_callers_each_get_their_own_result() -> None:
    """Sixteen threads submitting 50 items each all get their own results, and every item
    is committed exactly once."""
    committed: list[int] = []

    def commit(items: Sequence[int]) -> list[int | Exception]:
        committed.extend(items)
        time.sleep(0.001)
        return [i + 1 for i in items]

    committer: GroupCommitter[int, int] = GroupCommitter(commit)
    wrong: list[int] = []

    def caller(base: int) -> None:
        for item in range(base, base + 50):
            if committer.run(item) != item + 1:
                wrong.append(item)

    threads = [threading.Thread(target=caller, args=(n * 1000,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not wrong
    assert sorted(committed) == sorted(n * 1000 + i for n in range(16) for i in range(50))
    assert committer.stats.items == 800
