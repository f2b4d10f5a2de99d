"""Knowledge base: uploaded documents, stored as objects, extracted, chunked, embedded and
searched (lexical full-text fused with vector similarity)."""
