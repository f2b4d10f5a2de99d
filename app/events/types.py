"""Every event type Switchboard emits, by who may receive it.

The catalogue lives with the events domain, so the domains that emit (webhooks, knowledge)
and the `events` subscription that streams them read one list and import no one else.
"""

from __future__ import annotations

# Exactly the list docs/api.md gives, in its order (the order error messages list them in).
SUBSCRIBABLE_EVENTS: tuple[str, ...] = (
    "message.received",
    "message.sent",
    "message.failed",
    "conversation.started",
    "conversation.closed",
    "lead.created",
    "lead.updated",
    "ticket.created",
    "ticket.assigned",
    "ticket.resolved",
    "ai.reply.generated",
    "ai.tool.executed",
    "agent.handoff",
    "call.started",
    "call.completed",
    "campaign.started",
    "campaign.completed",
    "campaign.message.delivered",
    "campaign.message.failed",
)

# Sent by the service itself, never subscribable: `POST /webhooks/{id}/test`, and the notice
# that a subscription was switched off.
WEBHOOK_TEST = "webhook.test"
WEBHOOK_DISABLED = "webhook.disabled"

# Streamed to GraphQL subscribers only (no webhook carries them).
DOCUMENT_UPDATED = "knowledge.document.updated"
KNOWLEDGE_EVENTS: tuple[str, ...] = (DOCUMENT_UPDATED,)
