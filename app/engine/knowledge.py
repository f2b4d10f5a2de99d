"""What an agent knows: its organization's knowledge base, through the knowledge service's
hybrid search (lexical ranking fused with vectors when an embedder is set)."""

from __future__ import annotations

from dataclasses import dataclass

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.knowledge.runtime import knowledge_runtime
from app.knowledge.schemas import KnowledgeSearch
from app.knowledge.service import search
from app.resources import Resources

PASSAGES_PER_QUESTION = 3


@dataclass(frozen=True, slots=True)
class Passage:
    text: str
    document_id: str | None = None
    file_name: str | None = None


def agent_subject(organization_id: str, agent_id: str | None, livemode: bool) -> Subject:
    """The agent reading its organization's knowledge while it talks (no API key involved:
    the search reads only the organization's chunks)."""
    return Subject(
        organization_id=organization_id,
        principal_id=f"agent:{agent_id or 'none'}",
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=livemode,
    )


async def knowledge_lookup(resources: Resources, subject: Subject, question: str) -> list[Passage]:
    """The organization's passages for `question`, best first."""
    async with resources.session(writes=False) as session:
        results = await search(
            session,
            knowledge_runtime(resources.settings),
            subject,
            KnowledgeSearch(query=question[:500], top_k=PASSAGES_PER_QUESTION),
        )
    return [
        Passage(text=item["text"], document_id=item["document_id"], file_name=item["file_name"])
        for item in results
    ]
