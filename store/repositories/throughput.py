"""Measured (and profiled) throughputs per job type x GPU type x GPUs per job."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.domain import ThroughputMeasurement
from store.models import ThroughputRow, utcnow
from store.repositories import convert

MEASURED = "measured"
PROFILE = "profile"
# Weight of a new sample in the moving average: smooths noise yet follows real changes
# within a few reports.
DEFAULT_ALPHA = 0.2


class ThroughputRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        # The session's identity map holds rows weakly: rows loaded ahead are kept here
        # for the unit of work's life, else they would be dropped before they are used.
        self._loaded: list[ThroughputRow] = []

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
        if not created and row.source == MEASURED:
            row.iterations_per_s = alpha * iterations_per_s + (1 - alpha) * row.iterations_per_s
            row.count += 1
        elif not created:
            row.iterations_per_s = iterations_per_s
            row.count = 1
            row.source = MEASURED
        row.updated_at = now or utcnow()
        if flush:
            self._session.flush()
        return convert.throughput(row)

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

    def load_all(self) -> None:
        """Load every row into the unit of work, so that `record` then finds its row
        without a query. A query flushes the unit of work's pending writes first, so a
        group of reports recording one by one would flush once per report; the table is
        small (job types x GPU types x sizes)."""
        self._loaded = list(self._session.scalars(select(ThroughputRow)))

    def _row_for(
        self, job_type: str, gpu_type: str, num_gpus: int, iterations_per_s: float, source: str
    ) -> tuple[ThroughputRow, bool]:
        """The stored row for the key, or a new one holding this value (and True)."""
        if iterations_per_s <= 0 or not iterations_per_s < float("inf"):
            raise ValueError(f"throughput must be positive and finite, got {iterations_per_s}")
        row = self._session.get(ThroughputRow, (job_type, gpu_type, num_gpus))
        if row is not None:
            return row, False
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
        return row, True

    def all(self) -> list[ThroughputMeasurement]:
        query = select(ThroughputRow).order_by(
            ThroughputRow.job_type, ThroughputRow.gpu_type, ThroughputRow.num_gpus
        )
        return [convert.throughput(row) for row in self._session.scalars(query)]
