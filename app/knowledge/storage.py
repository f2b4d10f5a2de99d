"""Object storage behind one interface: local files (`file://`) or S3-compatible (`s3://`).

Keys are built by the service (`knowledge/<organization>/<document>/<safe name>`); the stores
still refuse any key whose segments are not plain names, so no key can walk out of the root.
Objects are written whole or not at all: the local store writes a temporary file and renames
it, S3 publishes an object only when its upload completes.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import urlsplit

CHUNK_BYTES = 64 * 1024
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")


class ObjectMissing(Exception):
    """The key names no stored object."""


def check_key(key: str) -> list[str]:
    """The key's segments, or ValueError when any is not a plain name (no `..`, no `/x`)."""
    segments = key.split("/")
    if not segments or any(
        not _SEGMENT.fullmatch(part) or part.strip(".") == "" for part in segments
    ):
        raise ValueError(f"invalid object key: {key!r}")
    return segments


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object being read: its size, and its bytes as they arrive."""

    size: int
    chunks: AsyncIterator[bytes]


class ObjectStore(Protocol):
    async def put(self, key: str, source: IO[bytes], content_type: str) -> int:
        """Store the readable `source` (from its current position) under `key`; its size."""

    async def open(self, key: str) -> StoredObject:
        """The object for streaming out, or ObjectMissing."""

    async def delete(self, key: str) -> None:
        """Remove the object; a missing one is not an error (deletes are retried)."""

    async def exists(self, key: str) -> bool: ...

    def local_copy(self, key: str) -> AbstractAsyncContextManager[Path]:
        """A local file holding the object for the duration of the block (extraction)."""


class LocalObjectStore:
    """Objects as files under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key))

    async def put(self, key: str, source: IO[bytes], content_type: str) -> int:
        return await asyncio.to_thread(self._put, self.path(key), source)

    def _put(self, target: Path, source: IO[bytes]) -> int:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.part")
        try:
            with temporary.open("xb") as handle:
                shutil.copyfileobj(source, handle, CHUNK_BYTES)
                handle.flush()
                os.fsync(handle.fileno())
                size = handle.tell()
            os.replace(temporary, target)
        except BaseException:
            self._delete(temporary)
            raise
        return size

    async def open(self, key: str) -> StoredObject:
        path = self.path(key)
        try:
            handle = await asyncio.to_thread(path.open, "rb")
        except FileNotFoundError as exc:
            raise ObjectMissing(key) from exc
        size = os.fstat(handle.fileno()).st_size
        return StoredObject(size, _read_file(handle, size))

    async def delete(self, key: str) -> None:
        path = self.path(key)
        await asyncio.to_thread(self._delete, path)

    def _delete(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        # Drop the emptied per-document and per-organization folders, never the root.
        for parent in path.parents:
            if parent == self.root or self.root not in parent.parents:
                break
            try:
                parent.rmdir()
            except OSError:
                break

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self.path(key).is_file)

    @asynccontextmanager
    async def local_copy(self, key: str) -> AsyncIterator[Path]:
        path = self.path(key)
        if not await asyncio.to_thread(path.is_file):
            raise ObjectMissing(key)
        yield path


async def _read_file(handle: IO[bytes], size: int) -> AsyncIterator[bytes]:
    """Exactly `size` bytes (the size announced as Content-Length), then the file is closed."""
    try:
        remaining = size
        while remaining > 0:
            chunk = await asyncio.to_thread(handle.read, min(CHUNK_BYTES, remaining))
            if not chunk:
                raise ObjectMissing("object shrank while being read")
            remaining -= len(chunk)
            yield chunk
    finally:
        handle.close()


class S3ObjectStore:
    """Objects in an S3-compatible bucket (aioboto3, the `s3` extra), under a key prefix.

    The endpoint comes from `AWS_ENDPOINT_URL` (MinIO, moto, R2, ...); credentials from the
    standard AWS chain. One client per operation: uploads and downloads are rare next to
    their own transfer time.
    """

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None) -> None:
        try:
            import aioboto3
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise RuntimeError(
                "s3:// storage needs the optional extra: pip install 'switchboard[s3]'"
            ) from exc
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self._session = aioboto3.Session()

    def _client(self) -> Any:
        return self._session.client("s3", endpoint_url=self.endpoint_url)

    def object_name(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    async def put(self, key: str, source: IO[bytes], content_type: str) -> int:
        name = self.object_name(key)
        start = source.tell()
        async with self._client() as client:
            await client.upload_fileobj(
                source, self.bucket, name, ExtraArgs={"ContentType": content_type}
            )
        return source.tell() - start

    async def open(self, key: str) -> StoredObject:
        name = self.object_name(key)
        client_context = self._client()
        client = await client_context.__aenter__()
        try:
            response = await client.get_object(Bucket=self.bucket, Key=name)
        except client.exceptions.NoSuchKey as exc:
            await client_context.__aexit__(None, None, None)
            raise ObjectMissing(key) from exc
        except BaseException:
            await client_context.__aexit__(None, None, None)
            raise
        return StoredObject(
            int(response["ContentLength"]), _read_body(client_context, response["Body"])
        )

    async def delete(self, key: str) -> None:
        async with self._client() as client:
            await client.delete_object(Bucket=self.bucket, Key=self.object_name(key))

    async def exists(self, key: str) -> bool:
        async with self._client() as client:
            try:
                await client.head_object(Bucket=self.bucket, Key=self.object_name(key))
            except client.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise
        return True

    @asynccontextmanager
    async def local_copy(self, key: str) -> AsyncIterator[Path]:
        stored = await self.open(key)
        with tempfile.TemporaryDirectory(prefix="switchboard-object-") as directory:
            path = Path(directory) / "object"
            with path.open("wb") as handle:
                async for chunk in stored.chunks:
                    await asyncio.to_thread(handle.write, chunk)
            yield path


async def _read_body(client_context: Any, body: Any) -> AsyncIterator[bytes]:
    try:
        while chunk := await body.read(CHUNK_BYTES):
            yield chunk
    finally:
        body.close()
        await client_context.__aexit__(None, None, None)


def build_object_store(url: str, *, s3_endpoint_url: str | None = None) -> ObjectStore:
    """The store a `SWITCHBOARD_STORAGE_URL` names: `file://PATH` or `s3://bucket/prefix`."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        # file://./var/objects (relative) and file:///srv/objects (absolute) both work.
        return LocalObjectStore(Path(parts.netloc + parts.path).resolve())
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"storage URL {url!r} names no bucket")
        return S3ObjectStore(parts.netloc, parts.path, s3_endpoint_url)
    raise ValueError(f"unsupported storage URL {url!r}: use file://PATH or s3://bucket/prefix")
