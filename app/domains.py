"""Every domain of Switchboard, one line each.

A domain is one package under `app/` (models, repository, service, schemas and, where it has
them, its surfaces and jobs). Adding a domain is its own folder plus one line here; the kit
collects the rest from the package (see docs/adding-a-resource.md).
"""

from __future__ import annotations

# The order is that of the merged root fields in schema.graphql and of the REST routes in
# the OpenAPI document; a new domain goes at the end.
DOMAINS: tuple[str, ...] = (
    "app.organizations",
    "app.agents",
    "app.calls",
    "app.channels",
    "app.contacts",
    "app.inbox",
    "app.quick_replies",
    "app.webhooks",
    "app.templates",
    "app.conversations",
    "app.auth",
    "app.events",
    "app.knowledge",
    "app.campaigns",
    "app.provider_credentials",
    "app.agent_tests",
    "app.consent",
    "app.contact_imports",
)
