"""Measured (and profiled) throughputs per job type x GPU type x GPUs per job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from store.domain import ThroughputMeasurement
from store.models import ThroughputRow, utcnow
from store.repositories import convert

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
        """`record` for several measurements, in order, written at the unit of work's next
        flush; their rows are loaded with one query. Recording them one by one would query
        once per key, and every query first flushes what the unit of work has pending."""
        for m in measurements:
            _check_rate(m.iterations_per_s)
        keys = list({(m.job_type, m.gpu_type, m.num_gpus) for m in measurements})
        if not keys:
            return
        columns = tuple_(ThroughputRow.job_type, ThroughputRow.gpu_type, ThroughputRow.num_gpus)
        rows = {
            (row.job_type, row.gpu_type, row.num_gpus): row
            for row in self._session.scalars(select(ThroughputRow).where(columns.in_(keys)))
        }
        now = utcnow()
        for m in measurements:
            key = (m.job_type, m.gpu_type, m.num_gpus)
            row = rows.get(key)
            if row is None:
                rows[key] = self._new_row(*key, m.iterations_per_s, MEASURED)
                continue
            self._fold(row, m.iterations_per_s, alpha, now)

    @staticmethod
    def _fold(row: ThroughputRow, iterations_per_s: float, alpha: float, now: datetime) -> None:
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
