"""Request bodies, bounded while they stream in, on every route.

Starlette's `request.body()` reads a body whole, whatever its size. Two layers stop that:

- `BodyLimitMiddleware` (pure ASGI, around every route) knows each route's limit
  (`BodyLimit`): a `Content-Length` over it is answered 413 before the route runs, and a
  chunked body is counted as each `http.request` message arrives: the message that passes the
  limit is never handed on, the 413 goes out at once and the route sees the client gone. So a
  route that reads its body whole (a platform callback) never holds more than its limit,
  whatever it does.
- `read_body` gives REST and /graphql the body within their limit, with the same counting, so
  they also hold without the middleware (an app built from the routes alone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.kit.errors import DomainError

JSON_MEDIA_TYPE = "application/json"
# Platform callbacks (WhatsApp, the carrier): their bodies are small; a bigger one is not from
# the platform.
PLATFORM_CALLBACK_MAX_BYTES = 1024 * 1024
# The largest websocket message read (GraphQL subscriptions): a bigger one closes the socket
# (1009) unparsed. `switchboard serve` gives it to uvicorn, app/graphql/view.py enforces it.
WEBSOCKET_MAX_MESSAGE_BYTES = 1024 * 1024


class BodyTooLarge(DomainError):
    code = "body_too_large"
    status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body is larger than the limit of {limit} bytes")
        self.limit = limit


class UnsupportedMediaType(DomainError):
    code = "unsupported_media_type"
    status = 415

    def __init__(self, expected: str = JSON_MEDIA_TYPE) -> None:
        super().__init__(f"Content-Type must be {expected}")


@dataclass(frozen=True, slots=True)
class BodyLimit:
    """The most bytes a route reads from a request body, and its answer beyond (a 413 in the
    route's own error shape)."""

    max_bytes: int
    refusal: Callable[[], Response]


class BodyLimitMiddleware:
    """Bounds every request body to its route's limit before anything reads it."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[Scope], BodyLimit]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, chunked = _framing(scope["headers"])
        if declared is None and not chunked:
            await self.app(scope, receive, send)  # no body (HTTP/1.1 framing): nothing to bound
            return
        limit = self.limit_for(scope)
        if declared is not None and declared > limit.max_bytes:
            await _refuse(limit, scope, receive, send)
            return
        bounded = _BoundedBody(limit, scope, receive, send)
        try:
            await self.app(scope, bounded.receive, bounded.send)
        except Exception:
            if not bounded.refused:
                raise
            # The route failed on the body it never got whole (ClientDisconnect, mostly):
            # the 413 is its answer.


def _framing(raw_headers: list[tuple[bytes, bytes]]) -> tuple[int | None, bool]:
    """The announced Content-Length (None: none, or not a number) and whether the body is
    chunked."""
    declared: int | None = None
    chunked = False
    for name, value in raw_headers:
        if name == b"content-length":
            declared = int(value) if value.isdigit() else None
        elif name == b"transfer-encoding":
            chunked = True
    return declared, chunked


async def _refuse(limit: BodyLimit, scope: Scope, receive: Receive, send: Send) -> None:
    response = limit.refusal()
    # The rest of the body is never read: the connection cannot carry another request.
    response.headers["Connection"] = "close"
    await response(scope, receive, send)


class _BoundedBody:
    """The route's view of the body: at most the limit, then a disconnect (the 413 is sent
    the moment the limit is passed, unless the route had already begun its answer)."""

    def __init__(self, limit: BodyLimit, scope: Scope, receive: Receive, send: Send) -> None:
        self._limit = limit
        self._scope = scope
        self._receive = receive
        self._send = send
        self._received = 0
        self._started = False
        self.refused = False

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if self._received > self._limit.max_bytes:
                self.refused = True
                if not self._started:
                    self._started = True
                    await _refuse(self._limit, self._scope, self._receive, self._send)
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.refused:
            return  # the route's answer to a body it never got whole: the 413 went instead
        if message["type"] == "http.response.start":
            self._started = True
        await self._send(message)


def _declared_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    if value is None or not value.isdigit():
        return None  # the server already refuses malformed lengths; chunked bodies have none
    return int(value)


async def read_body(receive: Receive, headers: Headers, limit: int) -> bytes:
    """The whole body, or BodyTooLarge as soon as more than `limit` bytes are announced or
    have arrived. ClientDisconnect when the caller leaves before the end."""
    declared = _declared_length(headers)
    if declared is not None and declared > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk: bytes = message.get("body", b"")
        received += len(chunk)
        if received > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands out a body already read, then defers to the real one."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def is_json_media_type(content_type: str | None) -> bool:
    """`application/json`, optionally with `charset=utf-8` (JSON is UTF-8, RFC 8259 §8.1).

    Any other parameter or charset, `text/plain`, `application/xml`, multipart or a missing
    header is not JSON to this service.
    """
    if content_type is None:
        return False
    media_type, _, parameters = content_type.partition(";")
    if media_type.strip().lower() != JSON_MEDIA_TYPE:
        return False
    for parameter in parameters.split(";"):
        if not parameter.strip():
            continue
        name, _, value = parameter.partition("=")
        if name.strip().lower() != "charset" or value.strip().strip('"').lower() not in (
            "utf-8",
            "utf8",
        ):
            return False
    return True
