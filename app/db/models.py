"""Every table, so Base.metadata is complete (migrations, tests, foreign keys in workers).

Domain tables come from each domain's models module (app/kit/domains.py); the tables of the
kit's own machinery (counters, the outbox, idempotency records) are imported here.
"""

from __future__ import annotations

from app.db.base import Base
from app.db.counters import ResourceCounter
from app.idempotency.models import IdempotencyRecord
from app.kit.domains import surface_modules
from app.kit.outbox_models import OutboxJob

DOMAIN_MODELS = surface_modules("models")

__all__ = ["DOMAIN_MODELS", "Base", "IdempotencyRecord", "OutboxJob", "ResourceCounter"]
