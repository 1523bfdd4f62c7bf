"""Cutting the global batch into rank shares and micro-batches."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.runtime.batching import Span, even_split, micro_spans, rank_spans


@given(st.integers(0, 10_000), st.integers(1, 64))
def test_even_split_sums_and_differs_by_at_most_one(total: int, parts: int) -> None:
    sizes = even_split(total, parts)
    assert len(sizes) == parts
    assert sum(sizes) == total
    assert max(sizes) - min(sizes) <= 1


def test_rank_spans_are_consecutive() -> None:
    assert rank_spans([5, 3]) == [Span(0, 5), Span(5, 8)]


@given(st.integers(0, 500), st.integers(1, 200), st.integers(1, 16))
def test_micro_spans_tile_the_share(start: int, size: int, steps: int) -> None:
    share = Span(start, start + size)
    if steps > size:
        with pytest.raises(ValueError, match="accumulation steps"):
            micro_spans(share, steps)
        return
    spans = micro_spans(share, steps)
    assert len(spans) == steps
    assert spans[0].start == share.start and spans[-1].stop == share.stop
    assert all(a.stop == b.start for a, b in itertools.pairwise(spans))
    assert all(span.size >= 1 for span in spans)
