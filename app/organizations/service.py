"""Organizations and their users: creation and password login."""

from __future__ import annotations

import re
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.jwt import TokenClaims, issue_token
from app.kit.errors import Conflict, InvalidInput, InvalidLogin, NotFound
from app.kit.validation import display_name
from app.organizations import repository
from app.organizations.models import Organization, User

_password_hasher = PasswordHasher()
# Hash of a throwaway password: verified against on unknown emails so timing reveals nothing.
_DUMMY_HASH = _password_hasher.hash("switchboard-timing-equaliser")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
MIN_PASSWORD_LENGTH = 10


async def create_organization(session: AsyncSession, name: str) -> Organization:
    try:
        name = display_name(name)  # the one rule for names (app/kit/validation.py)
    except ValueError as exc:
        raise InvalidInput(f"name {exc}", field="name") from exc
    organization = Organization(name=name)
    session.add(organization)
    await session.flush()
    return organization


async def create_user(
    session: AsyncSession, organization_id: str, email: str, password: str
) -> User:
    email = email.strip().lower()
    if not _EMAIL.match(email) or len(email) > 320:
        raise InvalidInput("email is not a valid address", field="email")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(
            f"password must be at least {MIN_PASSWORD_LENGTH} characters", field="password"
        )
    if await repository.get_organization(session, organization_id) is None:
        raise NotFound("Organization")
    if await repository.find_user_by_email(session, email) is not None:
        raise Conflict("a user with this email already exists", field="email")
    user = User(
        organization_id=organization_id, email=email, password_hash=_password_hasher.hash(password)
    )
    session.add(user)
    await session.flush()
    return user


@dataclass(frozen=True, slots=True)
class LoginResult:
    token: str
    user: User
    expires_in: int


async def login(
    session: AsyncSession, email: str, password: str, *, secret_key: str, ttl_seconds: int
) -> LoginResult:
    user = await repository.find_user_by_email(session, email.strip())
    try:
        _password_hasher.verify(user.password_hash if user else _DUMMY_HASH, password)
    except (VerificationError, InvalidHashError):
        user = None
    if user is None:
        raise InvalidLogin()
    token = issue_token(TokenClaims(user.id, user.organization_id), secret_key, ttl_seconds)
    return LoginResult(token=token, user=user, expires_in=ttl_seconds)
