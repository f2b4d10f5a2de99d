"""A local OpenAI-compatible `/v1/embeddings` server, and a deterministic embedder.

The fake answers the real wire format: `{"object": "list", "data": [{"object": "embedding",
"index": i, "embedding": [...]}], "model": ..., "usage": {...}}`, items in any order.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from app.knowledge.embeddings import Matrix, normalized

DIMENSIONS = 64
_WORD = re.compile(r"[a-z0-9]+")


def hashed_vector(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """Bag of hashed words (and their 4-letter prefixes, a crude stemmer): texts sharing words
    point the same way. Deterministic, no model needed."""
    vector = np.zeros(dimensions, dtype=np.float32)
    for word in _WORD.findall(text.lower()):
        for feature in (word, word[:4]):
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            vector[int.from_bytes(digest[:4], "little") % dimensions] += 1.0
    return [float(x) for x in vector]


class HashingEmbedder:
    """The deterministic embedder CI uses to test fusion without a model."""

    model = "test-hashing-64"
    enabled = True

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(list(texts))
        return normalized([hashed_vector(text) for text in texts])


@dataclass
class FakeEmbeddingsServer:
    server: ThreadingHTTPServer
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    status: int = 200
    body_override: bytes | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1/embeddings"


@contextmanager
def running_fake_embeddings() -> Iterator[FakeEmbeddingsServer]:
    state: FakeEmbeddingsServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            payload = json.loads(self.rfile.read(length))
            state.requests.append(payload)
            state.headers.append({k.lower(): v for k, v in self.headers.items()})
            if state.body_override is not None or state.status != 200:
                body = state.body_override or b'{"error": {"message": "nope"}}'
                self._answer(state.status, body)
                return
            items = [
                {"object": "embedding", "index": index, "embedding": hashed_vector(text)}
                for index, text in enumerate(payload["input"])
            ]
            items.reverse()  # clients must order by index, not by position
            body = {
                "object": "list",
                "data": items,
                "model": payload["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
            self._answer(200, json.dumps(body).encode())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = FakeEmbeddingsServer(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
