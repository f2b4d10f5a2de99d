"""Custom tools called during a call: the outbound URL guard at call time, timeouts, answer
extraction; and how the simulated agent picks a tool, its arguments and a knowledge answer."""

from __future__ import annotations

import asyncio

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.engine.knowledge import Passage
from app.engine.providers.offline import best_sentence, matching_tool, tool_arguments
from app.engine.tools.http import ToolCaller, ToolResult, answer_text
from app.engine.types import ToolSpec
from tests.calls.fake_carrier import ServedApp
from tests.webhooks.receiver import Answer, running_receiver

ORDER_TOOL = {
    "name": "order_status",
    "description": "Where an order is",
    "url": "https://tools.example.com/orders",
    "method": "GET",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "quantity": {"type": "integer"}},
    },
}


async def test_private_tool_urls_are_refused_at_call_time() -> None:
    with running_receiver() as server:
        tool = {**ORDER_TOOL, "url": f"{server.url}/orders"}
        guarded = ToolCaller(allow_private=False, timeout=2)
        try:
            refused = await guarded(tool, {"order_id": "1"})
        finally:
            await guarded.aclose()
        assert server.requests == []

    async def rebinding(host: str, port: int) -> list[str]:
        return ["10.0.0.7"]  # a public-looking name that now resolves to a private address

    caller = ToolCaller(allow_private=False, timeout=2, resolver=rebinding)
    try:
        rebound = await caller(ORDER_TOOL, {})
    finally:
        await caller.aclose()
    for result in (refused, rebound):
        assert not result.success
        assert result.error is not None
        assert result.error.startswith("refused:")


async def test_tool_answers_timeouts_and_errors() -> None:
    seen: list[str] = []

    async def orders(request: Request) -> Response:
        seen.append(str(request.url.query))
        order_id = request.query_params.get("order_id")
        if order_id == "slow":
            await asyncio.sleep(1.5)
        if order_id == "42":
            return JSONResponse({"result": "shipped", "eta": "Friday"})
        return JSONResponse({"error": "no such order"}, status_code=404)

    served = ServedApp(Starlette(routes=[Route("/orders", orders, methods=["GET"])]))
    url = served.start()
    tool = {**ORDER_TOOL, "url": f"{url}/orders"}
    caller = ToolCaller(allow_private=True, timeout=0.5)
    try:
        answered = await caller(tool, {"order_id": "42", "quantity": 2})
        slow = await caller(tool, {"order_id": "slow"})
        missing = await caller(tool, {"order_id": "0"})
    finally:
        await caller.aclose()
        served.stop()
    assert answered == ToolResult(success=True, answer="shipped", status_code=200)
    assert seen[0] == "order_id=42&quantity=2"
    assert not slow.success
    assert slow.error == "timeout"
    assert missing == ToolResult(success=False, answer="", status_code=404, error="HTTP 404")


async def test_post_tools_receive_json_arguments() -> None:
    with running_receiver() as server:
        server.default = Answer(body=b"Plain text answer")
        caller = ToolCaller(allow_private=True, timeout=2)
        try:
            result = await caller(
                {**ORDER_TOOL, "method": "POST", "url": server.url}, {"order_id": "7"}
            )
        finally:
            await caller.aclose()
        [request] = server.requests
    assert result.answer == "Plain text answer"
    assert orjson.loads(request.body) == {"order_id": "7"}


def test_answer_text() -> None:
    assert answer_text(b'{"answer": "yes"}') == "yes"
    assert answer_text(b'{"count": 3}') == '{"count":3}'
    assert answer_text(b'"quoted"') == "quoted"
    assert answer_text(b"x" * 1000) == "x" * 500


def test_tool_matching_and_arguments() -> None:
    order = ToolSpec("order_status", "Orders", ORDER_TOOL["parameters"], "custom")  # type: ignore[arg-type]
    other = ToolSpec("book_table", "Tables", {"type": "object"}, "custom")
    assert matching_tool("What's the status of my orders?", [other, order]) is order
    assert matching_tool("Can I book a table for two?", [order, other]) is other
    assert matching_tool("What are your hours?", [order, other]) is None
    parameters = order.parameters
    assert tool_arguments("Where is order 55-12, I need 3?", parameters) == {
        "order_id": "55-12",
        "quantity": 5512,
    }
    assert tool_arguments("Where is my order?", parameters) == {"order_id": "Where is my order?"}


def test_best_sentence_prefers_the_most_shared_words() -> None:
    passages = [
        Passage("We sell shoes. Returns are free within 30 days.", "d1", "a.txt"),
        Passage("Our store opens at 9 am on weekdays.", "d2", "b.txt"),
    ]
    sentence, passage = best_sentence("When does the store open on weekdays?", passages) or (
        "",
        None,
    )
    assert sentence == "Our store opens at 9 am on weekdays."
    assert passage is passages[1]
    assert best_sentence("Do you ship to Mars?", passages) is None
