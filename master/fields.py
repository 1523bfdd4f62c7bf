"""Checks that a request's values fit what the store can hold, each failure naming its field.

Protobuf lets a client send a uint64 the database's BIGINT cannot hold, a uint32 past an
INTEGER column, text with NUL characters (which PostgreSQL refuses) or longer than its
column: without these checks such a request reaches the database and fails as an internal
error instead of INVALID_ARGUMENT.
"""

from __future__ import annotations

from master.errors import InvalidArgumentError
from protos.numbers import INT32_MAX, INT64_MAX
from protos.printable import UNPRINTABLE
from store.errors import NotFoundError


def at_most(value: int, limit: int, field: str) -> int:
    if value > limit:
        raise InvalidArgumentError(field, f"must be at most {limit}")
    return value


def int64(value: int, field: str) -> int:
    """A count or id the store keeps in a BIGINT column."""
    return at_most(value, INT64_MAX, field)


def job_id(value: int) -> int:
    """A job id to look up: one past what the store can hold names no job (NOT_FOUND, as
    for any other unknown id), it is not a malformed request."""
    if value > INT64_MAX:
        raise NotFoundError("job", value)
    return value


def int32(value: int, field: str) -> int:
    """A count or index the store keeps in an INTEGER column."""
    return at_most(value, INT32_MAX, field)


def text(value: str, field: str, max_chars: int) -> str:
    """Free text of at most `max_chars` characters, without NUL."""
    if len(value) > max_chars:
        raise InvalidArgumentError(field, f"must be at most {max_chars} characters")
    if "\0" in value:
        raise InvalidArgumentError(field, "must not contain NUL characters")
    return value


def printable(value: str, field: str) -> str:
    """Refuses text with a character a terminal would act on rather than show: names and
    other short text that other people's screens print."""
    found = UNPRINTABLE.search(value)
    if found is not None:
        raise InvalidArgumentError(
            field,
            f"must not contain control or text-direction characters "
            f"(U+{ord(found.group()):04X} at character {found.start() + 1})",
        )
    return value


def label(value: str, field: str, max_chars: int) -> str:
    """Short text that others read (a reason, a description): at most `max_chars`
    characters, every one printable."""
    return printable(text(value, field, max_chars), field)


def name(value: str, field: str, max_chars: int) -> str:
    """An identifier (a node, a GPU type): 1 to `max_chars` characters after stripping
    surrounding blanks, every one printable."""
    stripped = value.strip()
    if not 1 <= len(stripped) <= max_chars:
        raise InvalidArgumentError(field, f"must be 1 to {max_chars} characters")
    return printable(stripped, field)
