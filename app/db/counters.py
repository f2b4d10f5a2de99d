"""Exact per-organization row counts, kept by database triggers.

`total_count` on every list would otherwise be a `count(*)` over the organization's rows. Triggers
keep the counts in the same transaction as the write, whatever path wrote the rows (API, COPY,
cascades), so a total is a short indexed sum. A counted table may also be counted per label
(contacts per tag), which makes the total of a tag-filtered list as cheap as the unfiltered one.

PostgreSQL: statement-level triggers read the statement's transition tables and insert one
delta row per (organization, label) the statement changed. Writers only ever insert, so the
cost is linear in the rows written (one aggregate per statement, not one counter update per
row) and concurrent writers of one organization never wait on each other. The total is the sum
of a key's rows; to keep that sum short, a statement folds a key's rows into one once the key
has more than FOLD_AFTER of them, only when it gets the organization's advisory lock without
waiting (a writer never waits for a fold) and only in READ COMMITTED (a fold under a snapshot
could fail the writer's transaction on a concurrent fold).

SQLite: row-level triggers update one row per organization and table (slot 0), without labels;
SQLite runs one writer at a time and updates a row in place, so this is already linear and
correct.
"""

from __future__ import annotations

import re

from sqlalchemy import BigInteger, ColumnElement, ScalarSelect, String, bindparam, func, select
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base
from app.db.prepared import constant

# A key folds when it holds more rows than this: a total sums at most about this many rows
# plus those of writers still in flight.
FOLD_AFTER = 8
# Advisory lock class of counter folds (the object id is a hash of the organization id).
FOLD_LOCK_CLASS = 0x5B0C
SLOT_SEQUENCE = "resource_counter_slots"
# The label of a whole table's count; a label of a row (a contact's tag) is never empty.
WHOLE = ""


class ResourceCounter(Base):
    __tablename__ = "resource_counters"

    organization_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    resource: Mapped[str] = mapped_column(String(64), primary_key=True)
    label: Mapped[str] = mapped_column(String(255), primary_key=True)
    # PostgreSQL: one delta row per statement and key (numbered from SLOT_SEQUENCE) until
    # folded; SQLite: always 0.
    slot: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    count: Mapped[int] = mapped_column(BigInteger)


def counted_total(resource: str, label: ColumnElement[str]) -> ScalarSelect[int]:
    """The exact number of `resource` rows of the organization bound as `org_id` that carry
    `label` (WHOLE: all of them), as a scalar subquery without values (prepared-safe)."""
    return (
        select(func.coalesce(func.sum(ResourceCounter.count), constant(0)))
        .where(
            ResourceCounter.organization_id == bindparam("org_id"),
            ResourceCounter.resource == constant(resource),
            ResourceCounter.label == label,
        )
        .scalar_subquery()
    )


_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


def _checked(*names: str) -> None:
    for name in names:
        if not _IDENTIFIER.match(name):
            raise ValueError(f"not a plain identifier: {name!r}")


def _postgres_changes(table: str, label_array: str | None, operation: str) -> str:
    """SELECT organization_id, label, n: what one statement changed, from its transition
    tables (new_rows counted +1, old_rows -1)."""
    sources = {"INSERT": [("new_rows", "")], "DELETE": [("old_rows", "-")]}.get(
        operation, [("new_rows", ""), ("old_rows", "-")]
    )
    parts = []
    for rows, sign in sources:
        parts.append(
            f"SELECT organization_id, '' AS label, {sign}count(*) AS n "
            f"FROM {rows} GROUP BY organization_id"
        )
        if label_array:
            # Each label once per row, even if a bulk path stored duplicates.
            parts.append(
                f"SELECT r.organization_id, l.label, {sign}count(*) AS n FROM {rows} r "
                f"CROSS JOIN LATERAL (SELECT DISTINCT value FROM "
                f"jsonb_array_elements_text(r.{label_array})) AS l(label) "
                f"GROUP BY r.organization_id, l.label"
            )
    return " UNION ALL ".join(parts)


def _postgres_function(table: str, label_array: str | None) -> str:
    branches = []
    for operation in ("INSERT", "DELETE", "UPDATE"):
        if operation == "UPDATE" and not label_array:
            continue
        branches.append(
            f"""  IF TG_OP = '{operation}' THEN
    WITH changes AS ({_postgres_changes(table, label_array, operation)}),
    written AS (
      INSERT INTO resource_counters (organization_id, resource, label, slot, count)
      SELECT organization_id, '{table}', label, nextval('{SLOT_SEQUENCE}'), sum(n)
      FROM changes GROUP BY organization_id, label HAVING sum(n) <> 0
      RETURNING organization_id, label
    )
    SELECT array_agg(organization_id), array_agg(label) INTO orgs, labels FROM written;
  END IF;"""
        )
    body = "\n".join(branches)
    return f"""
CREATE OR REPLACE FUNCTION sb_count_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  orgs text[];
  labels text[];
BEGIN
{body}
  IF orgs IS NULL OR current_setting('transaction_isolation') <> 'read committed' THEN
    RETURN NULL;
  END IF;
  -- Fold the keys this statement touched that hold too many rows, where the organization's
  -- fold lock is free (never waiting for it).
  WITH crowded AS (
    SELECT k.organization_id, k.label
    FROM unnest(orgs, labels) AS k(organization_id, label)
    WHERE (
      SELECT count(*) FROM (
        SELECT 1 FROM resource_counters c
        WHERE c.organization_id = k.organization_id AND c.resource = '{table}'
          AND c.label = k.label
        LIMIT {FOLD_AFTER + 1}
      ) AS present
    ) > {FOLD_AFTER}
  ),
  locked AS (
    SELECT organization_id, label FROM crowded
    WHERE pg_try_advisory_xact_lock({FOLD_LOCK_CLASS}, hashtext(organization_id))
  ),
  gone AS (
    DELETE FROM resource_counters c USING locked
    WHERE c.organization_id = locked.organization_id AND c.resource = '{table}'
      AND c.label = locked.label
    RETURNING c.organization_id, c.label, c.count
  )
  INSERT INTO resource_counters (organization_id, resource, label, slot, count)
  SELECT organization_id, '{table}', label, nextval('{SLOT_SEQUENCE}'), sum(count)
  FROM gone GROUP BY organization_id, label HAVING sum(count) <> 0;
  RETURN NULL;
END $$
"""


def _backfill(table: str, label_array: str | None, dialect: str) -> list[str]:
    slot = f"nextval('{SLOT_SEQUENCE}')" if dialect == "postgresql" else "0"
    statements = [
        "INSERT INTO resource_counters (organization_id, resource, label, slot, count) "
        f"SELECT organization_id, '{table}', '', {slot}, count(*) FROM {table} "
        "GROUP BY organization_id"
    ]
    if label_array:
        if dialect == "postgresql":
            labels = (
                f"SELECT DISTINCT r.id, r.organization_id, l.label FROM {table} r "
                f"CROSS JOIN LATERAL jsonb_array_elements_text(r.{label_array}) AS l(label)"
            )
        else:
            labels = (
                f"SELECT DISTINCT r.id, r.organization_id, l.value AS label FROM {table} r, "
                f"json_each(r.{label_array}) AS l"
            )
        statements.append(
            "INSERT INTO resource_counters (organization_id, resource, label, slot, count) "
            f"SELECT organization_id, '{table}', label, {slot}, count(*) FROM ({labels}) AS t "
            "GROUP BY organization_id, label"
        )
    return statements


def _sqlite_triggers(table: str) -> list[str]:
    def bump(row: str, delta: str) -> str:
        return (
            "INSERT INTO resource_counters (organization_id, resource, label, slot, count) "
            f"VALUES ({row}.organization_id, '{table}', '', 0, {delta}) "
            "ON CONFLICT (organization_id, resource, label, slot) "
            f"DO UPDATE SET count = count + {delta};"
        )

    return [
        f"CREATE TRIGGER {table}_count_insert AFTER INSERT ON {table} BEGIN {bump('NEW', '1')} END",
        f"CREATE TRIGGER {table}_count_delete AFTER DELETE ON {table} BEGIN "
        f"{bump('OLD', '-1')} END",
    ]


def counter_trigger_ddl(table: str, dialect: str, label_array: str | None = None) -> list[str]:
    """Statements that start counting `table` (which has an organization_id column), per
    label too when `label_array` names a JSON array column of text labels."""
    _checked(table, *([label_array] if label_array else []))
    # Names are checked identifiers given by a migration, never user input.
    if dialect == "postgresql":
        statements = [
            f"CREATE SEQUENCE IF NOT EXISTS {SLOT_SEQUENCE}",
            _postgres_function(table, label_array),
            f"CREATE TRIGGER {table}_count_insert AFTER INSERT ON {table} "
            f"REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION sb_count_{table}()",
            f"CREATE TRIGGER {table}_count_delete AFTER DELETE ON {table} "
            f"REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION sb_count_{table}()",
        ]
        if label_array:
            statements.append(
                f"CREATE TRIGGER {table}_count_update AFTER UPDATE ON {table} "
                f"REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT "
                f"EXECUTE FUNCTION sb_count_{table}()"
            )
    else:
        # SQLite counts whole tables only: its lists scan the organization's rows anyway, and
        # a label row per tag made each tagged write several upserts dearer.
        label_array = None
        statements = _sqlite_triggers(table)
    return [*statements, *_backfill(table, label_array, dialect)]


def drop_counter_trigger_ddl(table: str, dialect: str) -> list[str]:
    _checked(table)
    if dialect == "postgresql":
        return [
            *(
                f"DROP TRIGGER IF EXISTS {table}_count_{operation} ON {table}"
                for operation in ("insert", "delete", "update")
            ),
            f"DROP FUNCTION IF EXISTS sb_count_{table}()",
        ]
    return [
        f"DROP TRIGGER IF EXISTS {table}_count_{operation}"
        for operation in ("insert", "delete", "update")
    ]


# --- as migrations 0002-0008 wrote it (row-level, one row per key); 0009 replaces it ---------

_LEGACY_POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION sb_count_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO resource_counters (organization_id, resource, count)
    VALUES (NEW.organization_id, TG_TABLE_NAME, 1)
    ON CONFLICT (organization_id, resource)
    DO UPDATE SET count = resource_counters.count + 1;
  ELSE
    UPDATE resource_counters SET count = count - 1
    WHERE organization_id = OLD.organization_id AND resource = TG_TABLE_NAME;
  END IF;
  RETURN NULL;
END $$
"""


def legacy_counter_trigger_ddl(table: str, dialect: str) -> list[str]:
    """Row-level counting as migrations 0002-0008 created it (frozen: they replay it)."""
    if not _IDENTIFIER.match(table):
        raise ValueError(f"not a plain table name: {table!r}")
    # The table name is a checked identifier given by a migration, never user input.
    backfill = (
        "INSERT INTO resource_counters (organization_id, resource, count) "
        f"SELECT organization_id, '{table}', count(*) FROM {table} "
        "GROUP BY organization_id"
    )
    if dialect == "postgresql":
        return [
            _LEGACY_POSTGRES_FUNCTION,
            f"CREATE TRIGGER {table}_count AFTER INSERT OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION sb_count_rows()",
            backfill,
        ]
    return [
        f"CREATE TRIGGER {table}_count_insert AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO resource_counters (organization_id, resource, count) "
        f"VALUES (NEW.organization_id, '{table}', 1) "
        f"ON CONFLICT (organization_id, resource) DO UPDATE SET count = count + 1; END",
        f"CREATE TRIGGER {table}_count_delete AFTER DELETE ON {table} BEGIN "
        f"UPDATE resource_counters SET count = count - 1 "
        f"WHERE organization_id = OLD.organization_id AND resource = '{table}'; END",
        backfill,
    ]


def legacy_drop_counter_trigger_ddl(table: str, dialect: str) -> list[str]:
    if dialect == "postgresql":
        return [f"DROP TRIGGER IF EXISTS {table}_count ON {table}"]
    return [
        f"DROP TRIGGER IF EXISTS {table}_count_insert",
        f"DROP TRIGGER IF EXISTS {table}_count_delete",
    ]
