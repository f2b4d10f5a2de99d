"""Request bodies, read with a size limit while they stream in, for REST and /graphql alike.

Starlette's `request.body()` reads a body whole, whatever its size. Here the bytes are counted
as each `http.request` message arrives and reading stops at the limit, so a 10 MB body costs
at most limit bytes of memory; a `Content-Length` over the limit is refused before reading.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive

from app.kit.errors import DomainError

JSON_MEDIA_TYPE = "application/json"


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
