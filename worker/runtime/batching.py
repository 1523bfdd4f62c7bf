"""How a global batch is cut into per-rank shares and per-rank micro-batches."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """Samples [start, stop) of an iteration's global batch."""

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


def even_split(total: int, parts: int) -> list[int]:
    """``parts`` sizes summing to ``total``, the first ``total % parts`` one larger."""
    if parts < 1:
        raise ValueError("parts must be >= 1")
    base, extra = divmod(total, parts)
    return [base + (1 if index < extra else 0) for index in range(parts)]


def rank_spans(local_sizes: list[int]) -> list[Span]:
    """Consecutive spans of the global batch, one per rank, in rank order."""
    spans = []
    start = 0
    for size in local_sizes:
        spans.append(Span(start, start + size))
        start += size
    return spans


def micro_spans(share: Span, accumulation_steps: int) -> list[Span]:
    """The rank's share cut into ``accumulation_steps`` consecutive micro-batches."""
    if accumulation_steps > share.size:
        raise ValueError(
            f"{accumulation_steps} accumulation steps need at least that many samples per "
            f"rank, this rank has {share.size}"
        )
    spans = []
    start = share.start
    for size in even_split(share.size, accumulation_steps):
        spans.append(Span(start, start + size))
        start += size
    return spans


def copy_iteration_cap(remaining: int, num_copies: int, copy_index: int) -> int:
    """This copy's most iterations, so that all copies together never exceed ``remaining``."""
    return even_split(remaining, num_copies)[copy_index]
