"""A count of committed changes to where tasks run, for caches of the active tasks.

A transaction that adds or removes a task, or changes its state, node or identity (job,
index, lease), moves the generation forward once it has ended. A reader that notes the
generation before it reads the tasks, and tags what it read with it, knows its copy is
current for as long as the generation has not moved: every change committed before the
note is in what it read, and every later one moves the generation past the tag.

The generation moves after the database's COMMIT, never before: a copy read between the
two is tagged with the old generation and dropped when it moves. Transactions that end
in a rollback move it too (rarely, and harmlessly: the next reader reads again), because
a rolled-back savepoint must not hide the changes made before it.

Only changes made through the sessions of the watched session factory are seen; tasks
change nowhere else (store.repositories.tasks).
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import event, inspect
from sqlalchemy.orm import ORMExecuteState, Session, SessionTransaction, sessionmaker

from store.models import JobRow, NodeRow, TaskRow

# What a cache of the active tasks holds: a change to any other column leaves it current.
_PLACEMENT_COLUMNS = ("state", "node_name", "job_id", "task_index", "lease")
# Deleting a job or a node deletes its tasks (ON DELETE CASCADE), unseen by the session.
_OWNER_TABLES = frozenset({JobRow.__tablename__, NodeRow.__tablename__})
_CHANGED = "hadar.tasks_changed"
# The execution option of a bulk UPDATE of tasks that sets none of _PLACEMENT_COLUMNS (a
# round's lease extensions), which therefore leaves every cache current.
PLACEMENT_UNCHANGED = "hadar_placement_unchanged"


class TaskChanges:
    """The task-change generation of one database's sessions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0

    @property
    def generation(self) -> int:
        return self._generation

    def watch(self, sessions: sessionmaker[Session]) -> None:
        event.listen(sessions, "after_flush", self._after_flush)
        event.listen(sessions, "do_orm_execute", self._on_statement)
        event.listen(sessions, "after_transaction_end", self._after_transaction_end)

    def _bump(self) -> None:
        with self._lock:
            self._generation += 1

    @staticmethod
    def _after_flush(session: Session, _context: Any) -> None:
        # In after_flush the session still lists what it flushed, with its history.
        if session.info.get(_CHANGED):
            return
        if any(isinstance(row, TaskRow) for row in session.new) or any(
            isinstance(row, (TaskRow, JobRow, NodeRow)) for row in session.deleted
        ):
            session.info[_CHANGED] = True
            return
        for row in session.dirty:
            if isinstance(row, TaskRow):
                attrs = inspect(row).attrs
                if any(attrs[name].history.has_changes() for name in _PLACEMENT_COLUMNS):
                    session.info[_CHANGED] = True
                    return

    @staticmethod
    def _on_statement(state: ORMExecuteState) -> None:
        """Statements run through the session (bulk UPDATE, DELETE, INSERT) bypass the
        flush: any such statement on the tasks, or deleting jobs or nodes, counts."""
        if not (state.is_update or state.is_delete or state.is_insert):
            return
        if state.is_update and state.execution_options.get(PLACEMENT_UNCHANGED):
            return
        table = getattr(state.statement, "table", None)
        name = getattr(table, "name", None)
        if name == TaskRow.__tablename__ or (state.is_delete and name in _OWNER_TABLES):
            state.session.info[_CHANGED] = True

    def _after_transaction_end(self, session: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is not None:
            return  # a savepoint: the outermost transaction decides
        if session.info.pop(_CHANGED, False):
            self._bump()
