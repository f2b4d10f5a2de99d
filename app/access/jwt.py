"""Bearer JWTs for organization users (HS256 with the service secret key)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import jwt

from app.core.clock import utcnow

ALGORITHM = "HS256"
ISSUER = "switchboard"


@dataclass(frozen=True, slots=True)
class TokenClaims:
    user_id: str
    organization_id: str


def issue_token(claims: TokenClaims, secret_key: str, ttl_seconds: int) -> str:
    now = utcnow()
    payload = {
        "iss": ISSUER,
        "sub": claims.user_id,
        "org": claims.organization_id,
        "scope": "full_access",
        "iat": int(now.timestamp()),
        "exp": int((now + timedelta(seconds=ttl_seconds)).timestamp()),
    }
    return jwt.encode(payload, secret_key, algorithm=ALGORITHM)


def decode_token(token: str, secret_key: str) -> TokenClaims | None:
    """The claims of a valid, unexpired token we issued; None for anything else."""
    try:
        payload = jwt.decode(
            token,
            secret_key,
            algorithms=[ALGORITHM],
            issuer=ISSUER,
            options={"require": ["exp", "iat", "sub", "iss"]},
        )
    except jwt.PyJWTError:
        return None
    user_id, organization_id = payload.get("sub"), payload.get("org")
    if not isinstance(user_id, str) or not isinstance(organization_id, str):
        return None
    return TokenClaims(user_id=user_id, organization_id=organization_id)
