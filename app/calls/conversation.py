"""The simulated conversation of a test-mode call, played through the conversation engine.

The agent greets, the scripted caller says each line, and the engine answers each one turn by
turn exactly as it answers on any channel (tools, knowledge, booking, handoff, the model or
the offline responder). This module only adapts the call: it times the transcript, stamps the
engine's events with the call's ids and a timestamp, adds up tokens and cost, and writes the
summary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.engine.engine import ConversationEngine
from app.engine.types import AgentProfile, Message, Usage

DEFAULT_SCRIPT = (
    "Hi, what are your opening hours?",
    "Can you tell me more about what you offer?",
    "Thanks, that's all. Goodbye!",
)
WORDS_PER_SECOND = 2.5
PAUSE_SECONDS = 0.6
# Tools whose use the summary reports (the built-ins are the agent's own means).
_REPORTED_TOOL_KINDS = ("custom", "mcp", "booking")


@dataclass
class Conversation:
    transcript: list[dict[str, Any]] = field(default_factory=list)
    # (event type, data) in the order they happened.
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    answered_from_knowledge: int = 0
    tools_used: list[str] = field(default_factory=list)
    handed_off: bool = False
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
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


async def simulate(
    engine: ConversationEngine,
    agent: AgentProfile,
    script: Sequence[str] | None,
    call: dict[str, Any],
) -> Conversation:
    """Plays the call out; `call` (call_log_id, call_id, agent_id) names it in every event."""
    conversation = Conversation()
    welcome = agent.config.get("welcome_message") or f"Hello, this is {agent.name}. How can I help?"
    conversation.say("agent", welcome)
    history: list[Message] = [Message.assistant(welcome)]
    for line in script or DEFAULT_SCRIPT:
        asked_at = conversation.say("caller", line)
        history.append(Message.user(line))
        result = await engine.respond(agent, history)
        history.extend(result.messages)
        conversation.usage += result.usage
        conversation.cost += result.cost
        if result.action is None:
            conversation.questions.append(line)
        used = [record.name for record in result.tool_calls]
        if result.source == "knowledge_base" or "search_knowledge" in used:
            conversation.answered_from_knowledge += 1
        conversation.tools_used.extend(
            record.name for record in result.tool_calls if record.kind in _REPORTED_TOOL_KINDS
        )
        reply_at = conversation.say("agent", result.reply) if result.reply else asked_at
        for event_type, data in result.events:
            stamp = asked_at if event_type == "agent.handoff" else reply_at
            conversation.events.append((event_type, {**call, **data, "timestamp": stamp}))
        if result.action is not None:
            conversation.handed_off = result.action.kind == "handoff"
            break
    return conversation


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
