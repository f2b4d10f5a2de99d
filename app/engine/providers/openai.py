"""OpenAI chat completions through the official `openai` SDK: function calling, streamed
(SSE chunks whose `tool_calls` deltas are assembled by index) or whole.

`OpenAICompatibleChat` is written against the chat completions shape only, so the groq SDK
(an OpenAI-compatible API, app/engine/providers/groq.py) reuses it with its own client and
error classes.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import httpx2
import openai
import orjson

from app.core.jsonutil import dumps
from app.engine.providers.base import (
    CompletionRequest,
    ProviderFailure,
    TextSink,
    status_failure,
)
from app.engine.types import Completion, Message, ToolCall, Usage


def chat_messages(system: str, messages: list[Message] | tuple[Message, ...] | Any) -> list[Any]:
    """The conversation in chat completions form: system first, tool answers as `tool`."""
    out: list[Any] = [{"role": "system", "content": system}]
    for message in messages:
        if message.role == "tool":
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
        elif message.role == "assistant" and message.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": orjson.dumps(call.arguments).decode(),
                            },
                        }
                        for call in message.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def chat_tools(request: CompletionRequest) -> list[Any]:
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in request.tools
    ]


def parse_arguments(text: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments; anything else becomes `{}` (the tool then refuses)."""
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class OpenAICompatibleChat:
    """One model of an OpenAI-compatible chat completions API."""

    def __init__(
        self,
        client: Any,
        model: str,
        *,
        provider: str = "openai",
        errors: ModuleType = openai,
        max_tokens_field: str = "max_completion_tokens",
        usage_in_stream: bool = True,
        completions_path: str = "/chat/completions",
    ) -> None:
        self.client = client
        # Where the SDK's own `chat.completions.create` posts, under the client's base URL,
        # joined once here: given a relative path, the SDK parses the path and its base URL
        # again at every call.
        base = str(client.base_url).rstrip("/")
        self._completions_url = f"{base}/{completions_path.lstrip('/')}"
        self._usage_in_stream = usage_in_stream
        self.model = model
        self.provider = provider
        self._errors = errors
        self._max_tokens_field = max_tokens_field

    async def complete(
        self, request: CompletionRequest, on_text: TextSink | None = None
    ) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request.system, request.messages),
            "temperature": request.temperature,
            self._max_tokens_field: request.max_output_tokens,
        }
        if request.tools:
            body["tools"] = chat_tools(request)
        try:
            if request.stream:
                return await self._streamed(body, on_text)
            # The SDK's own request path (auth, timeouts, its errors) without its typed layer:
            # `chat.completions.create` walked the body through its TypedDict transform and
            # the answer into pydantic models, 4.1 ms of CPU a call against 1.9 ms here, for a
            # body that is JSON already and three fields read back (docs/benchmarks.md).
            # The body goes as bytes (`content`), sent as they are: the SDK's own encoder (the
            # standard library's, with a custom class) is slower than ours.
            answer = await self.client.post(
                self._completions_url, content=dumps(body), cast_to=object
            )
            return self._whole(answer)
        except self._errors.APIStatusError as exc:
            raise status_failure(
                self.provider, exc.status_code, exc.message, exc.response.headers
            ) from exc
        except self._errors.APIError as exc:  # timeouts, broken connections, bad streams
            raise ProviderFailure(
                self.provider, f"{self.provider}: {type(exc).__name__}", retryable=True
            ) from exc

    def _whole(self, answer: Any) -> Completion:
        """A chat completion as the API sent it (JSON); one of another shape is a provider
        failure that trying again would not mend."""
        try:
            message = answer["choices"][0]["message"]
            calls = tuple(
                ToolCall(
                    call.get("id") or f"call_{index}",
                    call["function"]["name"],
                    parse_arguments(call["function"].get("arguments")),
                )
                for index, call in enumerate(message.get("tool_calls") or ())
                if isinstance(call.get("function"), dict)
            )
            usage = answer.get("usage") or {}
            return Completion(
                text=message.get("content") or "",
                tool_calls=calls,
                usage=Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0),
            )
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ProviderFailure(
                self.provider, f"{self.provider}: not a chat completion", retryable=False
            ) from exc

    async def _streamed(self, body: dict[str, Any], on_text: TextSink | None) -> Completion:
        if self._usage_in_stream:  # OpenAI sends usage in a last chunk only when asked
            body["stream_options"] = {"include_usage": True}
        stream = await self.client.chat.completions.create(**body, stream=True)
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage = Usage()
        async for chunk in stream:
            usage = _usage(chunk.usage) if chunk.usage is not None else _extra_usage(chunk, usage)
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    if on_text is not None:
                        await on_text(delta.content)
                for part in delta.tool_calls or ():
                    slot = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                    if part.id:
                        slot["id"] = part.id
                    if part.function is not None:
                        slot["name"] += part.function.name or ""
                        slot["arguments"] += part.function.arguments or ""
        return Completion(
            text="".join(text),
            tool_calls=tuple(
                ToolCall(
                    slot["id"] or f"call_{index}", slot["name"], parse_arguments(slot["arguments"])
                )
                for index, slot in sorted(calls.items())
                if slot["name"]
            ),
            usage=usage,
        )


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    return Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0)


def _extra_usage(chunk: Any, current: Usage) -> Usage:
    """Groq reports a stream's usage in `x_groq.usage` of its last chunk."""
    extra = getattr(chunk, "x_groq", None)
    found = getattr(extra, "usage", None) if extra is not None else None
    return _usage(found) if found is not None else current


def openai_chat(client: Any, model: str, *, custom_endpoint: bool) -> OpenAICompatibleChat:
    """OpenAI's own API takes `max_completion_tokens`; OpenAI-compatible servers reached
    through `llm_base_url` mostly know only `max_tokens`."""
    return OpenAICompatibleChat(
        client,
        model,
        max_tokens_field="max_tokens" if custom_endpoint else "max_completion_tokens",
    )


HTTP_MODULE = httpx2


def sdk_client(options: dict[str, Any], http_client: Any) -> Any:
    return openai.AsyncOpenAI(**options, http_client=http_client)


chat = openai_chat
