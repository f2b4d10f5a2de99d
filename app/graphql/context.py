"""Per-request GraphQL context: one session (serialised by a lock), the caller, loaders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from strawberry.dataloader import DataLoader

from app.access.subject import PrincipalType, Subject
from app.graphql.errors import Forbidden, Unauthenticated
from app.resources import Resources

K = TypeVar("K")
V = TypeVar("V")


@dataclass
class Context:
    request: Request
    resources: Resources
    session: AsyncSession
    subject: Subject | None
    # Sibling fields resolve concurrently; one AsyncSession must not be used concurrently.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loaders: dict[str, Any] = field(default_factory=dict)

    def loader(self, name: str, load: Callable[[list[K]], Awaitable[list[V]]]) -> DataLoader[K, V]:
        """The request's one DataLoader called `name`, made with `load` on first use."""
        found = self.loaders.get(name)
        if found is None:
            found = self.loaders[name] = DataLoader(load_fn=load)
        return cast(DataLoader[K, V], found)

    @asynccontextmanager
    async def db(self) -> AsyncIterator[AsyncSession]:
        async with self.lock:
            yield self.session

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[AsyncSession]:
        """A mutation's own transaction: committed when the block succeeds, rolled back if not.

        The request's shared session reads without a transaction where it can; writes get a
        session of their own. The read session's open transaction (if any) ends first, so the
        write never nests inside it.
        """
        async with self.lock:
            await self.session.commit()
            async with self.resources.session(writes=True) as session:
                yield session
                await session.commit()

    @property
    def allow_private_urls(self) -> bool:
        """Whether user-supplied URLs may reach private addresses (the SSRF guard's switch)."""
        return self.resources.settings.allow_private_webhook_urls

    def require_subject(self) -> Subject:
        if self.subject is None:
            raise Unauthenticated()
        return self.subject

    def require_user(self) -> Subject:
        subject = self.require_subject()
        if subject.principal_type is not PrincipalType.USER:
            raise Forbidden("This operation requires an organization user (log in for a JWT)")
        return subject
