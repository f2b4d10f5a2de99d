"""The tools every agent has: `search_knowledge` (`query`), `transfer_to_human` (`reason`)
and `end_conversation` (`reason`). The last two are control tools: calling one ends the
turn with a handoff or an end (app/engine/turn.py)."""

from __future__ import annotations

from app.engine.knowledge import Passage
from app.engine.types import ActionKind, ToolOutcome, ToolSpec

SEARCH_KNOWLEDGE = ToolSpec(
    name="search_knowledge",
    description="Search the business's knowledge base (documents it uploaded) for facts to "
    "answer the customer. Use it before saying you do not know.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to look for"}},
        "required": ["query"],
    },
    kind="builtin",
)
TRANSFER_TO_HUMAN = ToolSpec(
    name="transfer_to_human",
    description="Hand the conversation to a person of the team: when the customer asks for "
    "one, or when you cannot help.",
    parameters={
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "Why, in a few words"}},
        "required": ["reason"],
    },
    kind="builtin",
)
END_CONVERSATION = ToolSpec(
    name="end_conversation",
    description="End the conversation once the customer has what they need or says goodbye.",
    parameters={
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "Why, in a few words"}},
        "required": ["reason"],
    },
    kind="builtin",
)
BUILTIN_TOOLS = (SEARCH_KNOWLEDGE, TRANSFER_TO_HUMAN, END_CONVERSATION)
# Control tools and the action each takes.
CONTROL_TOOLS: dict[str, ActionKind] = {
    TRANSFER_TO_HUMAN.name: "handoff",
    END_CONVERSATION.name: "end",
}


def knowledge_outcome(passages: list[Passage], limit: int) -> ToolOutcome:
    """The passages found, numbered, as the model reads them."""
    if not passages:
        text = "Nothing in the knowledge base matches."
        return ToolOutcome(success=True, content=text, excerpt=text, data={"passages": []})
    lines = [
        f"[{index}] {passage.text}" + (f" (from {passage.file_name})" if passage.file_name else "")
        for index, passage in enumerate(passages, 1)
    ]
    text = "\n".join(lines)[:limit]
    return ToolOutcome(
        success=True,
        content=text,
        excerpt=text[:500],
        data={
            "passages": [{"document_id": p.document_id, "file_name": p.file_name} for p in passages]
        },
    )


def control_outcome(kind: ActionKind) -> ToolOutcome:
    text = "Transferring to a person." if kind == "handoff" else "Ending the conversation."
    return ToolOutcome(success=True, content=text, excerpt=text)
