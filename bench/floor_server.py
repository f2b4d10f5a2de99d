"""The throughput floor: a bare Starlette app reading 20 contacts with raw asyncpg.

Run by ``bench/api_throughput.py`` as
``uvicorn --app-dir bench floor_server:app --workers 1 --no-access-log``.
Configuration comes from the environment:

* ``BENCH_DSN``: a plain ``postgresql://`` URL of a seeded database.
* ``BENCH_ORG_ID``: the organization whose contacts are listed.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

QUERY = (
    "SELECT id, organization_id, phone_number, name, tags, notes, custom_fields,"
    " created_at, updated_at FROM contacts WHERE organization_id=$1"
    " ORDER BY created_at DESC, id DESC LIMIT 20"
)


async def _init_connection(conn: asyncpg.Connection) -> None:
    """Decode jsonb into Python objects, as an application would."""
    await conn.set_type_codec(
        "jsonb",
        encoder=lambda value: orjson.dumps(value).decode(),
        decoder=orjson.loads,
        schema="pg_catalog",
    )


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Open the asyncpg pool (10 connections) for the lifetime of the app."""
    pool = await asyncpg.create_pool(
        os.environ["BENCH_DSN"], min_size=10, max_size=10, init=_init_connection
    )
    app.state.pool = pool
    app.state.org_id = os.environ["BENCH_ORG_ID"]
    try:
        yield
    finally:
        await pool.close()


async def list_contacts(request: Request) -> Response:
    """Return the organization's 20 newest contacts as ``{"data": [...]}``."""
    state: Any = request.app.state
    rows = await state.pool.fetch(QUERY, state.org_id)
    body = orjson.dumps({"data": [dict(row) for row in rows]})
    return Response(body, media_type="application/json")


app = Starlette(routes=[Route("/contacts", list_contacts)], lifespan=lifespan)
