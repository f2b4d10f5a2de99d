"""A TCP proxy on loopback that can go silent: a network partition, as the client sees it.

While `frozen`, the proxy keeps every connection open and accepts new ones, but passes no byte
either way: the client's socket stays half-open, with no error and no end, exactly what a
partitioned network or a vanished host looks like until a timeout notices.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class SilentableProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.frozen = False
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def freeze(self) -> None:
        self.frozen = True
        self._thawed.clear()

    def thaw(self) -> None:
        self.frozen = False
        self._thawed.set()

    def sever(self) -> None:
        """Reset every open connection (a restarted server, as its clients see it); new ones
        are accepted as before."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        await self._thawed.wait()  # a frozen proxy accepts and then says nothing
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(upstream_writer)
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                await self._thawed.wait()  # bytes read while frozen are held, never lost
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


@asynccontextmanager
async def silentable_proxy(host: str, port: int) -> AsyncIterator[SilentableProxy]:
    proxy = SilentableProxy(host, port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
