"""Replies from an OpenAI-compatible endpoint (agent_config.llm_base_url), against a local
fake speaking the chat completions wire format; any failure falls back to the deterministic
responder."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.agents.config import AgentConfig
from app.calls.conversation import Passage, ToolResult, simulate
from app.calls.llm import chat_reply
from app.calls.tools import ToolCaller
from tests.calls.fake_carrier import ServedApp

FACT = "Our support line is open Monday to Friday from 8 am to 6 pm."


class FakeChat:
    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.answer: Response = JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": "We're open 8 to 6,\n weekdays.",
                        },
                        "finish_reason": "stop",
                    }
                ],
            }
        )

    async def completions(self, request: Request) -> Response:
        self.bodies.append(await request.json())
        return self.answer


@pytest.fixture(scope="module")
def chat() -> Iterator[tuple[FakeChat, str]]:
    fake = FakeChat()
    served = ServedApp(
        Starlette(routes=[Route("/v1/chat/completions", fake.completions, methods=["POST"])])
    )
    url = served.start()
    yield fake, f"{url}/v1"
    served.stop()


async def play(config: dict[str, Any], caller: ToolCaller) -> tuple[list[str], list[Any]]:
    async def lookup(question: str) -> list[Passage]:
        return [Passage(FACT, "doc-1", "support.txt")]

    async def no_tool(tool: dict[str, Any], arguments: dict[str, Any]) -> ToolResult:
        raise AssertionError("no tool here")

    async def reply(question: str, passages: Any) -> str | None:
        return await chat_reply(caller, config, question, passages)

    played = await simulate(
        agent={"name": "Ava", "config": config},
        script=["When is the support line open?"],
        lookup=lookup,
        run_tool=no_tool,
        call={"call_log_id": "c"},
        reply=reply,
    )
    return [segment["text"] for segment in played.transcript], played.events


async def test_the_model_writes_the_reply(chat: tuple[FakeChat, str]) -> None:
    fake, base_url = chat
    config = AgentConfig(
        llm_base_url=base_url, system_prompt="You are Ava of Acme.", temperature=0.2
    ).normalized()
    caller = ToolCaller(allow_private=True, timeout=2)
    try:
        texts, events = await play(config, caller)
    finally:
        await caller.aclose()
    assert texts[2] == "We're open 8 to 6, weekdays."
    [(_type, data)] = events
    assert data["source"] == "llm"
    assert data["document_id"] == "doc-1"
    body = fake.bodies[-1]
    assert body["model"] == "gpt-4o-mini"
    assert body["temperature"] == 0.2
    assert body["messages"][1] == {"role": "user", "content": "When is the support line open?"}
    assert body["messages"][0]["content"].startswith("You are Ava of Acme.")
    assert FACT in body["messages"][0]["content"]


async def test_a_failing_or_refused_model_falls_back(chat: tuple[FakeChat, str]) -> None:
    fake, base_url = chat
    config = AgentConfig(llm_base_url=base_url).normalized()
    fake.answer = JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
    caller = ToolCaller(allow_private=True, timeout=2)
    guarded = ToolCaller(allow_private=False, timeout=2)
    try:
        failed, _ = await play(config, caller)
        calls_before = len(fake.bodies)
        refused, _ = await play(config, guarded)  # loopback: refused before any request
    finally:
        await caller.aclose()
        await guarded.aclose()
    assert failed[2] == FACT
    assert refused[2] == FACT
    assert len(fake.bodies) == calls_before
