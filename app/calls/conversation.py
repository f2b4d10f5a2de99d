"""The simulated conversation of a test-mode call: the agent greets, a scripted caller asks,
the agent answers from the organization's knowledge base or one of its custom tools, and
hands off to a person when asked to.

Deterministic (no model is needed): replies are the knowledge passage sentence that shares
the most words with the question, or the tool's answer. The knowledge lookup and the tool
runner are passed in, so this module does no I/O of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_SCRIPT = (
    "Hi, what are your opening hours?",
    "Can you tell me more about what you offer?",
    "Thanks, that's all. Goodbye!",
)
WORDS_PER_SECOND = 2.5
PAUSE_SECONDS = 0.6
MAX_ANSWER_LENGTH = 500

AI_REPLY_GENERATED = "ai.reply.generated"
AI_TOOL_EXECUTED = "ai.tool.executed"
AGENT_HANDOFF = "agent.handoff"

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


@dataclass(frozen=True, slots=True)
class Passage:
    text: str
    document_id: str | None = None
    file_name: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    success: bool
    answer: str
    status_code: int | None = None
    error: str | None = None


KnowledgeLookup = Callable[[str], Awaitable[Sequence[Passage]]]
ToolRunner = Callable[[dict[str, Any], dict[str, Any]], Awaitable[ToolResult]]
# Writes a reply from the question and the passages found; None leaves it to the sentence
# picker (no model configured, or the model failed).
Replier = Callable[[str, Sequence[Passage]], Awaitable[str | None]]


@dataclass
class Conversation:
    transcript: list[dict[str, Any]] = field(default_factory=list)
    # (event type, data) in the order they happened.
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    answered_from_knowledge: int = 0
    tools_used: list[str] = field(default_factory=list)
    handed_off: bool = False
    clock: float = 0.0

    def say(self, speaker: str, text: str) -> float:
        """Adds a turn at the current time; the clock moves on by its speaking time."""
        at = round(self.clock, 2)
        self.transcript.append({"speaker": speaker, "text": text, "timestamp": at})
        self.clock += max(1.0, len(text.split()) / WORDS_PER_SECOND) + PAUSE_SECONDS
        return at

    @property
    def duration_seconds(self) -> int:
        return max(1, math.ceil(self.clock))


def keywords(text: str) -> set[str]:
    """Lower-case content words, a plural `s` dropped, so "orders" meets "order"."""
    found = set()
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS or len(word) < 3:
            continue
        found.add(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return found


def matching_tool(question: str, tools: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The custom tool whose name shares the most words with the question (at least one)."""
    asked = keywords(question)
    best: tuple[int, dict[str, Any]] | None = None
    for tool in tools:
        name_words = keywords(tool["name"].replace("_", " ").replace("-", " "))
        score = len(asked & name_words)
        if score and (best is None or score > best[0]):
            best = (score, tool)
    return None if best is None else best[1]


def tool_arguments(question: str, tool: dict[str, Any]) -> dict[str, Any]:
    """Arguments for the tool's JSON Schema from what the caller said: identifiers and
    numbers from the digits of the question, other text properties the question itself."""
    properties = (tool.get("parameters") or {}).get("properties") or {}
    numbers = _NUMBER.findall(question)
    arguments: dict[str, Any] = {}
    for name, schema in properties.items():
        kind = schema.get("type")
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


async def simulate(
    *,
    agent: dict[str, Any],
    script: Sequence[str] | None,
    lookup: KnowledgeLookup,
    run_tool: ToolRunner,
    call: dict[str, Any],
    reply: Replier | None = None,
) -> Conversation:
    """Plays the call out. `agent` has `name` and `config`; `call` identifies the call in
    every event (call_log_id, call_id, agent_id)."""
    config = agent.get("config") or {}
    tools = config.get("custom_tools") or []
    conversation = Conversation()
    welcome = config.get("welcome_message") or f"Hello, this is {agent['name']}. How can I help?"
    conversation.say("agent", welcome)
    for line in script or DEFAULT_SCRIPT:
        asked_at = conversation.say("caller", line)
        if _HANDOFF.search(line):
            conversation.say("agent", HANDOFF_REPLY)
            conversation.handed_off = True
            conversation.events.append(
                (AGENT_HANDOFF, {**call, "reason": line, "timestamp": asked_at})
            )
            break
        if _CLOSING.search(line):
            reply_at = conversation.say("agent", CLOSING_REPLY)
            conversation.events.append(
                (
                    AI_REPLY_GENERATED,
                    {
                        **call,
                        "question": line,
                        "reply": CLOSING_REPLY,
                        "source": "closing",
                        "timestamp": reply_at,
                    },
                )
            )
            break
        conversation.questions.append(line)
        answer, source, extra = await _answer(
            line, tools, lookup, run_tool, reply, call, conversation
        )
        reply_at = conversation.say("agent", answer)
        conversation.events.append(
            (
                AI_REPLY_GENERATED,
                {
                    **call,
                    "question": line,
                    "reply": answer,
                    "source": source,
                    **extra,
                    "timestamp": reply_at,
                },
            )
        )
    return conversation


async def _answer(
    question: str,
    tools: Sequence[dict[str, Any]],
    lookup: KnowledgeLookup,
    run_tool: ToolRunner,
    reply: Replier | None,
    call: dict[str, Any],
    conversation: Conversation,
) -> tuple[str, str, dict[str, Any]]:
    tool = matching_tool(question, tools)
    if tool is not None:
        arguments = tool_arguments(question, tool)
        result = await run_tool(tool, arguments)
        conversation.tools_used.append(tool["name"])
        conversation.events.append(
            (
                AI_TOOL_EXECUTED,
                {
                    **call,
                    "tool": tool["name"],
                    "arguments": arguments,
                    "success": result.success,
                    "status_code": result.status_code,
                    "result": result.answer if result.success else None,
                    "error": result.error,
                },
            )
        )
        spoken = result.answer if result.success else TOOL_FAILED
        return spoken, "tool", {"tool": tool["name"]}
    passages = await lookup(question)
    written = await reply(question, passages) if reply is not None else None
    if written is not None:
        if passages:
            conversation.answered_from_knowledge += 1
        return written, "llm", {"document_id": passages[0].document_id if passages else None}
    found = best_sentence(question, passages)
    if found is None:
        return NO_ANSWER, "none", {}
    sentence, passage = found
    conversation.answered_from_knowledge += 1
    return (
        sentence,
        "knowledge_base",
        {
            "document_id": passage.document_id,
            "file_name": passage.file_name,
        },
    )


def summarize(agent_name: str, conversation: Conversation) -> str:
    """A short account of the call, built from what happened in it."""
    parts = [f"{agent_name} spoke with the caller for {conversation.duration_seconds} s."]
    if conversation.questions:
        asked = "; ".join(f'"{question}"' for question in conversation.questions)
        parts.append(f"The caller asked {len(conversation.questions)} question(s): {asked}.")
    if conversation.answered_from_knowledge:
        parts.append(f"{conversation.answered_from_knowledge} answered from the knowledge base.")
    if conversation.tools_used:
        parts.append(f"Tools used: {', '.join(dict.fromkeys(conversation.tools_used))}.")
    if conversation.handed_off:
        parts.append("The caller asked for a person and was handed off to the team.")
    return " ".join(parts)
