"""Reading many jobs at once, for listings (a queue thousands of jobs long).

Loading rows as ORM objects costs tens of microseconds each (identity map, instrumented
attributes, JSON columns decoded by SQLAlchemy); a listing reads plain columns instead, its
JSON columns as the text stored, and converts each distinct row once: the domain job made
from a row is remembered by the row's every value (a bounded memo), so a queue listed again
costs only the query for the rows that did not change. The memo needs no invalidation: a
changed row is a different key, and the job it maps to is immutable.
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Collection
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import JSON, Select, Text, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from store.domain import Job
from store.models import JobRow
from store.repositories import convert
from store.states import JobState

# Distinct job rows remembered; a queue longer than this is converted anew on each listing.
MEMO_SIZE = 20_000

_ATTRIBUTES = tuple((attr.key, attr.columns[0]) for attr in JobRow.__mapper__.column_attrs)
_JSON_KEYS = frozenset(key for key, column in _ATTRIBUTES if isinstance(column.type, JSON))
# A row as a listing reads it: JobRow's attributes by name, JSON ones still text.
_ListedRow = namedtuple("_ListedRow", [key for key, _ in _ATTRIBUTES])  # type: ignore[misc]
_JSON_INDICES = tuple(i for i, (key, _) in enumerate(_ATTRIBUTES) if key in _JSON_KEYS)
_decode = json.JSONDecoder().decode
# What the store writes for empty JSON values; convert reads None as empty.
_EMPTY_JSON = frozenset({"[]", "{}", "null"})


# CAST(... AS TEXT) on both databases: PostgreSQL's driver would decode json itself, and
# decoded lists are no memo key.
_COLUMNS = tuple(
    sql_cast(column, Text).label(key) if key in _JSON_KEYS else column.label(key)
    for key, column in _ATTRIBUTES
)


def _json(value: object) -> object:
    if isinstance(value, str):
        return None if value in _EMPTY_JSON else _decode(value)
    return value


@lru_cache(maxsize=MEMO_SIZE)
def job_of(values: tuple[Any, ...]) -> Job:
    """The domain job of a row read by :func:`listed_jobs` (every column, in mapper order)."""
    decoded = list(values)
    for index in _JSON_INDICES:
        decoded[index] = _json(decoded[index])
    # convert.job reads a row's columns by attribute name only.
    return convert.job(cast("JobRow", _ListedRow._make(decoded)))


def listing_query(
    *,
    user: str = "",
    states: Collection[JobState] = (),
    after_id: int = 0,
    limit: int | None = None,
    array_job_id: int = 0,
) -> Select[Any]:
    query = select(*_COLUMNS).where(JobRow.id > after_id).order_by(JobRow.id)
    if user:
        query = query.where(JobRow.user == user)
    if array_job_id:
        query = query.where(JobRow.array_job_id == array_job_id)
    if states:
        query = query.where(JobRow.state.in_([s.value for s in states]))
    if limit is not None:
        query = query.limit(limit)
    return query


def listed_jobs(session: Session, query: Select[Any]) -> list[Job]:
    # On the unit of work's connection: plain rows, without the ORM's result machinery.
    rows = session.connection().execute(query).all()
    return [job_of(tuple(row)) for row in rows]
