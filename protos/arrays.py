"""Job arrays and dependencies as people write them, in Slurm's syntax.

Both sides of the API read them: hctl and job files check `--array` and `--dependency`
before sending, the master parses `JobSpec.array` again (it trusts no client). Element ids
are written `ARRAY_INDEX` (`12_3`), as squeue and scancel write them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from protos.numbers import INT64_MAX, NumberRange, parse_int

# Largest index an element may have, as Slurm's default MaxArraySize bounds it.
MAX_INDEX = 4_000_000
# The most elements an array can have; a larger cap on running elements means none.
MAX_ELEMENTS = MAX_INDEX + 1
FORMS = "0-31, 1,3,5, 0-15:4, each optionally followed by %N (at most N running at once)"

# Job ids as the store keeps them (BIGINT); array indices as parse_array allows them.
JOB_IDS = NumberRange(1, INT64_MAX)
INDICES = NumberRange(0, MAX_INDEX)

_PART = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")
_ELEMENT_ID = re.compile(r"(\d+)_(\d+)")

DEPENDENCY_KINDS = ("afterok", "afterany", "afterfail")
# Slurm's spelling of afterfail.
_KIND_ALIASES = {"afternotok": "afterfail"}


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """The indices of an array's elements (ascending, distinct) and its concurrency cap
    (0: none)."""

    indices: tuple[int, ...]
    max_running: int = 0

    def __str__(self) -> str:
        return fold_indices(self.indices) + (f"%{self.max_running}" if self.max_running else "")


def parse_array(text: str, *, max_size: int = 0) -> ArraySpec:
    """`0-31%4`, `1,3,5`, `0-15:4`: raises ValueError saying what is wrong. With
    `max_size`, an array of more elements is refused."""
    value = text.strip()
    if not value:
        raise ValueError("the array spec is empty; write it as " + FORMS)
    body, cap_text = value, ""
    if "%" in value:
        body, cap_text = value.split("%", 1)
        if (
            not cap_text.isdigit()
            or len(cap_text.lstrip("0")) > len(str(MAX_ELEMENTS))
            or not 1 <= int(cap_text) <= MAX_ELEMENTS
        ):
            raise ValueError(
                f"{text!r}: the limit after % must be a whole number in 1..{MAX_ELEMENTS}"
            )
    indices: set[int] = set()
    for part in body.split(","):
        match = _PART.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"{text!r}: {part.strip()!r} is not an index or range; use {FORMS}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if last < first:
            raise ValueError(f"{text!r}: range {first}-{last} ends before it starts")
        if step < 1:
            raise ValueError(f"{text!r}: the step in {part.strip()!r} must be >= 1")
        if last > MAX_INDEX:
            raise ValueError(f"{text!r}: indices must be at most {MAX_INDEX}")
        count = (last - first) // step + 1
        if max_size and len(indices) + count > max_size:
            raise ValueError(
                f"{text!r} has more than {max_size} elements, the cluster's max_array_size"
            )
        indices.update(range(first, last + 1, step))
    return ArraySpec(tuple(sorted(indices)), int(cap_text) if cap_text else 0)


def fold_indices(indices: Iterable[int]) -> str:
    """`0-3,7,9-10`: ascending indices with runs written as ranges."""
    ordered = sorted(set(indices))
    parts: list[str] = []
    start = prev = None
    for index in ordered:
        if prev is not None and index == prev + 1:
            prev = index
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = index
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def element_id(array_job_id: int, index: int) -> str:
    return f"{array_job_id}_{index}"


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job as a person names it: `12` (a job, or a whole array by its id) or `12_3`
    (element 3 of array 12)."""

    job_id: int
    array_index: int | None = None

    def __str__(self) -> str:
        if self.array_index is None:
            return str(self.job_id)
        return element_id(self.job_id, self.array_index)


def parse_job_ref(text: str) -> JobRef:
    value = text.strip()
    match = _ELEMENT_ID.fullmatch(value)
    if value.isdigit() or match is not None:
        job_text, index_text = (value, None) if match is None else match.groups()
        try:
            job_id = parse_int(job_text, JOB_IDS)
            index = None if index_text is None else parse_int(index_text, INDICES)
        except ValueError as exc:
            raise ValueError(f"{text!r} is not a job id: {exc}") from None
        return JobRef(job_id, index)
    raise ValueError(f"{text!r} is not a job id: write a job id (12) or an array element (12_3)")


def parse_dependency(text: str) -> list[tuple[str, int]]:
    """sbatch's `afterok:1:2,afterany:3` as (kind, job id) pairs; kinds are afterok,
    afterany and afterfail (afternotok is accepted for it)."""
    pairs: list[tuple[str, int]] = []
    for part in text.split(","):
        fields = part.strip().split(":")
        kind = _KIND_ALIASES.get(fields[0].lower(), fields[0].lower())
        if kind not in DEPENDENCY_KINDS or len(fields) < 2:
            raise ValueError(
                f"{part.strip()!r} is not a dependency; write KIND:ID[:ID...] with KIND one "
                "of afterok, afterany, afterfail (or afternotok)"
            )
        pairs.extend((kind, parse_job_ids(f, what=kind)[0]) for f in fields[1:])
    return pairs


def parse_job_ids(text: str, *, what: str = "") -> list[int]:
    """`4,5,6` as job ids (an array's id stands for all its elements); `what` starts the
    error's message."""
    prefix = f"{what}: " if what else ""
    ids: list[int] = []
    for part in text.split(","):
        value = part.strip()
        if not value.isdigit():
            raise ValueError(f"{prefix}{value!r} is not a job id (a whole number in {JOB_IDS})")
        try:
            ids.append(parse_int(value, JOB_IDS))
        except ValueError as exc:
            raise ValueError(f"{prefix}job id {exc}") from None
    return ids


def dependency_text(pairs: Sequence[tuple[str, int]]) -> str:
    """(kind, id) pairs as sbatch writes them: `afterok:1:2,afterany:3`."""
    by_kind: dict[str, list[int]] = {}
    for kind, job_id in pairs:
        by_kind.setdefault(kind, []).append(job_id)
    return ",".join(kind + "".join(f":{i}" for i in ids) for kind, ids in by_kind.items())
