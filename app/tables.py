"""Every table, so Base.metadata is complete (migrations, tests, foreign keys in workers).

Domain tables come from each domain's models module (app/kit/domains.py); the tables of the
shared layers (counters, the outbox, idempotency records, the credential kernel's API keys)
are imported here. It sits above every layer that owns a table, beside app/main.py.
"""

from __future__ import annotations

from app.access.models import ApiKey
from app.db.base import Base
from app.db.counters import ResourceCounter
from app.idempotency.models import IdempotencyRecord
from app.kit.domains import surface_modules
from app.kit.outbox_models import OutboxJob

DOMAIN_MODELS = surface_modules("models")

__all__ = ["DOMAIN_MODELS", "ApiKey", "Base", "IdempotencyRecord", "OutboxJob", "ResourceCounter"]
