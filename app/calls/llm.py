"""Replies written by an OpenAI-compatible chat endpoint (`agent_config.llm_base_url`), for
simulated calls: the agent's system prompt, the knowledge passages found for the question,
and the question. Any failure returns None and the deterministic responder answers instead,
so a call never fails because the model endpoint did."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import structlog

from app.calls.conversation import MAX_ANSWER_LENGTH, Passage
from app.calls.tools import ToolCaller

logger = structlog.get_logger("switchboard.calls")

MAX_REPLY_TOKENS = 200


def chat_request(config: dict[str, Any], question: str, passages: Sequence[Passage]) -> Any:
    """The chat completions body (OpenAI's wire format)."""
    instructions = config.get("system_prompt") or "You are a helpful phone agent."
    knowledge = "\n".join(f"- {passage.text}" for passage in passages) or "(nothing found)"
    return {
        "model": config.get("llm_model"),
        "temperature": config.get("temperature"),
        "max_tokens": MAX_REPLY_TOKENS,
        "messages": [
            {
                "role": "system",
                "content": f"{instructions}\nAnswer in one or two spoken sentences, using "
                f"only these facts from the knowledge base:\n{knowledge}",
            },
            {"role": "user", "content": question},
        ],
    }


async def chat_reply(
    caller: ToolCaller, config: dict[str, Any], question: str, passages: Sequence[Passage]
) -> str | None:
    base_url = str(config["llm_base_url"]).rstrip("/")
    exchange = await caller.exchange(
        "POST", f"{base_url}/chat/completions", json=chat_request(config, question, passages)
    )
    if not exchange.ok:
        logger.info("llm reply failed", error=exchange.error, status=exchange.status_code)
        return None
    try:
        content = orjson.loads(exchange.body)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        logger.info("llm reply unreadable")
        return None
    if not isinstance(content, str) or not content.strip():
        return None
    return " ".join(content.split())[:MAX_ANSWER_LENGTH]
