"""Anthropic messages through the official `anthropic` SDK: tools as `tool_use` content
blocks, tool answers as `tool_result` blocks of a user message; streamed (message_start,
content_block_start/delta/stop with `input_json_delta` for tool arguments, message_delta) or
whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic
import httpx2

from app.engine.providers.base import (
    CompletionRequest,
    ProviderFailure,
    TextSink,
    status_failure,
)
from app.engine.providers.openai import parse_arguments
from app.engine.types import Completion, Message, ToolCall, Usage

PROVIDER = "anthropic"


def anthropic_messages(messages: Sequence[Message]) -> list[Any]:
    """Messages API form: consecutive tool answers share one user message, as the API wants
    every `tool_result` of an assistant turn in the next user turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif message.role == "assistant" and message.tool_calls:
            blocks: list[Any] = (
                [{"type": "text", "text": message.content}] if message.content else []
            )
            blocks.extend(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                for call in message.tool_calls
            )
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": message.role, "content": message.content})
    return out


class AnthropicChat:
    provider = PROVIDER

    def __init__(self, client: Any, model: str) -> None:
        self.client = client
        self.model = model

    async def complete(
        self, request: CompletionRequest, on_text: TextSink | None = None
    ) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "system": request.system,
            "messages": anthropic_messages(request.messages),
            # No temperature: the Messages API of this SDK generation no longer takes one.
            "max_tokens": request.max_output_tokens,
        }
        if request.tools:
            body["tools"] = [
                {
                    "name": spec.name,
                    "description": spec.description,
                    "input_schema": spec.parameters,
                }
                for spec in request.tools
            ]
        try:
            if request.stream:
                return await self._streamed(body, on_text)
            return _whole(await self.client.messages.create(**body))
        except anthropic.APIStatusError as exc:
            raise status_failure(
                PROVIDER, exc.status_code, exc.message, exc.response.headers
            ) from exc
        except anthropic.APIError as exc:
            raise ProviderFailure(
                PROVIDER, f"{PROVIDER}: {type(exc).__name__}", retryable=True
            ) from exc

    async def _streamed(self, body: dict[str, Any], on_text: TextSink | None) -> Completion:
        stream = await self.client.messages.create(**body, stream=True)
        text: list[str] = []
        blocks: dict[int, dict[str, Any]] = {}
        input_tokens = output_tokens = 0
        async for event in stream:
            kind = event.type
            if kind == "message_start":
                input_tokens = event.message.usage.input_tokens or 0
                output_tokens = event.message.usage.output_tokens or 0
            elif kind == "content_block_start":
                block = event.content_block
                if block.type == "tool_use":
                    blocks[event.index] = {"id": block.id, "name": block.name, "json": ""}
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    text.append(delta.text)
                    if on_text is not None:
                        await on_text(delta.text)
                elif delta.type == "input_json_delta" and event.index in blocks:
                    blocks[event.index]["json"] += delta.partial_json
            elif kind == "message_delta":
                output_tokens = event.usage.output_tokens or output_tokens
                if event.usage.input_tokens:
                    input_tokens = event.usage.input_tokens
        return Completion(
            text="".join(text),
            tool_calls=tuple(
                ToolCall(block["id"], block["name"], parse_arguments(block["json"]))
                for _index, block in sorted(blocks.items())
            ),
            usage=Usage(input_tokens, output_tokens),
        )


def _whole(response: Any) -> Completion:
    text = "".join(block.text for block in response.content if block.type == "text")
    calls = tuple(
        ToolCall(block.id, block.name, block.input if isinstance(block.input, dict) else {})
        for block in response.content
        if block.type == "tool_use"
    )
    usage = Usage(response.usage.input_tokens or 0, response.usage.output_tokens or 0)
    return Completion(text=text, tool_calls=calls, usage=usage)


HTTP_MODULE = httpx2


def sdk_client(options: dict[str, Any], http_client: Any) -> Any:
    return anthropic.AsyncAnthropic(**options, http_client=http_client)


def chat(client: Any, model: str, *, custom_endpoint: bool) -> AnthropicChat:
    return AnthropicChat(client, model)
