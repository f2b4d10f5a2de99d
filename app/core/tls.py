"""One TLS client context per process, shared by every outbound HTTP client.

Building a context loads the whole CA bundle: about 28 ms of CPU, which each new
`httpx.AsyncClient` (a channel check, a campaign run, a carrier client) would otherwise spend
again. A context is safe to share between clients and threads; it holds no connection.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_tls_context() -> ssl.SSLContext:
    """The verifying context httpx would build by default (certifi's bundle, or
    `SSL_CERT_FILE`/`SSL_CERT_DIR` when set), built once."""
    return httpx.create_ssl_context()
