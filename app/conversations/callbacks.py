"""`GET/POST /webhooks/whatsapp`: the messaging platform's webhook endpoint (outside /api/v1).

GET is Meta's subscription handshake: `hub.mode=subscribe` and `hub.verify_token` equal to
`SWITCHBOARD_WHATSAPP_VERIFY_TOKEN` answer `hub.challenge` as plain text; anything else 403.
POST carries the events, signed `X-Hub-Signature-256` with the app secret over the raw body;
a bad or missing signature is 403 and nothing is stored.
"""

from __future__ import annotations

import hmac

import structlog
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from app.conversations.inbound import PayloadInvalid, SignatureInvalid, handle_signed
from app.integrations.whatsapp.payloads import SIGNATURE_HEADER
from app.kit.http_errors import json_response
from app.resources import Resources

logger = structlog.get_logger("switchboard.whatsapp.inbound")
PATH = "/webhooks/whatsapp"
# Meta's bodies are small; a bigger one is not from the platform.
MAX_BODY_BYTES = 1024 * 1024
MAX_CHALLENGE_LENGTH = 256


async def verify(request: Request) -> Response:
    resources: Resources = request.app.state.resources
    expected = resources.settings.whatsapp_verify_token
    query = request.query_params
    token = query.get("hub.verify_token", "")
    challenge = query.get("hub.challenge", "")
    if (
        expected
        and query.get("hub.mode") == "subscribe"
        and hmac.compare_digest(token.encode(), expected.encode())
        and 0 < len(challenge) <= MAX_CHALLENGE_LENGTH
    ):
        return PlainTextResponse(challenge)
    return json_response({"detail": "Verification failed"}, 403)


async def receive(request: Request) -> Response:
    resources: Resources = request.app.state.resources
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        return json_response({"detail": "Body too large"}, 413)
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        return json_response({"detail": "Body too large"}, 413)
    try:
        await handle_signed(resources, body, request.headers.get(SIGNATURE_HEADER))
    except SignatureInvalid:
        logger.warning("webhook with an invalid signature refused")
        return json_response({"detail": "Invalid signature"}, 403)
    except PayloadInvalid:
        return json_response({"detail": "Body is not valid JSON"}, 400)
    return json_response({"status": "ok"})


ROUTES = [
    Route(PATH, verify, methods=["GET"]),
    Route(PATH, receive, methods=["POST"]),
]
