"""`switchboard …`: serve, migrate, and the operator commands (one JSON object per creation)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.config import Settings, get_settings
from app.core.jsonutil import dumps_str
from app.db.engine import create_engine, create_sessionmaker, sqlite_file
from app.kit.errors import DomainError

T = TypeVar("T")


def _print(payload: dict[str, Any]) -> None:
    sys.stdout.write(dumps_str(payload) + "\n")
    sys.stdout.flush()


class NotMigrated(Exception):
    """The database is missing or behind the code's migrations: one line says which database
    (a relative SQLite path resolved, as run from another directory it names another file;
    never the credentials) and what to run."""

    def __init__(self, database_url: str) -> None:
        super().__init__(
            f"the database {shown_database_url(database_url)} is not migrated; run "
            "`switchboard migrate` first (or `switchboard serve`, which migrates at start)"
        )


def shown_database_url(database_url: str) -> str:
    """The URL as the process resolves it, without user name or password."""
    url = make_url(database_url)._replace(username=None, password=None)  # set() keeps None
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        url = url.set(database=str(Path(url.database).resolve()))
    return url.render_as_string(hide_password=False)


def _sqlite_file_missing(database_url: str) -> bool:
    """True for a SQLite URL whose file does not exist (connecting would create it empty)."""
    database = sqlite_file(database_url)
    return database is not None and not Path(database.removeprefix("file:")).exists()


async def _require_migrated(engine: AsyncEngine, database_url: str) -> None:
    """Operator commands work on a migrated database only. They do not migrate it themselves:
    a schema change is a deliberate step, and pointing DATABASE_URL at the wrong database
    must not quietly build a new one there."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from app.db.migrate import alembic_config

    heads = set(ScriptDirectory.from_config(alembic_config(database_url)).get_heads())
    async with engine.connect() as connection:
        current = await connection.run_sync(
            lambda sync: set(MigrationContext.configure(sync).get_current_heads())
        )
    if current != heads:
        raise NotMigrated(database_url)


def _in_transaction(settings: Settings, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    if _sqlite_file_missing(settings.database_url):
        raise NotMigrated(settings.database_url)

    async def run() -> T:
        engine = create_engine(settings.database_url, null_pool=True)
        try:
            await _require_migrated(engine, settings.database_url)
            async with create_sessionmaker(engine)() as session:
                if engine.dialect.name == "sqlite":
                    # Take the write lock first, as REST writes do: a read-then-write
                    # transaction must not lose its upgrade to a concurrent writer.
                    await session.connection(execution_options={"sqlite_begin": "IMMEDIATE"})
                result = await work(session)
                await session.commit()
                return result
        finally:
            await engine.dispose()

    return asyncio.run(run())


def cmd_migrate(settings: Settings, _args: argparse.Namespace) -> int:
    from app.db.migrate import upgrade

    upgrade(settings.database_url)
    _print({"migrated": True})
    return 0


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from app.db.migrate import upgrade
    from app.kit.body import WEBSOCKET_MAX_MESSAGE_BYTES
    from app.observability import configure_logging

    configure_logging(settings.log_level)
    settings.resolved_secret_key()  # generate var/secret.key once, before workers fork
    upgrade(settings.database_url)
    # Without Redis the jobs run in the server's own process (the embedded mode).
    embedded = not settings.redis_url and not args.no_worker
    factory = "workers.main:create_embedded_app" if embedded else "workers.main:create_api_app"
    if args.workers == 1:
        # One process: live calls' media streams drain on SIGTERM (app/voice/server.py).
        from app.voice.server import serve

        serve(factory, host=args.host, port=args.port, log_level=settings.log_level)
        return 0
    uvicorn.run(
        factory,
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=settings.log_level,
        access_log=False,
        proxy_headers=True,
        # Websocket messages are read whole before anything looks at them: not past 1 MiB.
        ws_max_size=WEBSOCKET_MAX_MESSAGE_BYTES,
    )
    return 0


def cmd_voice(settings: Settings, args: argparse.Namespace) -> int:
    """A process that terminates live calls' media streams only (app/voice/server.py)."""
    from app.observability import configure_logging
    from app.voice.server import serve

    configure_logging(settings.log_level)
    settings.resolved_secret_key()
    serve(
        "app.voice.server:create_voice_app",
        host=args.host,
        port=args.port,
        log_level=settings.log_level,
    )
    return 0


def cmd_orgs_create(settings: Settings, args: argparse.Namespace) -> int:
    from app.access.scopes import Scope
    from app.auth.service import create_api_key
    from app.organizations.service import create_organization

    async def work(session: AsyncSession) -> dict[str, Any]:
        organization = await create_organization(session, args.name)
        created = await create_api_key(
            session,
            organization.id,
            name="Default key",
            scopes=[Scope.FULL_ACCESS.value],
            secret_key=settings.resolved_secret_key(),
        )
        # key_id: what `switchboard keys revoke` takes, should the key ever leak (`keys
        # create` prints it too, beside its `id`).
        return {
            "organization_id": organization.id,
            "api_key": created.secret,
            "key_id": created.key.id,
        }

    _print(_in_transaction(settings, work))
    return 0


def _parse_datetime(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 timestamp: {value}") from exc
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError("--expires-at needs a timezone (e.g. Z or +00:00)")
    return parsed


def cmd_keys_create(settings: Settings, args: argparse.Namespace) -> int:
    from app.auth.service import create_api_key
    from app.core.clock import isoformat

    async def work(session: AsyncSession) -> dict[str, Any]:
        created = await create_api_key(
            session,
            args.org,
            name=args.name,
            scopes=args.scopes.split(","),
            secret_key=settings.resolved_secret_key(),
            livemode=args.live,
            expires_at=args.expires_at,
        )
        key = created.key
        return {
            "id": key.id,
            "key_id": key.id,  # the name `orgs create` prints it under
            "api_key": created.secret,
            "scopes": key.scopes,
            "livemode": key.livemode,
            "expires_at": isoformat(key.expires_at),
        }

    _print(_in_transaction(settings, work))
    return 0


def cmd_keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    from app.auth.service import revoke_api_key
    from app.core.clock import isoformat

    async def work(session: AsyncSession) -> dict[str, Any]:
        key = await revoke_api_key(session, None, args.key_id)
        return {"id": key.id, "revoked_at": isoformat(key.revoked_at)}

    _print(_in_transaction(settings, work))
    return 0


def cmd_users_create(settings: Settings, args: argparse.Namespace) -> int:
    from app.organizations.service import create_user

    password = sys.stdin.readline().rstrip("\r\n")

    async def work(session: AsyncSession) -> dict[str, Any]:
        user = await create_user(session, args.org, args.email, password)
        return {"user_id": user.id}

    _print(_in_transaction(settings, work))
    return 0


def cmd_export_schema(_settings: Settings, args: argparse.Namespace) -> int:
    from app.graphql.schema import schema_sdl

    Path(args.output).write_text(schema_sdl())
    _print({"written": args.output})
    return 0


def cmd_export_openapi(_settings: Settings, args: argparse.Namespace) -> int:
    from rest_compat.app import OPERATIONS
    from rest_compat.openapi import openapi_text

    Path(args.output).write_text(openapi_text(OPERATIONS))
    _print({"written": args.output})
    return 0


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    """Dramatiq worker processes on Redis, each with `--threads` threads."""
    if not settings.redis_url:
        sys.stderr.write("error: switchboard worker needs REDIS_URL\n")
        return 1
    # Dramatiq's prefetch is its documented `dramatiq_queue_prefetch` variable, read when
    # Dramatiq is first imported; the worker processes are forked from this one, so it is set
    # before that import (or, if Dramatiq is already imported, they are spawned afresh).
    os.environ["dramatiq_queue_prefetch"] = str(settings.worker_prefetch)  # noqa: SIM112
    # The processes size their database pool from SWITCHBOARD_WORKER_THREADS
    # (workers/runtime.py): `--threads` sets it for them, so threads and pool agree.
    threads = args.threads or settings.worker_threads
    os.environ["SWITCHBOARD_WORKER_THREADS"] = str(threads)
    spawn = ["--use-spawn"] if "dramatiq.worker" in sys.modules else []
    from dramatiq.cli import main as dramatiq_main
    from dramatiq.cli import make_argument_parser

    dramatiq_args = make_argument_parser().parse_args(  # type: ignore[no-untyped-call]
        [
            "workers.process",
            "--processes",
            str(args.processes),
            "--threads",
            str(threads),
            # How long a stopping worker process waits for its running jobs (10 min by
            # Dramatiq's default); workers/stopping.py bounds the whole stop.
            "--worker-shutdown-timeout",
            str(int(settings.worker_shutdown_seconds * 1000)),
            "--skip-logging",
            *spawn,
        ]
    )
    return int(dramatiq_main(dramatiq_args) or 0)  # type: ignore[no-untyped-call]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchboard", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the API (and, without REDIS_URL, a worker)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument(
        "--no-worker", action="store_true", help="do not run the in-process job worker"
    )
    serve.set_defaults(handler=cmd_serve)

    voice = commands.add_parser(
        "voice", help="terminate live calls' media streams (scaled apart from the API)"
    )
    voice.add_argument("--host", default="127.0.0.1")
    voice.add_argument("--port", type=int, default=8001)
    voice.set_defaults(handler=cmd_voice)

    worker = commands.add_parser("worker", help="run job workers on REDIS_URL")
    worker.add_argument("--processes", type=int, default=1)
    worker.add_argument(
        "--threads", type=int, default=None, help="default: SWITCHBOARD_WORKER_THREADS (4)"
    )
    worker.set_defaults(handler=cmd_worker)

    commands.add_parser("migrate", help="apply database migrations").set_defaults(
        handler=cmd_migrate
    )

    orgs = commands.add_parser("orgs", help="organizations").add_subparsers(
        dest="action", required=True
    )
    orgs_create = orgs.add_parser("create", help="create an organization and a full_access key")
    orgs_create.add_argument("--name", required=True)
    orgs_create.set_defaults(handler=cmd_orgs_create)

    keys = commands.add_parser("keys", help="API keys").add_subparsers(dest="action", required=True)
    keys_create = keys.add_parser("create", help="create an API key")
    keys_create.add_argument("--org", required=True)
    keys_create.add_argument("--name", required=True)
    keys_create.add_argument("--scopes", required=True, help="comma-separated, e.g. agents:read")
    keys_create.add_argument("--live", action="store_true", help="a live key (default: test)")
    keys_create.add_argument("--expires-at", type=_parse_datetime, default=None)
    keys_create.set_defaults(handler=cmd_keys_create)
    keys_revoke = keys.add_parser("revoke", help="revoke an API key at once")
    keys_revoke.add_argument("key_id")
    keys_revoke.set_defaults(handler=cmd_keys_revoke)

    users = commands.add_parser("users", help="organization users").add_subparsers(
        dest="action", required=True
    )
    users_create = users.add_parser("create", help="create a user; password read from stdin")
    users_create.add_argument("--org", required=True)
    users_create.add_argument("--email", required=True)
    users_create.set_defaults(handler=cmd_users_create)

    export = commands.add_parser("export-schema", help="write the GraphQL SDL")
    export.add_argument("--output", default="schema.graphql")
    export.set_defaults(handler=cmd_export_schema)
    openapi = commands.add_parser(
        "export-openapi", help="write the OpenAPI document of /api/v1 (openapi.json)"
    )
    openapi.add_argument("--output", default="openapi.json")
    openapi.set_defaults(handler=cmd_export_openapi)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = get_settings()
    try:
        return int(args.handler(settings, args))
    except DomainError as exc:
        sys.stderr.write(f"error: {exc.message}\n")
        return 1
    except NotMigrated as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except (OperationalError, InterfaceError, OSError) as exc:
        # Unreachable or refused database: one line, not a driver traceback.
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        sys.stderr.write(f"error: cannot use the database at DATABASE_URL: {reason}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
