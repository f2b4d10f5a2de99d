"""The offline responder: a deterministic stand-in for a model, for agents with no reachable
LLM (no credential and no `llm_base_url`: a fresh install, test mode, the test suite).

It answers through the same turn loop as a real model: it asks for the agent's tools by
function call (a custom or MCP tool whose name shares a word with the question, arguments
taken from the question), then says the tool's answer; otherwise it answers with the sentence
of the organization's knowledge that shares the most words with the question. A request for a
person is a handoff and a goodbye ends the conversation, decided without a tool.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from app.engine.knowledge import Passage
from app.engine.providers.base import CompletionRequest, TextSink
from app.engine.types import Action, Completion, Message, ToolCall, ToolSpec

PROVIDER = "offline"
MAX_ANSWER_LENGTH = 500

NO_ANSWER = (
    "I'm sorry, I don't have information about that. Is there anything else I can help with?"
)
TOOL_FAILED = "I'm sorry, I couldn't look that up right now."
HANDOFF_REPLY = "Of course. Let me connect you with a member of our team. Please hold."
CLOSING_REPLY = "You're welcome. Thank you for calling, goodbye!"

_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_HANDOFF = re.compile(
    r"\b(speak|talk|transfer|connect|put me through)\b.*\b(human|person|someone|somebody|"
    r"representative|agent|operator|manager|staff)\b|\b(real|live) (person|human|agent)\b",
    re.IGNORECASE,
)
_CLOSING = re.compile(r"\b(bye|goodbye|that's all|that is all|no thanks)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\b\d[\d-]*\b")
_STOPWORD_TEXT = (
    "a an and are as at be by can could do does for from get give have how i in is it its"
    " me my of on or our please tell than that the their them then there these they this"
    " to us was we what when where which who why will with would you your about check"
    " look lookup fetch find know want need"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# Property names whose value is the first number of the question (an order id, a code, …).
_IDENTIFIER_HINTS = ("id", "number", "code", "order", "reference", "ref")
# Tools the responder may pick by name: the agent's own, never the built-ins or booking.
_PICKABLE = ("custom", "mcp")

KnowledgeLookup = Callable[[str], Awaitable[Sequence[Passage]]]


def keywords(text: str) -> set[str]:
    """Lower-case content words, a plural `s` dropped, so "orders" meets "order"."""
    found = set()
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS or len(word) < 3:
            continue
        found.add(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return found


def matching_tool(question: str, tools: Sequence[ToolSpec]) -> ToolSpec | None:
    """The tool whose name shares the most words with the question (at least one)."""
    asked = keywords(question)
    best: tuple[int, ToolSpec] | None = None
    for tool in tools:
        name_words = keywords(tool.name.replace("_", " ").replace("-", " "))
        score = len(asked & name_words)
        if score and (best is None or score > best[0]):
            best = (score, tool)
    return None if best is None else best[1]


def tool_arguments(question: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a JSON Schema from what was said: identifiers and numbers from the
    digits of the question, other text properties the question itself."""
    properties = parameters.get("properties") or {}
    numbers = _NUMBER.findall(question)
    arguments: dict[str, Any] = {}
    for name, schema in properties.items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        if kind in ("integer", "number"):
            if numbers:
                digits = numbers[0].replace("-", "")
                arguments[name] = int(digits) if kind == "integer" else float(digits)
        elif kind in (None, "string"):
            if numbers and any(hint in name.lower() for hint in _IDENTIFIER_HINTS):
                arguments[name] = numbers[0]
            else:
                arguments[name] = question
    return arguments


def best_sentence(question: str, passages: Sequence[Passage]) -> tuple[str, Passage] | None:
    """The sentence of the passages sharing the most words with the question."""
    asked = keywords(question)
    best: tuple[int, str, Passage] | None = None
    for passage in passages:
        for sentence in _SENTENCE_END.split(passage.text):
            sentence = " ".join(sentence.split())
            score = len(asked & keywords(sentence))
            if score and (best is None or score > best[0]):
                best = (score, sentence, passage)
    if best is None:
        return None
    return best[1][:MAX_ANSWER_LENGTH], best[2]


class OfflineResponder:
    """A `LanguageModel` that needs no account; `lookup` searches the organization's
    knowledge."""

    provider = PROVIDER
    model = "deterministic"

    def __init__(self, lookup: KnowledgeLookup) -> None:
        self._lookup = lookup

    async def complete(
        self, request: CompletionRequest, on_text: TextSink | None = None
    ) -> Completion:
        completion = await self._answer(request)
        if on_text is not None and completion.text and not completion.tool_calls:
            await on_text(completion.text)
        return completion

    async def _answer(self, request: CompletionRequest) -> Completion:
        last = request.messages[-1] if request.messages else Message.user("")
        if last.role == "tool":  # the answer of the tool this responder asked for
            data = last.data if isinstance(last.data, dict) else {}
            if data.get("success"):
                return Completion(
                    text=str(data.get("answer") or last.content)[:MAX_ANSWER_LENGTH],
                    source="tool",
                    detail={"tool": last.name},
                )
            return Completion(text=TOOL_FAILED, source="tool", detail={"tool": last.name})
        question = last.content
        if _HANDOFF.search(question):
            return Completion(
                text=HANDOFF_REPLY, source="handoff", action=Action("handoff", question)
            )
        if _CLOSING.search(question):
            return Completion(text=CLOSING_REPLY, source="closing", action=Action("end", question))
        pickable = [spec for spec in request.tools if spec.kind in _PICKABLE]
        tool = matching_tool(question, pickable)
        if tool is not None:
            call = ToolCall(
                f"call_{secrets.token_hex(6)}", tool.name, tool_arguments(question, tool.parameters)
            )
            return Completion(text="", tool_calls=(call,))
        found = best_sentence(question, await self._lookup(question))
        if found is None:
            return Completion(text=NO_ANSWER, source="none")
        sentence, passage = found
        return Completion(
            text=sentence,
            source="knowledge_base",
            detail={"document_id": passage.document_id, "file_name": passage.file_name},
        )
