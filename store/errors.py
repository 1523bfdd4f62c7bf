"""Domain errors raised by the store. Callers map them to their own protocol (gRPC codes)."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class NotFoundError(StoreError):
    """The requested row does not exist."""

    def __init__(self, kind: str, key: object) -> None:
        super().__init__(f"{kind} {key} not found")
        self.kind = kind
        self.key = key


class AlreadyExistsError(StoreError):
    """A row with the same unique key exists."""


class ConflictError(StoreError):
    """Another unit of work changed the row first (optimistic locking); reload and retry."""


class InvalidTransitionError(StoreError):
    """A job state change that the job life does not allow."""

    def __init__(self, job_id: int, from_state: str, to_state: str) -> None:
        super().__init__(f"job {job_id}: cannot go from {from_state} to {to_state}")
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state


class InvalidTaskTransitionError(StoreError):
    """A task state change that the task life does not allow (store/states.py)."""

    def __init__(self, task_id: int, job_id: int, from_state: str, to_state: str) -> None:
        super().__init__(
            f"task {task_id} of job {job_id}: cannot go from {from_state} to {to_state}"
        )
        self.task_id = task_id
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state
