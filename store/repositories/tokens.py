"""Users and their API tokens. Tokens are stored as SHA-256 hashes; the plaintext is shown once."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.domain import ApiToken, IssuedToken, User
from store.errors import NotFoundError
from store.models import ApiTokenRow, UserRow, utcnow
from store.repositories import convert

TOKEN_PREFIX = "hdr_"
PUBLIC_ID_LENGTH = 12
# Writing last_used_at on every call would turn reads into writes; a minute is precise enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


class TokenRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def ensure_user(self, name: str, *, admin: bool = False) -> User:
        """Create the user if missing; an `admin=True` call promotes an existing user."""
        row = self._session.get(UserRow, name)
        if row is None:
            row = UserRow(name=name, admin=admin, created_at=utcnow())
            self._session.add(row)
        elif admin and not row.admin:
            row.admin = True
        self._session.flush()
        return User(name=row.name, admin=row.admin, created_at=row.created_at)

    def find_user(self, name: str) -> User | None:
        row = self._session.get(UserRow, name)
        if row is None:
            return None
        return User(name=row.name, admin=row.admin, created_at=row.created_at)

    def create(
        self, user: str, *, admin: bool = False, description: str = "", now: datetime | None = None
    ) -> IssuedToken:
        """Issue a new token for `user` (created if needed)."""
        self.ensure_user(user)
        plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
        digest = hash_token(plaintext)
        row = ApiTokenRow(
            id=digest[:PUBLIC_ID_LENGTH],
            token_hash=digest,
            user=user,
            admin=admin,
            description=description,
            created_at=now or utcnow(),
        )
        self._session.add(row)
        self._session.flush()
        return IssuedToken(plaintext=plaintext, info=convert.api_token(row))

    def authenticate(self, plaintext: str, *, now: datetime | None = None) -> ApiToken | None:
        """The token's info when it is valid and not revoked, else None."""
        row = self._session.scalars(
            select(ApiTokenRow).where(ApiTokenRow.token_hash == hash_token(plaintext))
        ).one_or_none()
        if row is None or row.revoked_at is not None:
            return None
        at = now or utcnow()
        if row.last_used_at is None or at - row.last_used_at >= LAST_USED_RESOLUTION:
            row.last_used_at = at
            self._session.flush()
        return convert.api_token(row)

    def all(self, *, user: str = "") -> list[ApiToken]:
        query = select(ApiTokenRow).order_by(ApiTokenRow.created_at, ApiTokenRow.id)
        if user:
            query = query.where(ApiTokenRow.user == user)
        return [convert.api_token(row) for row in self._session.scalars(query)]

    def get(self, token_id: str) -> ApiToken:
        row = self._session.get(ApiTokenRow, token_id)
        if row is None:
            raise NotFoundError("token", token_id)
        return convert.api_token(row)

    def revoke(self, token_id: str, *, now: datetime | None = None) -> ApiToken:
        """Revoke a token; revoking twice keeps the first revocation time."""
        row = self._session.get(ApiTokenRow, token_id)
        if row is None:
            raise NotFoundError("token", token_id)
        if row.revoked_at is None:
            row.revoked_at = now or utcnow()
            self._session.flush()
        return convert.api_token(row)
