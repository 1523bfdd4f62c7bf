"""Job arrays on the command line: element ids (`12_3`), resolving them, and squeue's
folding of an array's pending elements into one line (`12_[4-31%4]`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clients.types import Job, JobState
from protos.arrays import JobRef, fold_indices, parse_job_ref

if TYPE_CHECKING:
    from clients.client import HadarClient


def job_ref(text: str) -> JobRef:
    """argparse type for a job as people name it: `12` or an array element `12_3`."""
    try:
        return parse_job_ref(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def display_id(job: Job) -> str:
    """`12_3` for element 3 of array 12, else the job's id."""
    spec = job.spec
    if spec.array_job_id and spec.array_index is not None:
        return f"{spec.array_job_id}_{spec.array_index}"
    return str(job.id)


def is_array(job: Job) -> bool:
    """Whether the job's id is an array's id (it is the array's first element)."""
    return job.spec.array_job_id == job.id


def resolve(client: HadarClient, ref: JobRef) -> Job:
    """The job a reference names: `12_3` is looked up among array 12's elements; `12` is
    job 12 (for an array, its first element). Raises the client's NotFound."""
    if ref.array_index is None:
        return client.get_job(ref.job_id)
    return client.find_element(ref.job_id, ref.array_index)


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One line of `hctl queue`: a job, or an array's pending elements folded together
    (`first` stands for them; `folded_id` is what the ID column shows)."""

    first: Job
    folded_id: str = ""
    count: int = 1

    @property
    def shown_id(self) -> str:
        return self.folded_id or display_id(self.first)


def queue_rows(jobs: Sequence[Job], *, expand: bool) -> list[QueueRow]:
    """Jobs as queue lines: without `expand`, each array's PENDING elements fold into one
    line at the place of the first (as squeue shows them); running and ended elements keep
    a line each."""
    if expand:
        return [QueueRow(job) for job in jobs]
    pending: dict[int, list[Job]] = {}
    for job in jobs:
        if job.spec.array_job_id and job.state is JobState.PENDING:
            pending.setdefault(job.spec.array_job_id, []).append(job)
    rows: list[QueueRow] = []
    for job in jobs:
        group = pending.get(job.spec.array_job_id) if job.spec.array_job_id else None
        if group is None or job.state is not JobState.PENDING or len(group) == 1:
            rows.append(QueueRow(job))
            continue
        if group[0] is not job:
            continue
        indices = fold_indices(j.spec.array_index or 0 for j in group)
        cap = _cap(job.spec.array)
        folded = f"{job.spec.array_job_id}_[{indices}{f'%{cap}' if cap else ''}]"
        rows.append(QueueRow(job, folded, len(group)))
    return rows


def _cap(array: str) -> str:
    return array.split("%", 1)[1] if "%" in array else ""
