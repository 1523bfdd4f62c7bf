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

    def record(
        self,
        job_type: str,
        gpu_type: str,
        num_gpus: int,
        iterations_per_s: float,
        *,
        alpha: float = DEFAULT_ALPHA,
        now: datetime | None = None,
    ) -> ThroughputMeasurement:
        """Fold a measurement into the EWMA. Measurements replace a profiled value."""
        if iterations_per_s <= 0 or not iterations_per_s < float("inf"):
            raise ValueError(f"throughput must be positive and finite, got {iterations_per_s}")
        row = self._session.get(ThroughputRow, (job_type, gpu_type, num_gpus))
        at = now or utcnow()
        if row is None:
            row = ThroughputRow(
                job_type=job_type,
                gpu_type=gpu_type,
                num_gpus=num_gpus,
                iterations_per_s=iterations_per_s,
                count=1,
                source=MEASURED,
                updated_at=at,
            )
            self._session.add(row)
        elif row.source != MEASURED:
            row.iterations_per_s = iterations_per_s
            row.count = 1
            row.source = MEASURED
            row.updated_at = at
        else:
            row.iterations_per_s = alpha * iterations_per_s + (1 - alpha) * row.iterations_per_s
            row.count += 1
            row.updated_at = at
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
        if iterations_per_s <= 0 or not iterations_per_s < float("inf"):
            raise ValueError(f"throughput must be positive and finite, got {iterations_per_s}")
        row = self._session.get(ThroughputRow, (job_type, gpu_type, num_gpus))
        at = now or utcnow()
        if row is None:
            row = ThroughputRow(
                job_type=job_type,
                gpu_type=gpu_type,
                num_gpus=num_gpus,
                iterations_per_s=iterations_per_s,
                count=1,
                source=PROFILE,
                updated_at=at,
            )
            self._session.add(row)
        elif row.source == PROFILE:
            row.iterations_per_s = iterations_per_s
            row.count += 1
            row.updated_at = at
        self._session.flush()
        return convert.throughput(row)

    def all(self) -> list[ThroughputMeasurement]:
        query = select(ThroughputRow).order_by(
            ThroughputRow.job_type, ThroughputRow.gpu_type, ThroughputRow.num_gpus
        )
        return [convert.throughput(row) for row in self._session.scalars(query)]
