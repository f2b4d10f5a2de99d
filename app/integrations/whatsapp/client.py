"""The real platform: Meta's Graph API over httpx, at the version `SWITCHBOARD_GRAPH_API_VERSION`
names (v19.0 by default).

The channel's access token is the only credential (a bearer header, never a query parameter,
so it stays out of logs). Failures are Meta's error envelopes mapped to typed errors
(errors.py). Throttling and 5xx answers are tried again with exponential backoff and full
jitter, or after `Retry-After` when the platform names a wait; a POST is repeated after a
transport failure only when the request never left (connect errors), so a send is not doubled.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from app.core.tls import client_tls_context
from app.integrations.whatsapp.errors import (
    InvalidParameter,
    PairRateLimited,
    PlatformUnavailable,
    ThroughputExceeded,
    WhatsAppError,
    from_error_body,
)
from app.integrations.whatsapp.types import (
    GRAPH_API_VERSION,
    CreatedTemplate,
    LibraryFilters,
    PhoneNumber,
    PlatformTemplate,
    SentMessage,
    TemplateMessage,
    TemplateSpec,
    graph_root,
    recipient_fields,
)

logger = structlog.get_logger("switchboard.whatsapp")

Sleep = Callable[[float], Awaitable[None]]
# A listing that never ends is a platform bug; stop rather than loop forever.
MAX_PAGES = 200
PAGE_SIZE = 100


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempt counts from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return random.uniform(0, ceiling)  # full jitter: retries of many callers spread out


DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


class GraphApiClient:
    """One access token against one Graph API base URL (`SWITCHBOARD_GRAPH_API_URL`)."""

    def __init__(
        self,
        base_url: str,
        access_token: str,
        *,
        http: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        sleep: Sleep = asyncio.sleep,
        retry_throttling: bool = True,
        version: str = GRAPH_API_VERSION,
    ) -> None:
        """`retry_throttling=False`: 130429 and 131056 are raised at once, for a caller whose
        send governor (app/kit/send_governor.py) holds the whole channel or recipient instead."""
        self.root = graph_root(base_url, version)
        self._origin = urlsplit(base_url)[:2]
        self._token = access_token
        # Made on first use: a client whose sends leave another way (bulk.py) never needs one.
        self._given_http = http
        self._owned_http: httpx.AsyncClient | None = None
        self._timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._retry_throttling = retry_throttling

    async def __aenter__(self) -> GraphApiClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned_http is not None:
            await self._owned_http.aclose()
            self._owned_http = None

    @property
    def _http(self) -> httpx.AsyncClient:
        if self._given_http is not None:
            return self._given_http
        if self._owned_http is None:
            self._owned_http = httpx.AsyncClient(timeout=self._timeout, verify=client_tls_context())
        return self._owned_http

    # --- transport ---------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: dict[str, Any] | None = None,
    ) -> Any:
        headers = {"Authorization": f"Bearer {self._token}"}
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    method, url, params=params, json=json, headers=headers, timeout=self._timeout
                )
            except httpx.TransportError as exc:
                unreachable = PlatformUnavailable(
                    f"Messaging platform unreachable: {type(exc).__name__}"
                )
                never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                delay = self._unreached_retry_delay(attempt, method != "POST" or never_sent)
                if delay is None:
                    raise unreachable from exc
                await self._sleep(delay)
                continue
            if response.is_success:
                try:
                    return response.json()
                except ValueError as exc:
                    raise PlatformUnavailable(
                        "Messaging platform answered with invalid JSON"
                    ) from exc
            try:
                body = response.json()
            except ValueError:
                body = None
            error = from_error_body(body, response.status_code, _retry_after(response))
            delay = self._retry_delay(error, attempt, response.status_code)
            if delay is None:
                raise error
            await self._sleep(delay)

    def _unreached_retry_delay(self, attempt: int, repeatable: bool) -> float | None:
        """How long to wait before trying again a request that got no answer; None: raise.
        Only a `repeatable` one is tried again: a read, or a send that never left (one that
        may have reached the platform is never sent twice)."""
        if not repeatable or attempt >= self.retry.attempts:
            return None
        return self.retry.backoff(attempt, None)

    def _retry_delay(self, error: WhatsAppError, attempt: int, status: int) -> float | None:
        """How long to wait before sending a refused request again; None: raise the error
        (not retryable, attempts spent, or throttling the caller's send governor handles)."""
        governed = not self._retry_throttling and isinstance(
            error, ThroughputExceeded | PairRateLimited
        )
        if not error.retryable or governed or attempt >= self.retry.attempts:
            return None
        delay = self.retry.backoff(attempt, error.retry_after)
        logger.info(
            "platform asked to retry",
            status=status,
            code=error.code,
            attempt=attempt,
            delay=round(delay, 3),
        )
        return delay

    def _same_origin(self, url: str) -> bool:
        return urlsplit(url)[:2] == self._origin

    # --- templates ---------------------------------------------------------------------

    async def create_template(
        self, business_account_id: str, spec: TemplateSpec
    ) -> CreatedTemplate:
        body = await self._request(
            "POST",
            f"{self.root}/{business_account_id}/message_templates",
            json={
                "name": spec.name,
                "language": spec.language,
                "category": spec.category,
                "components": spec.components,
            },
        )
        return CreatedTemplate(
            id=str(body["id"]),
            status=str(body.get("status", "PENDING")),
            category=str(body.get("category", spec.category)),
        )

    async def list_templates(self, business_account_id: str) -> list[PlatformTemplate]:
        url: str | None = f"{self.root}/{business_account_id}/message_templates"
        params: dict[str, Any] | None = {
            "fields": "id,name,language,category,status,components,quality_score,rejected_reason",
            "limit": PAGE_SIZE,
        }
        templates: list[PlatformTemplate] = []
        for _page in range(MAX_PAGES):
            if url is None:
                return templates
            body = await self._request("GET", url, params=params)
            templates.extend(_platform_template(item) for item in body.get("data", []))
            following = (body.get("paging") or {}).get("next")
            # `next` is a full URL with the query already in it; never send the token elsewhere.
            if isinstance(following, str) and self._same_origin(following):
                url, params = following, None
            else:
                url = None
        raise PlatformUnavailable(f"Template listing did not end after {MAX_PAGES} pages")

    async def delete_template(
        self, business_account_id: str, name: str, platform_template_id: str | None
    ) -> None:
        params = {"name": name}
        if platform_template_id:
            params["hsm_id"] = platform_template_id
        await self._request(
            "DELETE", f"{self.root}/{business_account_id}/message_templates", params=params
        )

    async def browse_library(self, filters: LibraryFilters) -> list[dict[str, Any]]:
        body = await self._request(
            "GET", f"{self.root}/message_template_library", params=filters.as_query()
        )
        data = body.get("data", [])
        return [item for item in data if isinstance(item, dict)]

    # --- phone numbers -----------------------------------------------------------------

    async def phone_number(self, phone_number_id: str) -> PhoneNumber:
        """The phone number node, as this token sees it. The platform refuses a token that
        may not read it (code 100, subcode 33: the object "does not exist, cannot be loaded
        due to missing permissions"); an id of another kind of object answers without a
        `display_phone_number`, which is refused here the same way."""
        body = await self._request(
            "GET",
            f"{self.root}/{phone_number_id}",
            params={"fields": "id,display_phone_number,verified_name"},
        )
        found = body if isinstance(body, dict) else {}
        display, name = found.get("display_phone_number"), found.get("verified_name")
        is_number = isinstance(display, str) and bool(display)
        if str(found.get("id", "")) != phone_number_id or not is_number:
            raise InvalidParameter(
                f"Object with ID '{phone_number_id}' is not a phone number", code=100
            )
        return PhoneNumber(phone_number_id, str(display), name if isinstance(name, str) else None)

    # --- messages ----------------------------------------------------------------------

    async def _send(self, phone_number_id: str, payload: dict[str, Any]) -> SentMessage:
        body = await self._request(
            "POST",
            f"{self.root}/{phone_number_id}/messages",
            json={"messaging_product": "whatsapp", "recipient_type": "individual", **payload},
        )
        return sent_message_of(body, str(payload.get("to") or payload.get("recipient")))

    async def send_text(self, phone_number_id: str, to: str, body: str) -> SentMessage:
        """`to`: a phone number, or a business-scoped user id (sent as `recipient`)."""
        return await self._send(
            phone_number_id,
            {**recipient_fields(to), "type": "text", "text": {"preview_url": False, "body": body}},
        )

    async def send_template(
        self, phone_number_id: str, to: str, template: TemplateMessage
    ) -> SentMessage:
        return await self._send(phone_number_id, template_message_payload(to, template))


def template_message_payload(to: str, template: TemplateMessage) -> dict[str, Any]:
    """The messages endpoint's body for one template message (without the envelope fields
    `messaging_product` and `recipient_type`)."""
    payload: dict[str, Any] = {"name": template.name, "language": {"code": template.language}}
    if template.body_parameters:
        payload["components"] = [
            {
                "type": "body",
                "parameters": [{"type": "text", "text": text} for text in template.body_parameters],
            }
        ]
    return {**recipient_fields(to), "type": "template", "template": payload}


def sent_message_of(body: Any, to: str) -> SentMessage:
    """The platform's answer to an accepted send, or WhatsAppError when it names no message."""
    try:
        message_id = str(body["messages"][0]["id"])
    except (KeyError, IndexError, TypeError) as exc:
        raise WhatsAppError("Messaging platform accepted the message without an id") from exc
    contacts = body.get("contacts") or [{}]
    first = contacts[0] if isinstance(contacts[0], dict) else {}
    return SentMessage(
        message_id, str(first.get("wa_id") or first.get("user_id") or to.lstrip("+"))
    )


def _platform_template(item: dict[str, Any]) -> PlatformTemplate:
    quality = item.get("quality_score")
    score = quality.get("score") if isinstance(quality, dict) else quality
    score = score if score in ("GREEN", "YELLOW", "RED") else ""
    reason = item.get("rejected_reason")
    return PlatformTemplate(
        id=str(item["id"]),
        name=str(item["name"]),
        language=str(item.get("language", "")),
        category=str(item.get("category", "")),
        status=str(item.get("status", "PENDING")),
        components=list(item.get("components") or []),
        quality_score=score,
        rejected_reason=reason if isinstance(reason, str) and reason != "NONE" else None,
    )
