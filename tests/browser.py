"""Headless Chromium, driven over the DevTools protocol, with every outside host blocked.

The service's own pages (GraphiQL, the REST reference) must work with no network but the
service's: Chromium resolves every host but 127.0.0.1 to nothing, and each test checks the
URLs the page asked for. Chromium is Debian's `chromium` (.ci/run installs it when missing);
without it the browser tests skip, or fail under REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import service_unavailable

# Where screenshots go (the pages as a person sees them); unset: the test's tmp_path.
SCREENSHOT_DIR_VARIABLE = "SWITCHBOARD_SCREENSHOT_DIR"
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")
_LOCAL = ("http://127.0.0.1:", "data:", "blob:", "about:", "chrome-error:")


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    service_unavailable("Chromium", FileNotFoundError("no chromium on PATH"))
    raise AssertionError("unreachable")


class Page:
    """One tab: navigate, evaluate, wait for a condition, screenshot; every URL requested."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse, session_id: str) -> None:
        self._socket = socket
        self._session_id = session_id
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.requested: list[str] = []
        self.console_errors: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self._socket:
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            method = data.get("method")
            params = data.get("params", {})
            if method == "Network.requestWillBeSent":
                self.requested.append(params["request"]["url"])
            elif method == "Runtime.exceptionThrown":
                self.console_errors.append(json.dumps(params["exceptionDetails"])[:500])

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        command_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[command_id] = future
        await self._socket.send_json(
            {"id": command_id, "sessionId": self._session_id, "method": method, "params": params}
        )
        answer = await asyncio.wait_for(future, 30)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, seconds: float = 20.0) -> None:
        """Until `expression` is truthy in the page (polled)."""
        deadline = asyncio.get_running_loop().time() + seconds
        while True:
            with contextlib.suppress(RuntimeError):  # e.g. mid-navigation
                if await self.evaluate(expression):
                    return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"never true: {expression}; requested {self.requested}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", format="png")
        await asyncio.to_thread(_write, path, base64.b64decode(shot["data"]))
        return path

    def outside_requests(self) -> list[str]:
        """Requested URLs of any host but the service's."""
        return [url for url in self.requested if not url.startswith(_LOCAL)]


@contextlib.asynccontextmanager
async def browser_page(
    width: int = 1366, height: int = 900, extra_args: Sequence[str] = ()
) -> AsyncIterator[Page]:
    """A fresh headless Chromium (own profile) and one tab in it; `extra_args` are more
    command-line switches (a fake microphone, say)."""
    profile = tempfile.mkdtemp(prefix="sb-chromium-")
    process = await asyncio.create_subprocess_exec(
        chromium_path(),
        "--headless=new",
        "--no-sandbox",  # tests run as root in CI containers
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        # Every host but the service's resolves to nothing.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        *extra_args,
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        endpoint = None
        async with asyncio.timeout(20):
            while endpoint is None:
                line = (await process.stderr.readline()).decode(errors="replace")
                if not line:
                    raise RuntimeError("chromium exited before listening")
                found = _LISTENING.search(line)
                endpoint = found.group(1) if found else None
        drain = asyncio.create_task(_drain(process.stderr))
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(endpoint, max_msg_size=64 * 1024 * 1024) as socket,
        ):
            await socket.send_json(
                {"id": 1, "method": "Target.createTarget", "params": {"url": "about:blank"}}
            )
            target = await _answer(socket, 1)
            await socket.send_json(
                {
                    "id": 2,
                    "method": "Target.attachToTarget",
                    "params": {"targetId": target["targetId"], "flatten": True},
                }
            )
            attached = await _answer(socket, 2)
            page = Page(socket, attached["sessionId"])
            for domain in ("Page", "Network", "Runtime"):
                await page.send(f"{domain}.enable")
            try:
                yield page
            finally:
                page._reader.cancel()
        drain.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        shutil.rmtree(profile, ignore_errors=True)


async def _answer(socket: aiohttp.ClientWebSocketResponse, command_id: int) -> dict[str, Any]:
    async with asyncio.timeout(20):
        async for message in socket:
            data = json.loads(message.data)
            if data.get("id") == command_id:
                result: dict[str, Any] = data["result"]
                return result
    raise RuntimeError("the browser closed its socket")


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def screenshot_dir(tmp_path: Path) -> Path:
    configured = os.environ.get(SCREENSHOT_DIR_VARIABLE)
    return Path(configured) if configured else tmp_path
