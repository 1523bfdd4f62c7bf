"""Measured (and profiled) throughputs per job type x GPU type x GPUs per job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, insert, select, tuple_, update
from sqlalchemy.orm import Session

from store.domain import ThroughputMeasurement
from store.models import ThroughputRow, utcnow
from store.repositories import convert
from store.session_writes import flush_pending, mark_written

MEASURED = "measured"
PROFILE = "profile"
# Weight of a new sample in the moving average: smooths noise yet follows real changes
# within a few reports.
DEFAULT_ALPHA = 0.2


@dataclass(frozen=True, slots=True)
class Measured:
    """One measured rate of a job type on `num_gpus` GPUs of a type."""

    job_type: str
    gpu_type: str
    num_gpus: int
    iterations_per_s: float


_TABLE = ThroughputRow.metadata.tables[ThroughputRow.__tablename__]
_KEY = tuple_(_TABLE.c.job_type, _TABLE.c.gpu_type, _TABLE.c.num_gpus)
# Built once: constructing a statement costs more than running it.
_STORED = select(
    _TABLE.c.job_type,
    _TABLE.c.gpu_type,
    _TABLE.c.num_gpus,
    _TABLE.c.iterations_per_s,
    _TABLE.c.count,
    _TABLE.c.source,
).where(_KEY.in_(bindparam("keys", expanding=True)))
_UPDATE = (
    update(_TABLE)
    .where(
        _TABLE.c.job_type == bindparam("b_job_type"),
        _TABLE.c.gpu_type == bindparam("b_gpu_type"),
        _TABLE.c.num_gpus == bindparam("b_num_gpus"),
    )
    .values(
        iterations_per_s=bindparam("b_rate"),
        count=bindparam("b_count"),
        source=bindparam("b_source"),
        updated_at=bindparam("b_at"),
    )
)


_INSERT = insert(_TABLE)


@dataclass(slots=True)
class _Folded:
    """A stored average as measurements are folded into it (record_many)."""

    iterations_per_s: float
    count: int
    source: str
    updated_at: datetime


def _check_rate(iterations_per_s: float) -> None:
    if iterations_per_s <= 0 or not iterations_per_s < float("inf"):
        raise ValueError(f"throughput must be positive and finite, got {iterations_per_s}")


class ThroughputRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def record(
        self,
        job_type: str,
        gpu_type: str,
        num_gpus: int,
        iterations_per_s: float,
        *,
        alpha: float = DEFAULT_ALPHA,
        now: datetime | None = None,
        flush: bool = True,
    ) -> ThroughputMeasurement:
        """Fold a measurement into the EWMA. Measurements replace a profiled value. With
        `flush=False` the write waits for the unit of work's next flush."""
        row, created = self._row_for(job_type, gpu_type, num_gpus, iterations_per_s, MEASURED)
        if created:
            row.updated_at = now or utcnow()
        else:
            self._fold(row, iterations_per_s, alpha, now or utcnow())
        if flush:
            self._session.flush()
        return convert.throughput(row)

    def record_many(
        self, measurements: Sequence[Measured], *, alpha: float = DEFAULT_ALPHA
    ) -> None:
        """`record` for several measurements, in order: their rows are read with one query
        and written with one statement per kind (updates, inserts), as plain columns.
        Workers report every few seconds, and loading and flushing the rows through the
        ORM cost more than the rest of storing a report. Rows of these keys loaded in
        this unit of work before are not refreshed."""
        for m in measurements:
            _check_rate(m.iterations_per_s)
        keys = list(dict.fromkeys((m.job_type, m.gpu_type, m.num_gpus) for m in measurements))
        if not keys:
            return
        flush_pending(self._session)
        connection = self._session.connection()
        now = utcnow()
        stored: dict[tuple[str, str, int], _Folded] = {
            (job_type, gpu_type, num_gpus): _Folded(rate, count, source, now)
            for job_type, gpu_type, num_gpus, rate, count, source in connection.execute(
                _STORED, {"keys": keys}
            )
        }
        new: dict[tuple[str, str, int], _Folded] = {}
        for m in measurements:
            key = (m.job_type, m.gpu_type, m.num_gpus)
            folded = stored.get(key) or new.get(key)
            if folded is None:
                new[key] = _Folded(m.iterations_per_s, 1, MEASURED, now)
            else:
                self._fold(folded, m.iterations_per_s, alpha, now)
        changed = [
            {
                "b_job_type": key[0],
                "b_gpu_type": key[1],
                "b_num_gpus": key[2],
                "b_rate": f.iterations_per_s,
                "b_count": f.count,
                "b_source": f.source,
                "b_at": now,
            }
            for key, f in stored.items()
        ]
        if changed:
            connection.execute(_UPDATE, changed)
        if new:
            connection.execute(
                _INSERT,
                [
                    {
                        "job_type": key[0],
                        "gpu_type": key[1],
                        "num_gpus": key[2],
                        "iterations_per_s": f.iterations_per_s,
                        "count": f.count,
                        "source": f.source,
                        "updated_at": now,
                    }
                    for key, f in new.items()
                ],
            )
        mark_written(self._session)

    @staticmethod
    def _fold(
        row: ThroughputRow | _Folded, iterations_per_s: float, alpha: float, now: datetime
    ) -> None:
        """A measurement into a stored row: into its average, or over a profiled value."""
        if row.source == MEASURED:
            row.iterations_per_s = alpha * iterations_per_s + (1 - alpha) * row.iterations_per_s
            row.count += 1
        else:
            row.iterations_per_s = iterations_per_s
            row.count = 1
            row.source = MEASURED
        row.updated_at = now

    def set_profile(
        self,
        job_type: str,
        gpu_type: str,
        num_gpus: int,
        iterations_per_s: float,
        *,
        now: datetime | None = None,
    ) -> ThroughputMeasurement:
        """Store a profiled value unless live measurements exist (they are better)."""
        row, created = self._row_for(job_type, gpu_type, num_gpus, iterations_per_s, PROFILE)
        if created or row.source == PROFILE:
            if not created:
                row.iterations_per_s = iterations_per_s
                row.count += 1
            row.updated_at = now or utcnow()
        self._session.flush()
        return convert.throughput(row)

    def _row_for(
        self, job_type: str, gpu_type: str, num_gpus: int, iterations_per_s: float, source: str
    ) -> tuple[ThroughputRow, bool]:
        """The stored row for the key, or a new one holding this value (and True)."""
        _check_rate(iterations_per_s)
        row = self._session.get(ThroughputRow, (job_type, gpu_type, num_gpus))
        if row is not None:
            return row, False
        return self._new_row(job_type, gpu_type, num_gpus, iterations_per_s, source), True

    def _new_row(
        self, job_type: str, gpu_type: str, num_gpus: int, iterations_per_s: float, source: str
    ) -> ThroughputRow:
        row = ThroughputRow(
            job_type=job_type,
            gpu_type=gpu_type,
            num_gpus=num_gpus,
            iterations_per_s=iterations_per_s,
            count=1,
            source=source,
            updated_at=utcnow(),
        )
        self._session.add(row)
        return row

    def all(self) -> list[ThroughputMeasurement]:
        query = select(ThroughputRow).order_by(
            ThroughputRow.job_type, ThroughputRow.gpu_type, ThroughputRow.num_gpus
        )
        return [convert.throughput(row) for row in self._session.scalars(query)]
