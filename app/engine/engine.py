"""The conversation engine, as channels use it.

```python
engine = ConversationEngine(resources, clients)        # clients: one EngineClients per process
agent = AgentProfile.of(agent_row, livemode=...)
async with engine.conversation(agent, key="call:<id>"):  # holds one of the org's AI slots
    result = await engine.respond(agent, history)         # history: list[Message]
```

`respond` reads the organization's credentials, assembles the turn's tools (built-ins,
booking, custom tools, MCP tools), bounds the history, picks the model (the agent's
`llm_provider`/`llm_model` on the organization's key and the agent's `llm_base_url`, or the
offline responder when no model is reachable), runs the turn loop (app/engine/turn.py),
prices it and describes it as events. It writes nothing: the channel stores the reply and
emits `result.events` in its own transaction, with its own ids added to each event's data.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

from app.config import Settings
from app.engine.analysis import AnalysisResult, analyze_offline, analyze_with_model
from app.engine.knowledge import Passage, agent_subject, knowledge_lookup
from app.engine.limits import ConversationLimits
from app.engine.net import guarded_client
from app.engine.pricing import cost_usd, price_of
from app.engine.prompt import bounded_history, system_prompt
from app.engine.providers import adapter, load, preload
from app.engine.providers.base import (
    CompletionRequest,
    LanguageModel,
    ProviderFailure,
    TextSink,
)
from app.engine.providers.offline import OfflineResponder
from app.engine.tools.booking import BOOKING_TOOLS, Calendar
from app.engine.tools.builtins import (
    BUILTIN_TOOLS,
    CONTROL_TOOLS,
    SEARCH_KNOWLEDGE,
    control_outcome,
    knowledge_outcome,
)
from app.engine.tools.http import ToolCaller
from app.engine.tools.mcp import McpGateway
from app.engine.tools.toolbox import Toolbox
from app.engine.turn import (
    AGENT_HANDOFF,
    AI_REPLY_GENERATED,
    TurnLimits,
    elapsed_ms,
    run_turn,
)
from app.engine.types import AgentProfile, Message, ToolOutcome, ToolSpec, TurnResult, Usage
from app.provider_credentials.schemas import LLM_PROVIDERS
from app.provider_credentials.service import StoredCredential, organization_credential
from app.resources import Resources

MAX_MODEL_RESPONSE_BYTES = 4 * 1024 * 1024
SUMMARY_PROMPT = (
    "You summarize a phone conversation between an AI agent and a caller for the agent's "
    "team, in two to four plain sentences: what the caller wanted, what was done or "
    "promised, and anything left open. No preamble."
)
SUMMARY_MAX_TOKENS = 200
SDK_CLIENTS_KEPT = 256
KEY_HEADERS = ("authorization", "x-api-key")


class EngineClients:
    """What the engine keeps per process: HTTP clients behind the URL guard, the providers'
    SDK clients (by provider, endpoint and key), the MCP listing cache, refreshed calendar
    tokens. Made once by the worker (`job.runtime.shared(EngineClients)`); `aclose` at exit."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        preload()
        allow_private = settings.allow_private_webhook_urls
        self.tool_caller = ToolCaller(
            allow_private=allow_private, timeout=settings.agent_tool_timeout_seconds
        )
        self.mcp = McpGateway(
            allow_private=allow_private,
            timeout=settings.agent_tool_timeout_seconds,
            result_chars=settings.engine_tool_result_chars,
            cache_seconds=settings.engine_mcp_cache_seconds,
        )
        self.calendar_tokens: dict[tuple[str, str], str] = {}
        self._http: dict[tuple[str, bool], Any] = {}
        self._sdk: OrderedDict[tuple[str, str | None, str | None], Any] = OrderedDict()

    def _http_client(self, module: Any, keyless: bool) -> Any:
        key = (module.__name__, keyless)
        client = self._http.get(key)
        if client is None:
            client = self._http[key] = guarded_client(
                module,
                allow_private=self.settings.allow_private_webhook_urls,
                timeout=self.settings.llm_request_timeout_seconds,
                max_response_bytes=MAX_MODEL_RESPONSE_BYTES,
                drop_headers=KEY_HEADERS if keyless else (),
                over_aiohttp=module.__name__ == "httpx2",
            )
        return client

    def sdk_client(self, provider: str, api_key: str | None, base_url: str | None) -> Any:
        """The provider's official SDK client; the SDK's own retries are off (the turn loop
        retries within its deadline)."""
        cache_key = (provider, api_key, base_url)
        client = self._sdk.get(cache_key)
        if client is not None:
            self._sdk.move_to_end(cache_key)
            return client
        keyless = api_key is None
        options: dict[str, Any] = {
            "api_key": api_key or "none",
            "max_retries": 0,
            "timeout": self.settings.llm_request_timeout_seconds,
        }
        if base_url:
            options["base_url"] = base_url
        sdk = adapter(provider)
        client = sdk.sdk_client(options, self._http_client(sdk.HTTP_MODULE, keyless))
        self._sdk[cache_key] = client
        if len(self._sdk) > SDK_CLIENTS_KEPT:
            self._sdk.popitem(last=False)
        return client

    def language_model(
        self, config: Mapping[str, Any], credential: StoredCredential | None
    ) -> LanguageModel | None:
        """The agent's model, or None when none is reachable (no key, no `llm_base_url`)."""
        provider = str(config.get("llm_provider") or "openai")
        model = str(config.get("llm_model") or "")
        agent_url = config.get("llm_base_url")
        if credential is None and not agent_url:
            return None
        api_key = credential.api_key if credential is not None else None
        base_url = agent_url or (credential.base_url if credential is not None else None)
        client = self.sdk_client(provider, api_key, base_url)
        chat: LanguageModel = adapter(provider).chat(client, model, custom_endpoint=bool(base_url))
        return chat

    async def aclose(self) -> None:
        await self.tool_caller.aclose()
        for client in self._http.values():
            await client.aclose()
        self._http.clear()
        self._sdk.clear()


class ConversationEngine:
    def __init__(self, resources: Resources, clients: EngineClients) -> None:
        self.resources = resources
        self.clients = clients
        self.settings = resources.settings
        self.limits = ConversationLimits(resources)

    @asynccontextmanager
    async def conversation(self, agent: AgentProfile, key: str) -> AsyncIterator[None]:
        """Hold one of the organization's concurrent AI conversations while the block runs;
        raises `ConversationLimitReached` (a 429 where an API call asks) when all are taken."""
        async with self.limits.conversation(agent.organization_id, key):
            yield

    async def _credential(self, organization_id: str, provider: str) -> StoredCredential | None:
        return await organization_credential(self.resources, organization_id, provider)

    async def _toolbox(
        self, agent: AgentProfile, mocks: Mapping[str, Any] | None, zone: ZoneInfo
    ) -> Toolbox:
        config = agent.config
        limit = self.settings.engine_tool_result_chars
        toolbox = Toolbox(limit, mocks)
        reader = agent_subject(agent.organization_id, agent.agent_id, agent.livemode)

        async def search(arguments: dict[str, Any]) -> ToolOutcome:
            query = str(arguments.get("query") or "").strip()
            if not query:
                return ToolOutcome(success=False, content="A query is required.", error="no query")
            return knowledge_outcome(await knowledge_lookup(self.resources, reader, query), limit)

        toolbox.add(SEARCH_KNOWLEDGE, search)
        for spec in BUILTIN_TOOLS:
            kind = CONTROL_TOOLS.get(spec.name)
            if kind is not None:
                toolbox.add(spec, partial(_fixed, control_outcome(kind)))
        booking = config.get("booking_config") or {}
        if booking.get("booking_enabled"):
            await self._add_booking(toolbox, agent, booking, zone, mocks)
        for tool in config.get("custom_tools") or []:
            spec = ToolSpec(tool["name"], tool["description"], tool["parameters"], "custom")
            toolbox.add(spec, partial(self._custom, tool))
        for server in config.get("mcp_tools") or []:
            allowed = server.get("allowed_tools") or []
            if mocks is not None and allowed and all(name in mocks for name in allowed):
                # An agent test mocks every tool of this server: offer them unreached.
                for name in allowed:
                    description = f"{server['name']}: {name}"
                    toolbox.add(ToolSpec(name, description, {"type": "object"}, "mcp"), None)
                continue
            specs = await self.clients.mcp.tools(agent, server)
            if specs is None:
                toolbox.unavailable.append({"server": server["name"], "reason": "unreachable"})
                continue
            for spec in specs:
                toolbox.add(spec, partial(self._mcp, agent, server, spec.name))
        return toolbox

    async def _add_booking(
        self,
        toolbox: Toolbox,
        agent: AgentProfile,
        booking: Mapping[str, Any],
        zone: ZoneInfo,
        mocks: Mapping[str, Any] | None,
    ) -> None:
        provider = str(booking.get("provider") or "google_calendar")
        credential = await self._credential(agent.organization_id, provider)
        if credential is None:
            if mocks is not None and all(spec.name in mocks for spec in BOOKING_TOOLS):
                for spec in BOOKING_TOOLS:  # mocked in an agent test: no calendar needed
                    toolbox.add(spec, None)
                return
            toolbox.unavailable.append({"tool": "booking", "reason": f"no {provider} credential"})
            return
        calendar = Calendar(
            self.clients.tool_caller,
            credential,
            zone,
            self.clients.calendar_tokens,
            agent.organization_id,
        )
        for spec in BOOKING_TOOLS:
            toolbox.add(spec, partial(calendar.run, spec.name))

    async def _custom(self, tool: dict[str, Any], arguments: dict[str, Any]) -> ToolOutcome:
        result = await self.clients.tool_caller(tool, arguments)
        if not result.success:
            return ToolOutcome(
                success=False,
                content=f"The tool failed ({result.error}).",
                excerpt="",
                data={"success": False},
                status_code=result.status_code,
                error=result.error,
            )
        body = result.body.decode("utf-8", "replace")[: self.settings.engine_tool_result_chars]
        return ToolOutcome(
            success=True,
            content=body,
            excerpt=result.answer,
            data={"success": True, "answer": result.answer},
            status_code=result.status_code,
        )

    async def _mcp(
        self, agent: AgentProfile, server: dict[str, Any], name: str, arguments: dict[str, Any]
    ) -> ToolOutcome:
        return await self.clients.mcp.call(agent, server, name, arguments)

    async def _model(self, agent: AgentProfile) -> LanguageModel | None:
        """The agent's model on the organization's key; None when none is reachable."""
        config = agent.config
        provider = str(config.get("llm_provider") or "openai")
        credential = (
            await self._credential(agent.organization_id, provider)
            if provider in LLM_PROVIDERS
            else None
        )
        await load(provider)
        return self.clients.language_model(config, credential)

    async def summarize(
        self, agent: AgentProfile, transcript: str
    ) -> tuple[str | None, Usage, float]:
        """A short summary of a finished conversation by the agent's model, its usage and
        cost; None when no model is reachable or it fails (the channel writes its own)."""
        model = await self._model(agent)
        if model is None:
            return None, Usage(), 0.0
        request = CompletionRequest(
            system=SUMMARY_PROMPT,
            messages=[Message.user(transcript)],
            tools=[],
            temperature=0.0,
            max_output_tokens=SUMMARY_MAX_TOKENS,
            stream=False,
        )
        try:
            async with asyncio.timeout(self.settings.engine_turn_deadline_seconds):
                completion = await model.complete(request, None)
        except (ProviderFailure, TimeoutError):
            return None, Usage(), 0.0
        text = " ".join(completion.text.split())
        cost = cost_usd(model.provider, model.model, completion.usage, self.settings.llm_prices)
        return text or None, completion.usage, cost

    async def analyze(
        self,
        agent: AgentProfile,
        transcript: Sequence[Mapping[str, Any]],
        schema: Mapping[str, Any] | None,
        criteria: str | None,
    ) -> AnalysisResult:
        """A finished call's analysis (app/engine/analysis.py): by the agent's model when one
        is reachable, else by the offline extractor; failures are in the result."""
        model = await self._model(agent)
        if model is None:
            return analyze_offline(transcript, schema, criteria)
        settings = self.settings
        return await analyze_with_model(
            model,
            transcript,
            schema,
            criteria,
            deadline_seconds=settings.engine_turn_deadline_seconds,
            max_retries=settings.llm_max_retries,
            backoff_seconds=settings.llm_retry_backoff_seconds,
        )

    async def respond(
        self,
        agent: AgentProfile,
        history: Sequence[Message],
        *,
        tool_mocks: Mapping[str, Any] | None = None,
        on_text: TextSink | None = None,
    ) -> TurnResult:
        """The agent's answer to `history` (its last message is the customer's)."""
        started = time.perf_counter()
        await self.limits.spend_reply(agent.organization_id)
        config = agent.config
        zone = _zone(agent.timezone)
        model = await self._model(agent)
        toolbox = await self._toolbox(agent, tool_mocks, zone)
        if model is None:
            reader = agent_subject(agent.organization_id, agent.agent_id, agent.livemode)

            async def lookup(question: str) -> list[Passage]:
                return await knowledge_lookup(self.resources, reader, question)

            model = OfflineResponder(lookup)
        settings = self.settings
        outcome = await run_turn(
            model,
            toolbox,
            system=system_prompt(agent, zone),
            history=bounded_history(
                history, settings.engine_history_messages, settings.engine_history_tokens
            ),
            temperature=float(config.get("temperature") or 0.0),
            limits=TurnLimits(
                deadline_seconds=settings.engine_turn_deadline_seconds,
                max_tool_rounds=settings.engine_max_tool_rounds,
                max_retries=settings.llm_max_retries,
                backoff_seconds=settings.llm_retry_backoff_seconds,
                max_output_tokens=settings.llm_max_output_tokens,
                stream=settings.llm_streaming,
            ),
            on_text=on_text,
        )
        model_name = None if model.provider == "offline" else model.model
        cost = cost_usd(model.provider, model_name, outcome.usage, settings.llm_prices)
        latency = elapsed_ms(started)
        question = next((m.content for m in reversed(history) if m.role == "user"), "")
        events = list(outcome.events)
        generated = (
            AI_REPLY_GENERATED,
            {
                "question": question,
                "reply": outcome.reply,
                "source": outcome.source,
                **outcome.detail,
                "provider": model.provider,
                "model": model_name,
                "tool_calls": [record.name for record in outcome.records],
                "usage": outcome.usage.public(),
                "cost": cost,
                "cost_known": model.provider == "offline"
                or price_of(model.provider, model_name, settings.llm_prices) is not None,
                "latency_ms": latency,
            },
        )
        if outcome.failure is not None:
            events.append(
                (
                    AGENT_HANDOFF,
                    {
                        "reason": outcome.action.reason if outcome.action else "",
                        "error": outcome.failure.public(),
                    },
                )
            )
        elif outcome.action is not None and outcome.action.kind == "handoff":
            # What the agent says while handing off is a reply it generated, sent like any.
            if outcome.reply:
                events.append(generated)
            events.append(
                (AGENT_HANDOFF, {"reason": outcome.action.reason, "reply": outcome.reply})
            )
        else:
            events.append(generated)
        return TurnResult(
            reply=outcome.reply,
            action=outcome.action,
            tool_calls=outcome.records,
            usage=outcome.usage,
            cost=cost,
            provider=model.provider,
            model=model_name,
            source=outcome.source,
            latency_ms=latency,
            messages=outcome.messages,
            events=events,
            detail={**outcome.detail, "unavailable_tools": toolbox.unavailable},
            failure=outcome.failure,
        )


async def _fixed(outcome: ToolOutcome, arguments: dict[str, Any]) -> ToolOutcome:
    return outcome


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (KeyError, ValueError):
        return ZoneInfo("UTC")
