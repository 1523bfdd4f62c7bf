"""HadarClient.iter_jobs asks for each next page as the previous one arrives (the master
reads it while the client converts), yields every job in order, raises a later page's
failure as the client's exception after the jobs before it, and stops cleanly when the
caller stops early."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from typing import Any, cast

import grpc
import pytest

from clients import HadarClient, PermissionDenied
from clients.types import Job
from protos.hadar.v1 import common_pb2, hadar_pb2
from tests.unit.clients.test_errors import FailedCall


class PagedStub:
    """ListJobs over `pages` pages of `size` jobs; page `failing` (if any) is refused."""

    def __init__(self, pages: int, size: int, failing: int | None = None) -> None:
        self.pages, self.size, self.failing = pages, size, failing
        self.asked: list[int] = []

    def ListJobs(self, request: Any, timeout: float, metadata: Any) -> Any:
        page = int(request.page_token or 0)
        self.asked.append(page)
        if page == self.failing:
            raise FailedCall(grpc.StatusCode.PERMISSION_DENIED, "token revoked")
        first = page * self.size + 1
        jobs = [common_pb2.Job(id=i, user="alice") for i in range(first, first + self.size)]
        following = str(page + 1) if page + 1 < self.pages else ""
        return hadar_pb2.ListJobsResponse(jobs=jobs, next_page_token=following)


def client_with(stub: PagedStub) -> HadarClient:
    client = HadarClient("127.0.0.1:1", token="t", timeout=5)
    client._stub = stub
    return client


def test_every_page_is_read_in_order_and_each_next_one_asked_for_before_converting() -> None:
    stub = PagedStub(pages=4, size=3)
    client = client_with(stub)
    jobs = client.iter_jobs(page_size=3)
    assert next(jobs).id == 1
    # Holding page 0's first job, the caller has not asked for more: page 1 is asked for
    # all the same.
    deadline = time.monotonic() + 10
    while 1 not in stub.asked:
        assert time.monotonic() < deadline, "page 1 was not asked for ahead"
        time.sleep(0.01)
    assert [job.id for job in jobs] == list(range(2, 13))
    assert stub.asked == [0, 1, 2, 3]
    client.close()


def test_a_later_pages_refusal_arrives_after_the_jobs_before_it() -> None:
    client = client_with(PagedStub(pages=3, size=2, failing=2))
    seen = []
    with pytest.raises(PermissionDenied, match="token revoked"):
        for job in client.iter_jobs(page_size=2):
            seen.append(job.id)
    assert seen == [1, 2, 3, 4]
    client.close()


def test_stopping_early_leaves_no_page_pending() -> None:
    stub = PagedStub(pages=50, size=2)
    client = client_with(stub)
    # A generator: a caller that stops early (break, an exception) closes it.
    jobs = cast("Generator[Job, None, None]", client.iter_jobs(page_size=2))
    assert next(jobs).id == 1
    jobs.close()
    # At most the page after the first was asked for; nothing runs on.
    assert stub.asked == [0, 1]
    assert not [t for t in threading.enumerate() if t.name.startswith("hadar-pages")]
    client.close()
