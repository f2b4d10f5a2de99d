"""Typed domain errors. Each carries a code and an HTTP status; surfaces map them once."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base of every expected failure. `message` is safe to show to the caller."""

    code: str = "error"
    status: int = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(DomainError):
    code = "invalid_input"
    status = 400


class NotFound(DomainError):
    code = "not_found"
    status = 404

    def __init__(self, resource: str) -> None:
        super().__init__(f"{resource} not found")
        self.resource = resource


class Conflict(DomainError):
    code = "conflict"
    status = 409


class InvalidState(DomainError):
    """A state machine refused a move; the message names the current state."""

    code = "invalid_state"
    status = 400


class AuthenticationFailed(DomainError):
    code = "invalid_api_key"
    status = 401


class InvalidLogin(DomainError):
    code = "invalid_credentials"
    status = 401

    def __init__(self) -> None:
        super().__init__("Invalid email or password")


class InsufficientScope(DomainError):
    code = "insufficient_scope"
    status = 403


class LiveModeForbidden(InsufficientScope):
    """A test-mode credential reaching for live-mode data (by id: lists leave it out).
    Rendered like every 403, the credential lacking a right, with a code of its own."""

    code = "livemode_mismatch"

    def __init__(self, resource: str) -> None:
        super().__init__(
            f"A test-mode credential cannot act on a live-mode {resource.lower()}; "
            "use a live API key"
        )
        self.resource = resource


class OrganizationMismatch(DomainError):
    code = "organization_required"
    status = 400

    def __init__(self) -> None:
        super().__init__("A valid organization_id header is required")


class RateLimited(DomainError):
    code = "rate_limit_exceeded"
    status = 429

    def __init__(self, retry_after: float = 60.0) -> None:
        super().__init__("Rate limit exceeded. Please retry after a backoff.")
        self.retry_after = retry_after


class IdempotencyMismatch(DomainError):
    code = "idempotency_key_reused"
    status = 400

    def __init__(self) -> None:
        super().__init__("Idempotency-Key was already used with a different request; use a new key")


class IdempotencyInProgress(DomainError):
    code = "idempotency_key_in_use"
    status = 409

    def __init__(self) -> None:
        super().__init__("A request with this Idempotency-Key is still being processed")


class RequestValidationFailed(DomainError):
    """Input that did not parse: rendered as FastAPI-style `{detail: [{loc, msg, type}]}`."""

    code = "validation_error"
    status = 422

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("Request validation failed")
        self.errors = errors
