"""The app served by a real uvicorn, for clients that need a socket (fuzzers, browsers)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class ServerThread:
    """uvicorn.Server with its own event loop in a daemon thread, on a free port."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, lifespan="on", log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn stopped during startup")
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start within 20 s")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
