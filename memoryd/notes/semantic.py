"""Semantic recall: every workspace's passages embedded in the background, searched by meaning, fused with BM25.

One worker thread for the daemon (``memoryd-embed``) loads the embedding provider, then keeps each workspace's
vector index (:mod:`memoryd.store.vectors`) in step with its text index: the passages of a file that changed are
replaced (a text embedded before comes from the cache), and the passages without a vector are embedded in batches,
long-term memory (MEMORY.md) and the newest days first. Vectors trail the text index (eventually consistent);
BM25 never waits for them.

Anything missing — the ``semantic`` extra, the model, the extension, a stored dimension that differs, vectors not
yet made — is a :class:`Degraded` (a stable reason and a hint): search answers with BM25 and says so.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import re
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

from memoryd import embed
from memoryd.embed import Cancel, EmbeddingUnavailable, Provider
from memoryd.models import Degraded
from memoryd.pool import ThreadPool
from memoryd.settings import SemanticSettings
from memoryd.store.index import NoteIndex
from memoryd.store.passage import Passage
from memoryd.store.vector_schema import REBUILD_HINT, VectorsUnavailable, damaged, extension_path
from memoryd.store.vectors import Unit, VectorHit, VectorIndex
from memoryd.text import passages

log = structlog.get_logger("memoryd.semantic")

BATCH = 32  # texts per embedding call: ~30–60 ms with USE on one core, so a search waits at most that for the GIL
RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al. 2009): measured in docs/decisions/0008
# Query embedding has threads of its own (never the search pool's, which BM25 needs): this many, and at most
# QUERY_WAITING searches waiting on them; past that a search answers with BM25 at once (query_embedding_timeout).
QUERY_THREADS = 2
QUERY_WAITING = 8
QUERY_TIMEOUT_REASON = "query_embedding_timeout"
QUERY_TIMEOUT_HINT = (
    "The embedding provider did not answer the query in time (embedding_query_timeout_s); BM25 answered alone. "
    "Check the embedding endpoint, or raise the setting."
)
_DAILY = re.compile(r"memory/(\d{4})-(\d{2})-(\d{2})\.md")


@dataclass(eq=False)
class WorkspaceVectors:
    workspace_id: str
    index: VectorIndex
    text: NoteIndex
    ready: bool = False  # the text index is open: its documents are the truth to follow
    problem: Degraded | None = None  # the vector index cannot be used (until `index --rebuild-vectors`)
    synced: float | None = None  # the text index's last_write when the units were last brought in step


def priority(path: str) -> int:
    """Lower is embedded first: MEMORY.md, then daily files newest first, then everything else."""
    if path == "memory/MEMORY.md":
        return 0
    match = _DAILY.fullmatch(path)
    if match:
        return 100_000_000 - int("".join(match.groups()))
    return 200_000_000


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def units_of(path: str, sections: list[tuple[int, int, str, str]]) -> list[Unit]:
    """A file's passages (the spans search ranks), from its indexed sections."""
    out = []
    rank = priority(path)
    for start, end, heading, text in sections:
        lines = text.split("\n")
        for s, e in passages.passage_spans(lines):
            body = "\n".join(lines[s:e]).strip()
            if body:
                passage = Passage(path, start + s, e - s, heading, start, end - start + 1, body)
                out.append(Unit(passage, digest(body), rank))
    return out


class Semantic:
    def __init__(self, settings: SemanticSettings, state_dir: Path) -> None:
        self.settings = settings
        self.state_dir = state_dir
        self.provider: Provider | None = None
        self.problem: Degraded | None = Degraded(
            reason="embeddings_loading", hint="The embedding model is loading; search uses BM25 until it is ready."
        )
        self.rate: float | None = None  # texts embedded per second, the last batch
        self._by_id: dict[str, WorkspaceVectors] = {}
        self._thread = ThreadPool(1, "memoryd-embed")
        self._query_threads = ThreadPool(QUERY_THREADS, "memoryd-query-embed")
        self._query_waiting = 0
        self._cancel = Cancel()  # set on close: HTTP requests in flight are cut off, so shutdown is bounded
        self._wake = anyio.Event()
        self._extension = extension_path(settings.vector_extension)

    # --- lifecycle ----------------------------------------------------------------------------------------

    def attach(self, workspace_id: str, text: NoteIndex) -> WorkspaceVectors:
        wv = self._by_id.get(workspace_id)
        if wv is None:
            index = VectorIndex(
                self.state_dir / workspace_id / "vectors.sqlite",
                self._extension,
                memory_max_bytes=self.settings.vector_memory_mb * 1024 * 1024,
            )
            wv = self._by_id[workspace_id] = WorkspaceVectors(workspace_id, index, text)
        return wv

    def get(self, workspace_id: str) -> WorkspaceVectors | None:
        return self._by_id.get(workspace_id)

    async def detach(self, workspace_id: str, *, drop: bool) -> None:
        wv = self._by_id.pop(workspace_id, None)
        if wv is not None:
            await self._thread.run(wv.index.drop if drop else wv.index.close)

    def poke(self) -> None:
        """The text index changed (or a workspace is ready): the worker looks again."""
        self._wake.set()

    async def rebuild(self, workspace_id: str) -> None:
        """Drop the workspace's vectors and embed it again with the current provider."""
        wv = self._by_id.get(workspace_id)
        if wv is None:
            return

        def run() -> None:
            wv.index.drop()
            wv.problem, wv.synced = None, None

        await self._thread.run(run)
        log.info("vectors_rebuild", workspace_id=workspace_id)
        self.poke()

    async def aclose(self) -> None:
        self._cancel.set()  # an endpoint that trickles or never answers holds neither thread past this
        await self._query_threads.close()
        for wv in self._by_id.values():  # a training in progress gives up (its cells stay as they were)
            wv.index.interrupt()
        for wv in list(self._by_id.values()):  # in the worker thread, after the batch in flight is stored
            await self._thread.run(wv.index.close)
        await self._thread.close()

    async def run(self) -> None:
        """Load the provider, then embed whatever is behind, for as long as the daemon runs."""
        started = time.perf_counter()
        try:
            self.provider = await self._thread.run(lambda: embed.load(self.settings, self._cancel))
        except EmbeddingUnavailable as exc:
            self.problem = Degraded(reason=exc.reason, hint=exc.hint, message=str(exc))
            log.warning("semantic_unavailable", reason=exc.reason, error=str(exc))
            return
        except Exception as exc:  # a model that fails in its own way: BM25 goes on
            self.problem = Degraded(
                reason="model_missing", hint="Reinstall the semantic extra.", message=f"{type(exc).__name__}: {exc}"
            )
            log.exception("semantic_unavailable", reason="model_missing")
            return
        self.problem = None
        provider = self.provider
        # The model's objects live as long as the daemon: out of the collector's generations (as the dictionary's
        # maps), so full collections during indexing do not walk them again.
        gc.freeze()
        log.info(
            "semantic_ready",
            provider=provider.name,
            model=provider.model,
            dimension=provider.dimension,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        while True:
            worked = False
            for wv in list(self._by_id.values()):
                if not wv.ready or wv.problem is not None:
                    continue
                try:
                    worked = await self._thread.run(functools.partial(self._step, provider, wv)) or worked
                except EmbeddingUnavailable as exc:
                    if exc.reason == "embedding_dimension_changed":  # every workspace's vectors: status says
                        self.problem = Degraded(reason="vector_dimension_mismatch", hint=exc.hint, message=str(exc))
                        log.warning("semantic_unavailable", reason=self.problem.reason, error=str(exc))
                        return
                    log.warning("embedding_step_failed", workspace_id=wv.workspace_id, error=exc.reason)
                    await anyio.sleep(1.0)
                except Exception as exc:  # the text index closed under us, a full disk: try again later
                    self.check_damage(wv, exc)
                    log.warning("embedding_step_failed", workspace_id=wv.workspace_id, error=type(exc).__name__)
                    await anyio.sleep(1.0)
            if not worked:
                await self._wake.wait()
                self._wake = anyio.Event()

    # --- the worker thread --------------------------------------------------------------------------------

    def _step(self, provider: Provider, wv: WorkspaceVectors) -> bool:
        """One bounded piece of work: open, follow the text index, or embed one batch. False: nothing to do."""
        if not wv.index.is_open:
            try:
                wv.index.open(provider.model, provider.dimension)
            except VectorsUnavailable as exc:
                wv.problem = Degraded(reason=exc.reason, hint=exc.hint, message=str(exc))
                log.warning("vectors_unavailable", workspace_id=wv.workspace_id, reason=exc.reason, error=str(exc))
                return False
        self.check_damage(wv)
        if wv.problem is not None:
            return False
        mark = wv.text.last_write
        if wv.synced != mark:
            self._follow(wv)
            wv.synced = mark
            return True
        todo = wv.index.todo(BATCH)
        if not todo:
            wv.index.prune_cache()
            started = time.perf_counter()
            if not wv.index.prepare():  # past the float rows' budget: the rough rows searches scan (decision 0022)
                return False
            ms = round((time.perf_counter() - started) * 1000, 1)
            log.info("vectors_rough_rows_built", workspace_id=wv.workspace_id, vectors=wv.index.vectors, ms=ms)
            return True
        started = time.perf_counter()
        reasons: set[str] = set()
        done, refused = self._embed(provider, todo, reasons)
        wv.index.store(done)
        if refused:
            wv.index.refuse(refused)
            log.warning(
                "embedding_refused", workspace_id=wv.workspace_id, passages=len(refused), reasons=sorted(reasons)
            )
        self.rate = len(todo) / max(time.perf_counter() - started, 1e-6)
        if wv.index.should_train():  # enough vectors that scanning them all is slow: cells (IVF)
            started = time.perf_counter()
            cells = wv.index.train()
            if not cells:  # interrupted: the daemon is stopping
                return False
            log.info(
                "vectors_trained",
                workspace_id=wv.workspace_id,
                vectors=wv.index.embedded,
                cells=cells,
                ms=round((time.perf_counter() - started) * 1000, 1),
            )
        return True

    @staticmethod
    def _embed(
        provider: Provider, todo: list[tuple[int, str, str]], reasons: set[str]
    ) -> tuple[list[tuple[int, str, bytes]], list[tuple[int, str]]]:
        """Vectors for a batch: (unit id, digest, vector) embedded, (unit id, digest) refused (why: ``reasons``). When the batch
        fails, its texts are tried one by one, and those the provider fails on while it embeds others (or the
        probe text) are refused: one text an endpoint answers with a 4xx or NaN must not hold the backlog up for
        ever. A provider that is down (unreachable) raises: the batch waits."""
        try:
            vectors = provider.encode([text for _, text, _ in todo])
            return [(unit_id, d, v) for (unit_id, _, d), v in zip(todo, vectors, strict=True)], []
        except EmbeddingUnavailable as exc:
            if exc.reason in ("embedding_endpoint_unreachable", "embedding_dimension_changed"):
                raise
        except Exception:  # a local model failing on some input
            pass
        done: list[tuple[int, str, bytes]] = []
        failed: list[tuple[int, str]] = []
        for unit_id, text, d in todo:
            try:
                done.append((unit_id, d, provider.encode([text])[0]))
            except EmbeddingUnavailable as exc:
                if exc.reason in ("embedding_endpoint_unreachable", "embedding_dimension_changed"):
                    raise
                failed.append((unit_id, d))
                reasons.add(exc.reason)  # embedding_text_refused, embedding_reply_too_large, …
            except Exception as exc:
                failed.append((unit_id, d))
                reasons.add(type(exc).__name__)
        if failed and not done:
            provider.encode(["dimension probe"])  # raises when the provider is what fails, not these texts
        return done, failed

    def _follow(self, wv: WorkspaceVectors) -> None:
        """Bring the units in step with the text index's files (by their sha256)."""
        current = wv.text.documents()
        known = wv.index.documents()
        removed = [path for path in known if path not in current]
        changed = sorted((p for p, sha in current.items() if known.get(p) != sha), key=lambda p: (priority(p), p))
        for start in range(0, max(len(changed), 1), 200):  # bounded transactions on a large first run
            group = changed[start : start + 200]
            wv.index.replace(
                {path: (current[path], units_of(path, wv.text.sections(path))) for path in group},
                removed if start == 0 else [],
            )

    # --- search -------------------------------------------------------------------------------------------

    def problem_for(self, workspace_id: str) -> Degraded | None:
        """Why vectors cannot serve this workspace now (None: they can, maybe partly: see :meth:`coverage`)."""
        if self.problem is not None:
            return self.problem
        wv = self._by_id.get(workspace_id)
        if wv is not None and wv.problem is not None:
            return wv.problem
        if wv is None or not wv.index.is_open:
            return Degraded(reason="vectors_loading", hint="The vector index is opening; search uses BM25 meanwhile.")
        if wv.index.embedded == 0:
            return Degraded(
                reason="vectors_behind",
                hint="No passage is embedded yet; `memoryctl status` shows the progress.",
                message=f"0 of {wv.index.total} passages embedded",
            )
        return None

    def coverage(self, workspace_id: str) -> tuple[int, int]:
        wv = self._by_id.get(workspace_id)
        return (0, 0) if wv is None else (wv.index.embedded, wv.index.total)

    def check_damage(self, wv: WorkspaceVectors, exc: BaseException | None = None) -> None:
        """Whether the vector file is damaged — ``exc`` (a read or write that failed) says so, or the file is gone,
        replaced or no longer SQLite — and if so, say so (status, search) until it is rebuilt."""
        if wv.problem is not None:
            return
        if exc is not None and damaged(exc):
            why = f"{type(exc).__name__}: {exc}"
        elif (found := wv.index.check_file()) is not None:
            why = f"the vector file is {found}"
        else:
            return
        wv.problem = Degraded(reason="vector_index_unusable", hint=REBUILD_HINT, message=why)
        log.warning("vectors_unavailable", workspace_id=wv.workspace_id, reason=wv.problem.reason, error=why)

    def inline(self) -> bool:
        """Whether a search embeds its query on its own thread (see ``Provider.inline``)."""
        return self.provider is not None and self.provider.inline

    def embed_inline(self, query: str) -> bytes:
        """The query's vector, on the calling (search) thread: only when :meth:`inline`."""
        provider = self.provider
        assert provider is not None
        return provider.encode([query], query=True)[0]

    def embed_beside(self, queries: tuple[str, ...]) -> Future[tuple[bytes, ...]]:
        """The queries' vectors, computed in a query-embedding thread while the calling (search) thread works on the
        words: only when :meth:`inline` (a local model; numpy releases the GIL for its products)."""
        return self._query_threads.submit(lambda: tuple(self.embed_inline(q) for q in queries))

    async def embed_query(self, query: str) -> bytes:
        """The query's vector, within ``embedding_query_timeout_s`` all told (waiting for a thread included), in
        threads of its own. Raises :class:`TimeoutError` when the budget runs out or too many searches already
        wait; the provider's own error when it fails."""
        provider = self.provider
        assert provider is not None
        if self._query_waiting >= QUERY_WAITING:
            raise TimeoutError(f"{self._query_waiting} searches already wait for query embeddings")
        budget = self.settings.query_timeout_s
        deadline = time.monotonic() + budget

        def run() -> bytes:
            left = deadline - time.monotonic()
            if left <= 0:  # waited its turn past the budget: the caller has gone
                raise TimeoutError("no time left")
            return provider.encode([query], query=True, timeout_s=left + 0.5)[0]  # the budget ends first

        self._query_waiting += 1
        try:
            with anyio.move_on_after(budget):
                return await self._query_threads.run(run)
        finally:
            self._query_waiting -= 1
        raise TimeoutError(f"no query vector within {budget:g} s")

    def nearest(
        self, workspace_id: str, vector: bytes, k: int, depth: int = 0, exclude: str | None = None
    ) -> tuple[list[VectorHit], list[float]]:
        """The ``k`` passages nearest to the query's ``vector`` (none under ``exclude``), and the distances of the
        nearest ``max(k, depth)`` vectors (a search thread; :meth:`problem_for` said None)."""
        wv = self._by_id[workspace_id]
        try:
            hits = wv.index.nearest(vector, k, depth, exclude=exclude)
            self.check_damage(wv)  # answered from SQLite's cache and log: the file itself may be gone
            return hits
        except Exception as exc:
            self.check_damage(wv, exc)
            raise

    def status(self, workspace_id: str) -> dict[str, object]:
        wv = self._by_id.get(workspace_id)
        if wv is not None:
            self.check_damage(wv)
        problem = self.problem_for(workspace_id)
        embedded, total = self.coverage(workspace_id)
        return {
            "provider": None if self.provider is None else self.provider.name,
            "model": None if self.provider is None else self.provider.model,
            "dimension": None if self.provider is None else self.provider.dimension,
            "embedded": embedded,
            "total": total,
            "refused": 0 if wv is None else wv.index.refused,
            "progress": round(embedded / total, 4) if total else (1.0 if wv is not None and wv.index.is_open else 0.0),
            "texts_per_s": None if self.rate is None else round(self.rate, 1),
            "scan": None if wv is None or not wv.index.is_open else wv.index.scan_path(),
            "problem": None if problem is None else {"reason": problem.reason, "hint": problem.hint},
        }


__all__ = [
    "QUERY_TIMEOUT_HINT",
    "QUERY_TIMEOUT_REASON",
    "REBUILD_HINT",
    "RRF_K",
    "Degraded",
    "Semantic",
    "WorkspaceVectors",
    "units_of",
]
