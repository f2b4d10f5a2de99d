"""A real HTTP receiver on loopback for delivery tests: scripted answers, every request kept."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)  # when it arrived (epoch seconds)

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Answer:
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"


class Receiver:
    """Answers requests with `script` in order (then `default`), and records them."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self._lock = threading.Lock()
        self.script: list[Answer] = []
        self.default = Answer()
        self.requests: list[Received] = []

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def next_answer(self, received: Received) -> Answer:
        with self._lock:
            self.requests.append(received)
            return self.script.pop(0) if self.script else self.default

    def wait_for(self, count: int, seconds: float = 10.0) -> list[Received]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.01)
        raise AssertionError(f"expected {count} requests, got {len(self.requests)}")

    def of_type(self, event_type: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.headers.get("x-service-event") == event_type]


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            received = Received(
                self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)
            )
            answer = receiver.next_answer(received)
            if answer.delay:
                time.sleep(answer.delay)
            try:
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender gave up (timeout)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = Receiver(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
