"""Both object stores keep the same promises: whole objects, exact bytes, safe keys."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.knowledge.storage import (
    LocalObjectStore,
    ObjectMissing,
    ObjectStore,
    S3ObjectStore,
    build_object_store,
    check_key,
)
from tests.knowledge.s3server import running_s3

KEY = "knowledge/org-1/doc-1/report.pdf"


@pytest.fixture(params=["file", "s3"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ObjectStore]:
    if request.param == "file":
        yield build_object_store(f"file://{tmp_path / 'objects'}")
        return
    with running_s3(monkeypatch) as endpoint:
        yield build_object_store("s3://switchboard/uploads", s3_endpoint_url=endpoint)


async def _read(store: ObjectStore, key: str) -> tuple[int, bytes]:
    stored = await store.open(key)
    return stored.size, b"".join([chunk async for chunk in stored.chunks])


async def test_round_trip_is_byte_identical(store: ObjectStore) -> None:
    data = bytes(range(256)) * 1000  # several read chunks, every byte value
    source = io.BytesIO(b"ignored prefix" + data)
    source.seek(len(b"ignored prefix"))
    assert await store.put(KEY, source, "application/pdf") == len(data)
    assert await store.exists(KEY)
    assert await _read(store, KEY) == (len(data), data)
    async with store.local_copy(KEY) as path:
        assert path.read_bytes() == data


async def test_delete_is_idempotent(store: ObjectStore) -> None:
    await store.put(KEY, io.BytesIO(b"x"), "text/plain")
    await store.delete(KEY)
    await store.delete(KEY)
    assert not await store.exists(KEY)
    with pytest.raises(ObjectMissing):
        await store.open(KEY)


async def test_missing_object(store: ObjectStore) -> None:
    with pytest.raises(ObjectMissing):
        await store.open("knowledge/none/none/none.txt")
    assert not await store.exists("knowledge/none/none/none.txt")


@pytest.mark.parametrize(
    "key", ["../etc/passwd", "a/../../b", "/abs/path", "a//b", "a/./b", "", "a/b\\c", "a/.."]
)
def test_keys_that_could_escape_are_refused(key: str) -> None:
    with pytest.raises(ValueError):
        check_key(key)


def _entries(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() or not any(path.iterdir())]


async def test_local_store_leaves_no_partial_file_or_empty_folders(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)

    class Exploding(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            raise OSError("disk gone")

    with pytest.raises(OSError):
        await store.put(KEY, Exploding(), "application/pdf")
    assert _entries(tmp_path) == []
    await store.put(KEY, io.BytesIO(b"ok"), "application/pdf")
    await store.delete(KEY)
    assert _entries(tmp_path) == []


def test_storage_urls() -> None:
    local = build_object_store("file://./var/objects")
    assert isinstance(local, LocalObjectStore)
    assert local.root == Path("var/objects").resolve()
    s3 = build_object_store("s3://bucket/some/prefix/")
    assert isinstance(s3, S3ObjectStore)
    assert s3.object_name("a/b.pdf") == "some/prefix/a/b.pdf"
    with pytest.raises(ValueError):
        build_object_store("ftp://example/x")
    with pytest.raises(ValueError):
        build_object_store("s3:///nobucket")
