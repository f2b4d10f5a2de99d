"""Prepared statements carry no values: a value captured while building one is refused, so it
can never be served to another organization."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import bindparam, func, inspect, select, update
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.contacts.models import Contact
from app.conversations.models import Message
from app.core.clock import utcnow
from app.db.prepared import (
    ON_DRIVER,
    READS_ONLY,
    PreparedStatement,
    ValueInPreparedStatement,
    constant,
    insert_object,
    prepared,
)
from app.db.runner import SessionRunner
from app.kit.outbox_models import OutboxJob
from app.organizations.models import Organization
from app.organizations.service import create_organization


def test_a_value_captured_in_the_build_lambda_is_refused() -> None:
    org = str(uuid.uuid4())
    with pytest.raises(ValueInPreparedStatement, match="no values at build time"):
        prepared(
            ("test_prepared", "captured"),
            lambda: select(Contact.id).where(Contact.organization_id == org),
        )
    # Nothing was cached under the shape: asking again refuses again.
    with pytest.raises(ValueInPreparedStatement):
        prepared(
            ("test_prepared", "captured"),
            lambda: select(Contact.id).where(Contact.organization_id == org),
        )


def test_named_parameters_with_a_value_and_dml_values_are_refused() -> None:
    with pytest.raises(ValueInPreparedStatement, match="org_id"):
        PreparedStatement(
            select(Contact.id).where(Contact.organization_id == bindparam("org_id", "x"))
        )
    jobs = OutboxJob.__table__
    with pytest.raises(ValueInPreparedStatement):
        PreparedStatement(update(jobs).where(jobs.c.id == bindparam("job_id")).values(starts=0))
    with pytest.raises(ValueInPreparedStatement):
        PreparedStatement(select(Contact.id).limit(5))


def test_constants_only_take_plain_text() -> None:
    with pytest.raises(ValueError, match="plain text"):
        constant("x'; DROP TABLE contacts; --")


@pytest.fixture(params=[True, False], ids=["driver", "sqlalchemy"])
async def marked_session(
    request: pytest.FixtureRequest, sessionmaker: async_sessionmaker[AsyncSession]
) -> AsyncIterator[AsyncSession]:
    """A session marked to run prepared statements on its driver, as Resources.session marks
    its sessions on PostgreSQL (SQLite ignores the mark), or not marked."""
    async with sessionmaker() as session:
        session.info[ON_DRIVER] = request.param
        yield session


async def test_one_statement_serves_each_organization_its_own_rows(
    marked_session: AsyncSession,
) -> None:
    first = await create_organization(marked_session, "First")
    second = await create_organization(marked_session, "Second")
    for organization, name in ((first, "Ada"), (second, "Grace")):
        marked_session.add(
            Contact(organization_id=organization.id, phone_number="+14155550100", name=name)
        )
    await marked_session.flush()
    read = prepared(
        ("test_prepared", "names"),
        lambda: select(Contact.name).where(
            Contact.organization_id == bindparam("org_id"),
            Contact.phone_number == constant("+14155550100"),
        ),
    )
    assert [row.name for row in await read.all(marked_session, {"org_id": first.id})] == ["Ada"]
    assert [row.name for row in await read.all(marked_session, {"org_id": second.id})] == ["Grace"]
    # A missing value is an error, never a default.
    with pytest.raises((KeyError, StatementError), match="org_id"):
        await read.all(marked_session, {})
    await marked_session.rollback()


async def test_insert_object_writes_a_new_object_as_a_flush_would(
    marked_session: AsyncSession,
) -> None:
    organization = await create_organization(marked_session, "First")
    contact = Contact(organization_id=organization.id, phone_number="+14155550100", name="Ada")
    await insert_object(marked_session, contact)
    # The Python-side defaults, filled as a flush fills them: one clock reading for both.
    assert contact.id
    assert (contact.tags, contact.notes) == ([], None)
    assert contact.created_at == contact.updated_at
    assert inspect(contact).persistent
    assert not marked_session.new
    contact.name = "Grace"
    await marked_session.flush()  # an UPDATE of the row written, not a second INSERT
    with pytest.raises(ValueError, match="new object"):
        await insert_object(marked_session, contact)
    marked_session.expunge_all()
    stored = await marked_session.get(Contact, contact.id)
    assert stored is not None
    assert (stored.name, stored.tags, stored.created_at) == ("Grace", [], contact.created_at)


async def test_insert_object_refuses_to_guess_a_server_side_default(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    async with sessionmaker() as session:
        # `livemode` has only a server default: leaving it out must not write NULL.
        message = Message(organization_id="o", ticket_id="t", direction="outbound", kind="text")
        message.status = "pending"
        with pytest.raises(ValueError, match="livemode"):
            await insert_object(session, message)


async def test_each_transaction_of_a_session_runs_its_statements_on_its_own_connection(
    engine: AsyncEngine,
) -> None:
    """The driver connection found in one transaction is never used after it ends: a write
    in the next transaction is undone by that transaction's rollback."""
    rename = PreparedStatement(
        update(Organization)
        .where(Organization.id == bindparam("org_id"))
        .values(name=bindparam("name"), updated_at=bindparam("now"))
    )
    read = PreparedStatement(
        select(Organization.name).where(Organization.id == bindparam("org_id"))
    )

    async def name_of(session: AsyncSession, organization_id: str) -> str:
        row = await read.first(session, {"org_id": organization_id})
        assert row is not None
        return str(row.name)

    async with AsyncSession(engine, expire_on_commit=False) as session:
        session.info[ON_DRIVER] = True
        org_id = (await create_organization(session, "First")).id
        await session.commit()
        try:
            now = utcnow()
            await rename.execute(session, {"org_id": org_id, "name": "Kept", "now": now})
            await session.commit()
            await rename.execute(session, {"org_id": org_id, "name": "Undone", "now": now})
            assert await name_of(session, org_id) == "Undone"
            await session.rollback()
            assert await name_of(session, org_id) == "Kept"
            await session.rollback()
        finally:
            await session.delete(await session.get(Organization, org_id))
            await session.commit()


async def test_a_lock_taken_by_the_first_statement_on_the_driver_is_held_until_commit(
    engine: AsyncEngine,
) -> None:
    locked = PreparedStatement(
        select(Organization.name).where(Organization.id == bindparam("org_id")).with_for_update()
    )
    async with AsyncSession(engine, expire_on_commit=False) as setup:
        org_id = (await create_organization(setup, "Locked")).id
        await setup.commit()
    try:
        async with AsyncSession(engine) as holder, AsyncSession(engine) as other:
            holder.info[ON_DRIVER] = True
            assert await locked.first(holder, {"org_id": org_id}) is not None
            if engine.dialect.name == "postgresql":  # SQLite has one writer and no row locks
                with pytest.raises(DBAPIError, match="could not obtain lock"):
                    await other.execute(
                        select(Organization.id)
                        .where(Organization.id == org_id)
                        .with_for_update(nowait=True)
                    )
                await other.rollback()
            await holder.commit()
            # Released with the holder's commit.
            assert await other.scalar(
                select(Organization.id).where(Organization.id == org_id).with_for_update()
            )
            await other.rollback()
    finally:
        async with AsyncSession(engine) as cleanup:
            await cleanup.delete(await cleanup.get(Organization, org_id))
            await cleanup.commit()


@pytest.mark.parametrize("mark", [True, READS_ONLY, None], ids=["writes", "reads-only", "none"])
async def test_a_session_runner_combines_writes_only_on_its_sessions_driver(
    engine: AsyncEngine, mark: object
) -> None:
    """Data-modifying CTEs go only where the session's statements run on its asyncpg
    connection (through SQLAlchemy a bind named like an UPDATE's column becomes an extra
    SET), and there they run in the session's transaction."""
    renamed = (
        update(Organization)
        .where(Organization.id == bindparam("org_id"))
        .values(name=bindparam("name"), updated_at=bindparam("now"))
        .returning(Organization.id)
        .cte("renamed")
    )
    rename_and_count = PreparedStatement(select(func.count().label("renamed")).select_from(renamed))
    async with AsyncSession(engine, expire_on_commit=False) as session:
        if mark is not None:
            session.info[ON_DRIVER] = mark
        runner = SessionRunner(session)
        combines = mark is True and engine.dialect.name == "postgresql"
        assert runner.combines_writes is combines
        if not combines:
            return
        org_id = (await create_organization(session, "First")).id
        await session.commit()
        try:
            params = {"org_id": org_id, "name": "Undone", "now": utcnow()}
            assert await runner.fetch(rename_and_count, params) == [(1,)]
            await session.rollback()
            kept = await session.get(Organization, org_id)
            assert kept is not None
            assert kept.name == "First"
        finally:
            await session.delete(await session.get(Organization, org_id))
            await session.commit()
