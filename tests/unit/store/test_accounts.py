"""API tokens (stored hashed) and throughput measurements."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from store import Database
from store.models import ApiTokenRow
from store.repositories.throughput import Measured


def test_tokens_are_hashed_authenticate_and_revoke(db: Database) -> None:
    """Only the hash is stored; the plaintext authenticates until revoked."""
    with db.transaction() as uow:
        issued = uow.tokens.create("alice", admin=True, description="laptop")
    with db.session() as session:
        stored = session.scalars(select(ApiTokenRow)).one()
        assert issued.plaintext not in (stored.token_hash, stored.id)
        assert issued.info.id == stored.token_hash[: len(issued.info.id)]
    with db.transaction() as uow:
        info = uow.tokens.authenticate(issued.plaintext)
        assert info is not None and info.user == "alice" and info.admin
        assert info.last_used_at is not None
        assert uow.tokens.authenticate(issued.plaintext + "x") is None
        assert uow.tokens.find_user("alice") is not None
    with db.transaction() as uow:
        revoked = uow.tokens.revoke(issued.info.id)
        assert revoked.revoked
        assert uow.tokens.authenticate(issued.plaintext) is None
        assert [t.id for t in uow.tokens.all(user="alice")] == [issued.info.id]
        assert uow.tokens.all(user="bob") == []


def test_throughput_ewma_and_profile_precedence(db: Database) -> None:
    """Measurements smooth with an EWMA and replace profiled values; a profile never
    overwrites a measurement."""
    with db.transaction() as uow:
        uow.throughput.set_profile("resnet", "v100", 1, 5.0)
        first = uow.throughput.record("resnet", "v100", 1, 10.0)
        second = uow.throughput.record("resnet", "v100", 1, 20.0, alpha=0.5)
        kept = uow.throughput.set_profile("resnet", "v100", 1, 1.0)
    assert first.iterations_per_s == 10.0 and first.source == "measured"
    assert second.iterations_per_s == pytest.approx(15.0) and second.count == 2
    assert kept.iterations_per_s == pytest.approx(15.0)
    with pytest.raises(ValueError), db.transaction() as uow:
        uow.throughput.record("resnet", "v100", 1, float("nan"))
    with db.transaction() as uow:
        assert len(uow.throughput.all()) == 1


def test_measurements_recorded_together_fold_as_recorded_one_by_one(db: Database) -> None:
    """record_many folds each measurement in order, as record does: into a measured row's
    average, over a profiled value, or as a new row; the same key twice folds twice. A
    rate that is not positive and finite refuses the whole call."""
    with db.transaction() as uow:
        uow.throughput.record("resnet", "v100", 1, 10.0)
        uow.throughput.set_profile("lstm", "k80", 2, 3.0)
    with db.transaction() as uow:
        uow.throughput.record_many(
            [
                Measured("resnet", "v100", 1, 20.0),
                Measured("lstm", "k80", 2, 4.0),
                Measured("resnet", "v100", 1, 30.0),
                Measured("transformer", "p100", 4, 7.0),
            ],
            alpha=0.5,
        )
    with db.transaction() as uow:
        rows = {(m.job_type, m.gpu_type, m.num_gpus): m for m in uow.throughput.all()}
    assert rows["resnet", "v100", 1].iterations_per_s == pytest.approx(22.5)
    assert rows["resnet", "v100", 1].count == 3
    assert (rows["lstm", "k80", 2].iterations_per_s, rows["lstm", "k80", 2].source) == (
        4.0,
        "measured",
    )
    assert rows["transformer", "p100", 4].iterations_per_s == 7.0
    assert rows["transformer", "p100", 4].count == 1
    with pytest.raises(ValueError), db.transaction() as uow:
        uow.throughput.record_many([Measured("resnet", "v100", 1, float("inf"))])
