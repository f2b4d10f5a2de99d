"""The providers' official SDKs against local fakes of their wire formats: streamed and whole
answers, tool calls assembled from deltas, usage, retries and failures, the URL guard, keys
sent (or not); and the MCP client against an MCP server built with the SDK, both transports."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from app.config import Settings
from app.engine.engine import EngineClients
from app.engine.net import guarded_client
from app.engine.providers.base import CompletionRequest, ProviderFailure
from app.engine.tools.builtins import TRANSFER_TO_HUMAN
from app.engine.tools.toolbox import Toolbox
from app.engine.turn import TurnLimits, run_turn
from app.engine.types import AgentProfile, Message, ToolSpec, Usage
from app.webhooks.ssrf import Resolver
from tests.conftest import make_settings
from tests.engine.fakes import FakeProviders, running_mcp_server, running_providers

ORDER_TOOL = ToolSpec(
    "order_status",
    "Where an order is",
    {"type": "object", "properties": {"order_id": {"type": "string"}}},
    "custom",
)


@pytest.fixture(scope="module")
def providers() -> Iterator[tuple[FakeProviders, str]]:
    with running_providers() as running:
        yield running


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[tuple[str, list[dict[str, object]]]]:
    with running_mcp_server() as running:
        yield running


def settings_for(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "allow_private_webhook_urls": True,
        "llm_retry_backoff_seconds": 0.0,
    }
    values.update(overrides)
    return make_settings("sqlite+aiosqlite://", tmp_path, **values)


@pytest.fixture
async def clients(tmp_path: Path) -> AsyncIterator[EngineClients]:
    made = EngineClients(settings_for(tmp_path))
    yield made
    await made.aclose()


def request(
    text: str, *, stream: bool, tools: tuple[ToolSpec, ...] = (ORDER_TOOL,)
) -> CompletionRequest:
    return CompletionRequest(
        system="You are Ava.",
        messages=[Message.user(text)],
        tools=tools,
        temperature=0.2,
        max_output_tokens=100,
        stream=stream,
    )


CASES = [
    ("openai", "/v1", "/v1/chat/completions"),
    ("groq", "", "/openai/v1/chat/completions"),
    ("anthropic", "", "/v1/messages"),
]


@pytest.mark.parametrize(("provider", "suffix", "path"), CASES)
@pytest.mark.parametrize("stream", [True, False])
async def test_tool_calls_text_and_usage(
    providers: tuple[FakeProviders, str],
    clients: EngineClients,
    provider: str,
    suffix: str,
    path: str,
    stream: bool,
) -> None:
    fake, url = providers
    fake.reset()
    config = {"llm_provider": provider, "llm_model": "m-1", "llm_base_url": url + suffix}
    model = clients.language_model(config, None)
    assert model is not None
    assert model.provider == provider
    asked = await model.complete(request("Where is my order 1234?", stream=stream))
    assert asked.text == ""
    [call] = asked.tool_calls
    assert (call.name, call.arguments) == ("order_status", {"order_id": "1234"})
    assert asked.usage == Usage(120, 30)
    answered = await model.complete(request("Hi there", stream=stream))
    assert answered.text == "Hello! How can I help you today?"
    assert not answered.tool_calls
    [first, _second] = fake.model_requests()
    assert first.path == path
    assert first.body["model"] == "m-1"
    assert bool(first.body.get("stream")) is stream
    # No organization key: the request carries no credential at all.
    assert "authorization" not in first.headers
    assert "x-api-key" not in first.headers


async def test_tool_answers_reach_each_provider_in_its_form(
    providers: tuple[FakeProviders, str], clients: EngineClients
) -> None:
    fake, url = providers
    for provider, suffix, _path in CASES:
        fake.reset()
        model = clients.language_model(
            {"llm_provider": provider, "llm_model": "m", "llm_base_url": url + suffix}, None
        )
        assert model is not None
        toolbox = Toolbox(4000, {"order_status": {"status": "shipped"}})

        async def never(arguments: dict[str, object]) -> object:
            raise AssertionError("mocked")

        toolbox.add(ORDER_TOOL, never)  # type: ignore[arg-type]
        outcome = await run_turn(
            model,
            toolbox,
            system="s",
            history=[Message.user("Where is order 7?")],
            temperature=0.0,
            limits=TurnLimits(10, 3, 0, 0, 100, True),
        )
        assert outcome.reply == 'Here is what I found: {"status":"shipped"}'
        assert [r.name for r in outcome.records] == ["order_status"]
        assert outcome.usage == Usage(240, 60)
        second = fake.model_requests()[1].body
        if provider == "anthropic":
            assert second["messages"][1]["content"][0]["type"] == "tool_use"
            assert second["messages"][2]["content"][0] == {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": '{"status":"shipped"}',
            }
        else:
            assert second["messages"][2]["tool_calls"][0]["function"]["name"] == "order_status"
            assert second["messages"][3] == {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": '{"status":"shipped"}',
            }


async def test_keys_retries_and_failures(
    providers: tuple[FakeProviders, str], clients: EngineClients
) -> None:
    fake, url = providers
    fake.reset()
    from app.provider_credentials.service import StoredCredential

    key = StoredCredential("openai", "sk-test-1234", url + "/v1", {}, "v1")
    model = clients.language_model({"llm_provider": "openai", "llm_model": "gpt-4o-mini"}, key)
    assert model is not None
    toolbox = Toolbox(4000)
    toolbox.add(TRANSFER_TO_HUMAN, None)
    limits = TurnLimits(10, 3, 2, 0, 100, True)

    fake.failures = [429, 503]  # retried: the third attempt answers
    outcome = await run_turn(
        model, toolbox, system="s", history=[Message.user("hi")], temperature=0, limits=limits
    )
    assert outcome.reply == "Hello! How can I help you today?"
    assert len(fake.model_requests()) == 3
    assert fake.model_requests()[0].headers["authorization"] == "Bearer sk-test-1234"

    fake.reset()
    fake.failures = [500, 500, 500]
    failed = await run_turn(
        model, toolbox, system="s", history=[Message.user("hi")], temperature=0, limits=limits
    )
    assert failed.reply is None
    assert failed.action is not None
    assert failed.action.reason == "llm_unavailable"
    assert failed.failure is not None
    assert failed.failure.code == "llm_unavailable"

    fake.reset()
    fake.failures = [401]  # a bad key is not retried
    refused = await run_turn(
        model, toolbox, system="s", history=[Message.user("hi")], temperature=0, limits=limits
    )
    assert len(fake.model_requests()) == 1
    assert refused.failure is not None
    assert (refused.failure.code, refused.failure.status) == ("llm_rejected", 401)


async def test_the_url_guard_runs_at_call_time(
    providers: tuple[FakeProviders, str], tmp_path: Path
) -> None:
    fake, url = providers
    fake.reset()
    guarded = EngineClients(settings_for(tmp_path, allow_private_webhook_urls=False))
    try:
        model = guarded.language_model(
            {"llm_provider": "openai", "llm_model": "m", "llm_base_url": url + "/v1"}, None
        )
        assert model is not None
        with pytest.raises(ProviderFailure) as caught:
            await model.complete(request("hi", stream=True))
    finally:
        await guarded.aclose()
    assert caught.value.retryable
    assert fake.model_requests() == []


MODEL_CALL = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def resolving_to(address: str, asked: list[str]) -> Resolver:
    """A resolver that answers `address` for every name, noting the names asked."""

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return [address]

    return resolve


def model_client(resolver: Resolver, *, allow_private: bool, over_aiohttp: bool) -> Any:
    return guarded_client(
        httpx2,
        allow_private=allow_private,
        timeout=5,
        max_response_bytes=1 << 20,
        resolver=resolver,
        over_aiohttp=over_aiohttp,
    )


@pytest.mark.parametrize("over_aiohttp", [True, False], ids=["aiohttp", "httpx2-pool"])
async def test_a_model_host_that_now_resolves_to_a_private_address_is_refused(
    providers: tuple[FakeProviders, str], over_aiohttp: bool
) -> None:
    fake, url = providers
    fake.reset()
    port = int(url.rsplit(":", 1)[1])
    asked: list[str] = []
    # A public-looking name that now resolves to a private address.
    client = model_client(
        resolving_to("10.0.0.7", asked), allow_private=False, over_aiohttp=over_aiohttp
    )
    try:
        with pytest.raises(httpx2.ConnectError, match="refused"):
            await client.post(
                f"http://models.example.com:{port}/v1/chat/completions", json=MODEL_CALL
            )
    finally:
        await client.aclose()
    assert asked == ["models.example.com"]
    assert fake.model_requests() == []


async def test_over_aiohttp_a_connection_goes_where_the_guards_lookup_said(
    providers: tuple[FakeProviders, str],
) -> None:
    """The guard's lookup is the connection's own: one per new connection, none per request
    on a connection kept open."""
    fake, url = providers
    fake.reset()
    port = int(url.rsplit(":", 1)[1])
    asked: list[str] = []
    client = model_client(resolving_to("127.0.0.1", asked), allow_private=True, over_aiohttp=True)
    try:
        for _ in range(3):
            answer = await client.post(
                f"http://models.test:{port}/v1/chat/completions", json=MODEL_CALL
            )
            assert answer.status_code == 200
    finally:
        await client.aclose()
    assert len(fake.model_requests()) == 3
    assert asked == ["models.test"]


AGENT = AgentProfile("a1", "o1", False, "Ava", "UTC", {}, "v1")


@pytest.mark.parametrize(("transport", "path"), [("streamable_http", "/mcp"), ("sse", "/sse")])
async def test_mcp_tools_listed_cached_and_called(
    mcp_server: tuple[str, list[dict[str, object]]],
    clients: EngineClients,
    transport: str,
    path: str,
) -> None:
    url, calls = mcp_server
    calls.clear()
    server = {
        "name": "weather",
        "url": url + path,
        "transport": transport,
        "allowed_tools": ["get_weather"],
    }
    specs = await clients.mcp.tools(AGENT, server)
    assert specs is not None
    assert [spec.name for spec in specs] == ["get_weather"]
    assert specs[0].parameters["properties"]["city"]["type"] == "string"
    assert await clients.mcp.tools(AGENT, server) is specs  # cached for this agent version
    outcome = await clients.mcp.call(AGENT, server, "get_weather", {"city": "Lyon"})
    assert outcome.success
    assert outcome.content.startswith("Sunny and 21 degrees in Lyon.")
    assert calls == [{"tool": "get_weather", "city": "Lyon"}]


async def test_an_mcp_server_that_is_down_is_left_out(clients: EngineClients) -> None:
    server = {"name": "gone", "url": "http://127.0.0.1:9/mcp", "transport": "streamable_http"}
    assert await clients.mcp.tools(AGENT, server) is None
    outcome = await clients.mcp.call(AGENT, server, "anything", {})
    assert not outcome.success


class Answering:
    """An SDK client whose requests all get `answer` back, as the SDK parsed it (JSON)."""

    def __init__(self, answer: object, base_url: str = "https://api.openai.com/v1/") -> None:
        self.answer = answer
        self.base_url = base_url
        self.posts: list[tuple[str, dict[str, object]]] = []

    async def post(self, path: str, *, content: bytes, cast_to: type) -> object:
        assert cast_to is object  # the JSON as sent, no typed layer
        self.posts.append((path, json.loads(content)))  # the body, encoded once by the engine
        return self.answer


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"choices": []},
        {"choices": [{"message": None}]},
        [],
        {"choices": [{"message": {"tool_calls": [{"function": {}}]}}]},
    ],
    ids=["empty", "no-choice", "no-message", "not-an-object", "unnamed-tool"],
)
async def test_an_answer_that_is_no_chat_completion_fails_for_good(answer: object) -> None:
    from app.engine.providers.openai import OpenAICompatibleChat

    model = OpenAICompatibleChat(Answering(answer), "gpt-4o-mini")
    with pytest.raises(ProviderFailure) as failed:
        await model.complete(request("hi", stream=False))
    assert not failed.value.retryable
    assert failed.value.message == "openai: not a chat completion"


async def test_a_whole_answer_reads_text_tool_calls_and_usage_from_the_json() -> None:
    from app.engine.providers.groq import groq_chat

    client = Answering(
        {
            "choices": [
                {
                    "message": {
                        "content": None,
                        "tool_calls": [
                            {"function": {"name": "order_status", "arguments": '{"order_id": "7"}'}}
                        ],
                    }
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": None},
        },
        base_url="https://api.groq.com/",
    )
    completion = await groq_chat(client, "llama-3.3-70b").complete(request("hi", stream=False))
    # Where the groq SDK posts, joined to the client's base URL once.
    assert client.posts[0][0] == "https://api.groq.com/openai/v1/chat/completions"
    assert completion.text == ""
    assert [(call.id, call.name, call.arguments) for call in completion.tool_calls] == [
        ("call_0", "order_status", {"order_id": "7"})
    ]
    assert completion.usage == Usage(12, 0)
