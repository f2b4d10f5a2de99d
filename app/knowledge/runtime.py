"""What the knowledge base keeps per process: the object store, the embedder, the vector
cache and the extraction limits, built once from the settings that name them."""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Settings
from app.knowledge.embeddings import Embedder, LocalEmbedder, NoEmbedder, OpenAIEmbedder
from app.knowledge.extraction import ExtractionLimits
from app.knowledge.filetypes import ZipLimits
from app.knowledge.storage import ObjectStore, build_object_store
from app.knowledge.vectors import VectorIndex


@dataclass
class KnowledgeRuntime:
    store: ObjectStore
    embedder: Embedder
    vectors: VectorIndex
    extraction: ExtractionLimits
    zip_limits: ZipLimits
    chunk_tokens: int
    chunk_overlap: int


def build_embedder(settings: Settings) -> Embedder:
    if settings.embeddings_provider == "local":
        return LocalEmbedder(settings.embeddings_model_path, settings.var_dir / "models")
    if settings.embeddings_provider == "openai":
        if not settings.embeddings_url:
            raise ValueError("SWITCHBOARD_EMBEDDINGS_URL is required for the openai provider")
        return OpenAIEmbedder(
            settings.embeddings_url,
            settings.embeddings_model,
            settings.embeddings_api_key,
            allow_private=settings.embeddings_allow_private_url,
        )
    return NoEmbedder()


_FIELDS = tuple(
    name
    for name in Settings.model_fields
    if name.startswith(("knowledge_", "embeddings_"))
    or name in ("storage_url", "storage_endpoint_url", "var_dir")
)


def _key(settings: Settings) -> tuple[object, ...]:
    return tuple(getattr(settings, name) for name in _FIELDS)


_RUNTIMES: dict[tuple[object, ...], KnowledgeRuntime] = {}


def knowledge_runtime(settings: Settings) -> KnowledgeRuntime:
    """The process's runtime for these settings (built on first use, then shared)."""
    key = _key(settings)
    runtime = _RUNTIMES.get(key)
    if runtime is None:
        runtime = KnowledgeRuntime(
            store=build_object_store(
                settings.storage_url, s3_endpoint_url=settings.storage_endpoint_url
            ),
            embedder=build_embedder(settings),
            vectors=VectorIndex(settings.knowledge_vector_cache_bytes),
            extraction=ExtractionLimits(
                max_pages=settings.knowledge_max_pages,
                max_characters=settings.knowledge_max_characters,
                max_zip_entries=settings.knowledge_max_zip_entries,
                max_zip_uncompressed_bytes=settings.knowledge_max_zip_bytes,
                seconds=settings.knowledge_extraction_seconds,
                memory_bytes=settings.knowledge_extraction_memory_bytes,
            ),
            zip_limits=ZipLimits(
                max_entries=settings.knowledge_max_zip_entries,
                max_uncompressed_bytes=settings.knowledge_max_zip_bytes,
            ),
            chunk_tokens=settings.knowledge_chunk_tokens,
            chunk_overlap=min(
                settings.knowledge_chunk_overlap, settings.knowledge_chunk_tokens - 1
            ),
        )
        _RUNTIMES[key] = runtime
    return runtime
