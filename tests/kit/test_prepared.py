"""Prepared statements carry no values: a value captured while building one is refused, so it
can never be served to another organization."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.contacts.models import Contact
from app.db.prepared import (
    ON_DRIVER,
    PreparedStatement,
    ValueInPreparedStatement,
    constant,
    prepared,
)
from app.kit.outbox_models import OutboxJob
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


@pytest.mark.parametrize("on_driver", [True, False], ids=["driver", "sqlalchemy"])
async def test_one_statement_serves_each_organization_its_own_rows(
    sessionmaker: async_sessionmaker[AsyncSession], on_driver: bool
) -> None:
    async with sessionmaker() as session:
        # As Resources.session marks its sessions on PostgreSQL (SQLite ignores the mark).
        session.info[ON_DRIVER] = on_driver
        first = await create_organization(session, "First")
        second = await create_organization(session, "Second")
        for organization, name in ((first, "Ada"), (second, "Grace")):
            session.add(
                Contact(organization_id=organization.id, phone_number="+14155550100", name=name)
            )
        await session.flush()
        read = prepared(
            ("test_prepared", "names"),
            lambda: select(Contact.name).where(
                Contact.organization_id == bindparam("org_id"),
                Contact.phone_number == constant("+14155550100"),
            ),
        )
        assert [row.name for row in await read.all(session, {"org_id": first.id})] == ["Ada"]
        assert [row.name for row in await read.all(session, {"org_id": second.id})] == ["Grace"]
        # A missing value is an error, never a default.
        with pytest.raises((KeyError, StatementError), match="org_id"):
            await read.all(session, {})
        await session.rollback()
