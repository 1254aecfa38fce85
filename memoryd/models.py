"""Wire models shared by every namespace: the base class and the common pieces.

pydantic v2 at the edges: ``extra="forbid"`` so a misspelt field is an error, ``strict=True`` so a wrong type is
an error rather than a silent coercion, ``frozen=True``. ``schemas/`` is generated from these models.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from memoryd.names import DegradedReason, ErrorName


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Empty(Wire):
    pass


OwnerToken = Field(default=None, description="The owner token from config/owner.token (memoryctl sends it).")
WorkspaceRef = Field(
    min_length=1,
    max_length=4096,
    description="A workspace id (ws_…) or an absolute path inside a registered workspace.",
)


# Every reason a search can name in `degraded` (tests/test_docs.py checks it against what the code raises).
DEGRADED_REASONS = (
    "semantic_disabled",
    "semantic_not_installed",
    "model_missing",
    "embeddings_loading",
    "embedding_provider_unknown",
    "embedding_endpoint_unset",
    "embedding_endpoint_unreachable",
    "embedding_endpoint_invalid",
    "embedding_text_refused",
    "embedding_reply_too_large",
    "embedding_dimension_changed",
    "vector_extension_unavailable",
    "vector_index_unusable",
    "vector_dimension_mismatch",
    "vector_model_mismatch",
    "vectors_loading",
    "vectors_behind",
    "vector_search_failed",
    "query_embedding_timeout",
    "empty_query",
    "index_rebuilding",
    "dictionary_loading",
)


class Degraded(Wire):
    """Why an answer used less than it was asked to: BM25 instead of vectors, vectors not yet complete, recall that
    failed or missed files not yet indexed."""

    # Typed, so that a misspelt reason fails mypy; on the wire a string, as it always was.
    reason: Annotated[DegradedReason | ErrorName | Literal["stale"], WithJsonSchema({"type": "string"})] = Field(
        description="Stable. A search's: "
        + ", ".join(DEGRADED_REASONS)
        + ". Recall's (context.dynamic): an error name (MEMORY_INDEX_CORRUPTED, …) or 'stale' (files not yet indexed)."
    )
    hint: str = Field(default="", description="What to do about it.")
    message: str = Field(default="", description="What happened, for people: counts, the exception's type.")
