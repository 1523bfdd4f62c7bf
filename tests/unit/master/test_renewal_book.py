"""The book of acknowledged lease ends: a lease is due for renewal unless its worker
acknowledged one that still has all but the renewal age to run."""

from __future__ import annotations

from master.rounds.renewals import RenewalBook


def test_a_lease_is_due_unless_a_recent_enough_one_was_acknowledged() -> None:
    book = RenewalBook(lease_s=300.0, renewal_age_s=30.0)
    assert book.due(1, now_s=1000.0)  # never acknowledged
    book.acknowledged([1], lease_end_s=1000.0 + 300.0)
    assert not book.due(1, now_s=1000.0)
    assert not book.due(1, now_s=1030.0)
    assert book.due(1, now_s=1030.5)
    assert book.due(2, now_s=1000.0)


def test_an_older_acknowledgment_never_shortens_the_lease_the_book_holds() -> None:
    """Answers can arrive out of order (a paced renewal answered after the next round's)."""
    book = RenewalBook(lease_s=300.0, renewal_age_s=30.0)
    book.acknowledged([1], lease_end_s=1300.0)
    book.acknowledged([1], lease_end_s=1200.0)
    assert not book.due(1, now_s=1030.0)


def test_no_renewal_age_renews_every_lease_every_round() -> None:
    book = RenewalBook(lease_s=300.0, renewal_age_s=0.0)
    book.acknowledged([1], lease_end_s=1300.0)
    assert book.due(1, now_s=1000.0)


def test_tasks_no_longer_running_are_forgotten() -> None:
    book = RenewalBook(lease_s=300.0, renewal_age_s=30.0)
    book.acknowledged([1, 2, 3], lease_end_s=1300.0)
    book.keep_only([2])
    assert len(book) == 1
    assert not book.due(2, now_s=1000.0)
    assert book.due(1, now_s=1000.0)
