"""Meta's Graph API error bodies as typed errors.

Meta answers failures as `{"error": {"message", "type", "code", "error_subcode", "fbtrace_id",
"error_data": {"details"}}}`. The numeric `code` says what happened; the classes below are the
codes Switchboard acts on differently. Anything else is a plain `WhatsAppError`.
"""

from __future__ import annotations

from typing import Any, ClassVar


class WhatsAppError(Exception):
    """A failure answered (or caused) by the messaging platform."""

    # Codes this class stands for (empty: the catch-all).
    codes: ClassVar[frozenset[int]] = frozenset()
    # Throttling and platform outages are worth trying again after a wait.
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        subcode: int | None = None,
        http_status: int | None = None,
        details: str | None = None,
        trace_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.subcode = subcode
        self.http_status = http_status
        self.details = details
        self.trace_id = trace_id
        self.retry_after = retry_after

    def describe(self) -> str:
        """One line for a template's `rejected_reason` or a submission error."""
        text = self.details or self.message
        return f"{text} (code {self.code})" if self.code is not None else text


class ThroughputExceeded(WhatsAppError):
    """130429: the phone number's messages-per-second throughput is used up."""

    codes = frozenset({130429})
    retryable = True


class PairRateLimited(WhatsAppError):
    """131056: too many messages from this business number to one recipient in a short time."""

    codes = frozenset({131056})
    retryable = True


class TooManyCalls(WhatsAppError):
    """80008 (WhatsApp Business Account rate limit), and Graph's app/user limits 4, 17, 32, 613."""

    codes = frozenset({80008, 4, 17, 32, 613})
    retryable = True


class Undeliverable(WhatsAppError):
    """131026: the recipient cannot receive the message (not a WhatsApp user, old client…)."""

    codes = frozenset({131026})


class InvalidToken(WhatsAppError):
    """190: the access token expired, was revoked or is not a token at all."""

    codes = frozenset({190})


class InvalidParameter(WhatsAppError):
    """100 (invalid parameter) and 131009 (parameter value not valid, e.g. a bad number)."""

    codes = frozenset({100, 131009})


class PlatformUnavailable(WhatsAppError):
    """A 5xx, a timeout or a connection failure: the request may be tried again."""

    retryable = True


_TYPED: tuple[type[WhatsAppError], ...] = (
    ThroughputExceeded,
    PairRateLimited,
    TooManyCalls,
    Undeliverable,
    InvalidToken,
    InvalidParameter,
)
_BY_CODE: dict[int, type[WhatsAppError]] = {code: cls for cls in _TYPED for code in cls.codes}


def error_class_for(code: int | None, http_status: int | None) -> type[WhatsAppError]:
    if code is not None and code in _BY_CODE:
        return _BY_CODE[code]
    if http_status is not None and http_status >= 500:
        return PlatformUnavailable
    if http_status == 429:
        return TooManyCalls
    return WhatsAppError


def from_error_body(
    body: Any, http_status: int | None, retry_after: float | None = None
) -> WhatsAppError:
    """The typed error for a Graph API error envelope (or for a body that is not one)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        cls = error_class_for(None, http_status)
        return cls(
            f"Unexpected answer from the messaging platform (HTTP {http_status})",
            http_status=http_status,
            retry_after=retry_after,
        )
    code = error.get("code")
    subcode = error.get("error_subcode")
    data = error.get("error_data")
    details = data.get("details") if isinstance(data, dict) else None
    code = code if isinstance(code, int) else None
    cls = error_class_for(code, http_status)
    return cls(
        str(error.get("message") or "Messaging platform error"),
        code=code,
        subcode=subcode if isinstance(subcode, int) else None,
        http_status=http_status,
        details=details if isinstance(details, str) else None,
        trace_id=error.get("fbtrace_id") if isinstance(error.get("fbtrace_id"), str) else None,
        retry_after=retry_after,
    )


def error_body(
    code: int,
    message: str,
    *,
    subcode: int | None = None,
    details: str | None = None,
    error_type: str = "OAuthException",
    trace_id: str = "AbCdEfGhIjK",
) -> dict[str, Any]:
    """Meta's error envelope (the simulator and the test server answer with it)."""
    error: dict[str, Any] = {
        "message": message,
        "type": error_type,
        "code": code,
        "fbtrace_id": trace_id,
    }
    if subcode is not None:
        error["error_subcode"] = subcode
    if details is not None:
        error["error_data"] = {"messaging_product": "whatsapp", "details": details}
    return {"error": error}
