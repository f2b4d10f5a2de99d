"""Outbound HTTP clients share one verifying TLS context (app/core/tls.py): building one
loads the whole CA bundle, which each new client (a channel check, a campaign run, a carrier
client) otherwise did again."""

from __future__ import annotations

import ssl

from app.core.tls import client_tls_context
from app.engine.tools.http import ToolCaller
from app.integrations.telephony.twilio import TwilioCarrier
from app.integrations.whatsapp.client import GraphApiClient


def test_the_context_verifies_certificates_and_host_names() -> None:
    context = client_tls_context()
    assert context is client_tls_context()
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0


async def test_new_clients_reuse_it() -> None:
    graph = GraphApiClient("https://graph.example", "token")
    carrier = TwilioCarrier("https://api.example", "AC123", "secret")
    tools = ToolCaller(allow_private=False, timeout=5.0)
    try:
        for client in (graph._http, carrier._client, tools._client):
            assert client._transport._pool._ssl_context is client_tls_context()
    finally:
        await graph.aclose()
        await carrier.aclose()
        await tools.aclose()
