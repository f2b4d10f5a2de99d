"""Process-wide resources: engine, sessions, Redis, rate limiter. Built once per process."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.engine import create_engine, create_sessionmaker
from app.kit.ratelimit import RateLimiter, build_rate_limiter


@dataclass
class Resources:
    settings: Settings
    sessionmaker: async_sessionmaker[AsyncSession]
    rate_limiter: RateLimiter
    secret_key: str
    dialect_name: str
    engine: AsyncEngine | None = None
    redis: Redis | None = None
    # Reads outside an explicit transaction on PostgreSQL: no BEGIN/COMMIT round trips.
    # Off for tests, whose sessions live inside one rolled-back transaction.
    autocommit_reads: bool = False

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        sessionmaker: async_sessionmaker[AsyncSession] | None = None,
        dialect_name: str | None = None,
    ) -> Resources:
        """Open what the settings name; tests pass their own transaction-bound sessionmaker."""
        engine = None
        if sessionmaker is None:
            engine = create_engine(settings.database_url, pool_size=settings.db_pool_size)
            sessionmaker = create_sessionmaker(engine)
            dialect_name = engine.dialect.name
        redis = Redis.from_url(settings.redis_url) if settings.redis_url else None
        return cls(
            settings=settings,
            sessionmaker=sessionmaker,
            rate_limiter=build_rate_limiter(redis),
            secret_key=settings.resolved_secret_key(),
            dialect_name=dialect_name or "sqlite",
            engine=engine,
            redis=redis,
            autocommit_reads=engine is not None,
        )

    async def begin(self, session: AsyncSession, *, writes: bool) -> None:
        """Open the session's connection the way this kind of request needs.

        SQLite writers take the write lock up front (BEGIN IMMEDIATE) so a read-then-write
        transaction never fails to upgrade; PostgreSQL readers skip the transaction entirely.
        """
        if self.dialect_name == "sqlite":
            if writes:
                await session.connection(execution_options={"sqlite_begin": "IMMEDIATE"})
        elif not writes and self.autocommit_reads:
            await session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})

    async def aclose(self) -> None:
        await self.rate_limiter.close()
        if self.redis is not None:
            await self.redis.aclose()
        if self.engine is not None:
            await self.engine.dispose()
