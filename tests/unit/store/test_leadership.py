"""The master lease in the database: taking, renewing, expiring, taking over, releasing, and
the fencing epoch that grows by one with every term (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
import time

import pytest

from store import Database
from store.leadership import LeaseLostError, MasterLeases, check_term


def test_a_fresh_database_gives_the_first_master_epoch_1_committed_before_acquire_returns(
    db: Database,
) -> None:
    """The first acquisition is epoch 1, and another connection sees it as soon as acquire
    returns (the new leader acts only on a committed epoch)."""
    term = MasterLeases(db).acquire("a", "host-a:1", lease_s=10)
    assert term is not None
    assert term.epoch == 1
    other = Database(db.url)
    try:
        seen = MasterLeases(other).current()
    finally:
        other.dispose()
    assert seen is not None
    assert (seen.holder, seen.address, seen.epoch) == ("a", "host-a:1", 1)


def test_a_held_lease_is_refused_to_another_master_and_renewed_only_by_its_holder(
    db: Database,
) -> None:
    """While the lease is unexpired nobody else gets it; renewing extends it for its holder
    and term only."""
    leases = MasterLeases(db)
    term = leases.acquire("a", "host-a:1", lease_s=10)
    assert term is not None
    assert leases.acquire("b", "host-b:1", lease_s=10) is None
    renewed = leases.renew("a", term.epoch, lease_s=20)
    assert renewed is not None and renewed > term.expires_at
    assert leases.renew("b", term.epoch, lease_s=20) is None
    assert leases.renew("a", term.epoch + 1, lease_s=20) is None
    current = leases.current()
    assert current is not None and current.holder == "a" and current.epoch == 1


def test_an_expired_lease_is_taken_over_with_the_next_epoch_and_the_old_term_is_over(
    db: Database,
) -> None:
    """Once the holder stops renewing, another master takes the lease with epoch + 1; the
    old holder can no longer renew, and a write checking its term is refused."""
    leases = MasterLeases(db)
    old = leases.acquire("a", "host-a:1", lease_s=0.3)
    assert old is not None
    assert leases.acquire("b", "host-b:1", lease_s=10) is None
    deadline = time.monotonic() + 10
    new = None
    while new is None and time.monotonic() < deadline:
        new = leases.acquire("b", "host-b:1", lease_s=10)
        time.sleep(0.05)
    assert new is not None
    assert new.epoch == old.epoch + 1
    assert leases.renew("a", old.epoch, lease_s=10) is None
    with db.session() as session, pytest.raises(LeaseLostError, match="epoch 1"):
        check_term(session, "a", old.epoch)
    with db.session() as session:
        check_term(session, "b", new.epoch)


def test_a_released_lease_is_taken_at_once_and_the_epoch_still_grows(db: Database) -> None:
    """A graceful stop releases the lease: the next master need not wait for it to expire,
    and its epoch is still one more."""
    leases = MasterLeases(db)
    first = leases.acquire("a", "host-a:1", lease_s=3600)
    assert first is not None
    assert leases.release("a", first.epoch)
    second = leases.acquire("b", "host-b:1", lease_s=3600)
    assert second is not None and second.epoch == 2


def test_epochs_grow_by_one_with_every_term(db: Database) -> None:
    """Terms taken one after another (forced, as the lock-file holder does on SQLite) get
    epochs 1, 2, 3, ... with no gap and no repeat."""
    leases = MasterLeases(db)
    epochs = []
    for number in range(5):
        term = leases.acquire(f"m{number}", "x:1", lease_s=3600, force=True)
        assert term is not None
        epochs.append(term.epoch)
    assert epochs == [1, 2, 3, 4, 5]


def test_of_masters_racing_for_an_expired_lease_exactly_one_wins(db: Database) -> None:
    """Eight masters try for the free lease at the same moment: one gets it (epoch 1), the
    others are refused."""
    barrier = threading.Barrier(8)
    won: list[int] = []
    errors: list[BaseException] = []

    def contender(number: int) -> None:
        database = Database(db.url)
        try:
            barrier.wait()
            term = MasterLeases(database).acquire(f"m{number}", "x:1", lease_s=3600)
            if term is not None:
                won.append(term.epoch)
        except BaseException as exc:
            errors.append(exc)
        finally:
            database.dispose()

    threads = [threading.Thread(target=contender, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert won == [1]
