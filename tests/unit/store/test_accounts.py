"""API tokens (stored hashed) and throughput measurements."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from store import Database
from store.models import ApiTokenRow


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
