"""Every query on organizations and users. Users of one organization go through its scope;
login (by e-mail) and tokens (by user id) find a user before any organization is known."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.kit.repository import OrgScopedRepository
from app.organizations.models import Organization, User


async def get_organization(session: AsyncSession, organization_id: str) -> Organization | None:
    return await session.get(Organization, organization_id)


async def lock_organization(session: AsyncSession, organization_id: str) -> None:
    """Serialises, until the transaction ends, the writers of one organization that check a
    count before they add (a per-organization limit): the second waits for the first to
    commit, then counts again. PostgreSQL: `FOR NO KEY UPDATE` on the organization's row,
    which rows referencing it do not wait for. SQLite's writers hold the database's write
    lock from their first statement (BEGIN IMMEDIATE) already."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(
            select(Organization.id)
            .where(Organization.id == organization_id)
            .with_for_update(key_share=True)
        )


async def find_user_by_email(session: AsyncSession, email: str) -> User | None:
    result = await session.execute(select(User).where(User.email == email.lower()))
    return result.scalar_one_or_none()


async def get_user(session: AsyncSession, user_id: str) -> User | None:
    return await session.get(User, user_id)


class UserRepository(OrgScopedRepository[User]):
    model = User
    resource = "User"

    async def by_ids(self, ids: list[str]) -> list[User]:
        result = await self._execute(self.scoped(select(User)).where(User.id.in_(ids)))
        return list(result.scalars())


async def users_by_ids(session: AsyncSession, organization_id: str, ids: list[str]) -> list[User]:
    """The organization's users among `ids`."""
    return await UserRepository(session, organization_id).by_ids(ids)
