"""The search pipeline: a query → BM25 over words and/or the vector side over meaning → fused → hits.

Everything but the RPC itself runs in the search threads (query parsing, SQLite, snippets), so searches of one
workspace run side by side, each on its own read connection; the query's vector is made first, in the embedding's
own threads and within its own budget, so an endpoint that trickles or never answers costs this search that
budget and never a thread BM25 needs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date, timedelta

import anyio
import structlog

from memoryd.errors import AppError
from memoryd.models import Degraded
from memoryd.notes import api, fusion, indexer, itemids, items
from memoryd.notes.daily import ARCHIVE_DIR
from memoryd.notes.fusion import Candidate
from memoryd.notes.semantic import QUERY_TIMEOUT_HINT, Semantic
from memoryd.notes.workspace import WorkspaceNotes
from memoryd.pool import ThreadPool
from memoryd.settings import SearchSettings
from memoryd.store.readers import IndexCorrupted
from memoryd.store.vectors import VectorHit
from memoryd.text import dates, dictionary, intent, textindex

log = structlog.get_logger("memoryd.notes")
ARCHIVED = ARCHIVE_DIR + "/"  # archived daily files: left out of answers unless asked for (include_archive)

# A passage in an entry of the kind the question asks for (a decision, an event: text/intent.py) ranks as if its
# score were this much higher: enough to pass a note or standup line on the same topic, not a better answer.
INTENT_BOOST = 1.3
WINDOW_CANDIDATES = 60  # passages each side brings when the question names a date: the window's may rank low
DATES_MAX_CHARS = 2000  # of a question, where a date is looked for
WINDOW_FILES_MAX = 62  # daily files a window's own search looks in (about two months)
DICTIONARY_LOADING_HINT = (
    "The CC-CEDICT dictionary is still being read (about a second after the daemon starts): until it is ready, "
    "words are not looked up in the other language; search again in a moment for the full ranking."
)


@dataclass(frozen=True, slots=True)
class Options:
    """What a search may say besides its query: the same question in other words or the other language (``also``,
    fused into one ranking), a date window (``since``/``until``; else one read from the question), and the day
    relative times are read from (``today``)."""

    also: tuple[str, ...] = ()
    since: date | None = None
    until: date | None = None
    today: date | None = None
    include_archive: bool | None = None  # archived daily files too (None: the search_include_archive setting)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one search asks of the sides: the mode it uses, why it uses less than it was asked, how many passages
    each side brings, the phrasings it searches for (the question without its date expression, and ``also``), each
    one's vector (None: no meaning side), and the date window its entries are preferred in."""

    wanted: str
    used: str
    degraded: Degraded | None
    candidates: int
    phrasings: tuple[str, ...]
    vectors: tuple[bytes | None, ...]
    vector_error: str | None
    window: dates.Window | None
    exclude: str | None = None  # the path prefix left out of the answer (archived files), None: none
    inline: bool = False  # the vectors are made on the search thread (a local model: Provider.inline)


@dataclass(frozen=True, slots=True)
class Found:
    """What a search read: its hits (None: the index file could not be read), why the file needs a rebuild, why
    the meaning side failed, and what is still to index of what the watcher reported."""

    hits: list[api.SearchHit] | None
    problem: str | None
    vector_error: str | None
    behind: list[str]


class SearchPipeline:
    def __init__(self, settings: SearchSettings, semantic: Semantic, words: dictionary.Dictionary | None) -> None:
        self.settings = settings
        self.semantic = semantic
        self.dictionary = words
        # Searches run in threads of their own, as many as there are cores: more only thrash the caches of their
        # read connections (each thread has one), and they no longer queue behind indexing in anyio's 40.
        self.threads = ThreadPool(max(2, os.cpu_count() or 2), "memoryd-search")
        self._running = 0  # searches handed to the threads and not yet back (the event loop's count)

    async def aclose(self) -> None:
        await self.threads.close()  # no search is inside an index file when it is closed

    async def search(
        self,
        notes: WorkspaceNotes,
        query: str,
        limit: int,
        snippet_max_chars: int,
        mode: str | None,
        options: Options | None = None,
    ) -> api.WorkspaceHits:
        """``mode``: bm25, vector or hybrid; None = hybrid when vectors can serve, else BM25 (and say why)."""
        plan = await self._plan(notes, query, limit, mode, options or Options())
        reported = sorted(notes.pending)
        deadline: float | None = None  # for a file being rebuilt: set at the first failed read
        while True:
            try:
                self._running += 1
                try:
                    found = await self.threads.run(lambda: self._read(notes, limit, snippet_max_chars, plan, reported))
                finally:
                    self._running -= 1
            except Exception as exc:  # the error's type only: SQLite's messages can quote the query
                log.error("search_failed", workspace_id=notes.ws.id, error=type(exc).__name__)
                raise AppError("MEMORY_SEARCH_FAILED") from exc
            if found.hits is not None or found.problem is None:
                break
            # The file could not be read (damaged, or deleted for a thread that had not opened it): it is rebuilt
            # from the Markdown files; wait for that, a little, then read the new file.
            if notes.heal_failed is not None:
                raise AppError(
                    "MEMORY_INDEX_CORRUPTED",
                    "The index file is damaged or gone and rebuilding it failed",
                    hint="Run `memoryctl index --full`; `memoryctl status` says what went wrong.",
                )
            deadline = anyio.current_time() + indexer.WAIT_S if deadline is None else deadline
            if anyio.current_time() >= deadline:
                break
            await indexer.wait(notes, found.problem, deadline)
        if found.problem is not None:
            indexer.schedule(notes, found.problem)
        return self._answer(notes, plan, found)

    async def _plan(self, notes: WorkspaceNotes, query: str, limit: int, mode: str | None, options: Options) -> Plan:
        ws_id = notes.ws.id
        wanted = mode or "hybrid"
        window = _window(query, options)
        phrasings = tuple(dict.fromkeys(p for p in (window.rest if window else query, *options.also) if p.strip()))
        phrasings = phrasings or (query,)
        degraded: Degraded | None = None
        if wanted != "bm25":
            if not query.strip():
                degraded = Degraded(reason="empty_query", hint="An empty query has no meaning to search for.")
            else:
                degraded = self.semantic.problem_for(ws_id)
        used = "bm25" if wanted == "bm25" or degraded is not None else wanted
        if degraded is not None and degraded.reason == "semantic_disabled" and mode is None:
            degraded = None  # turned off on purpose: the default is plain BM25, nothing to report
        if degraded is None and self.dictionary is not None and self.dictionary.state == "loading":
            # the words are not expanded across languages yet: the same question will rank differently once they are
            degraded = Degraded(reason="dictionary_loading", hint=DICTIONARY_LOADING_HINT)
        candidates = max(2 * limit, fusion.FUSION_CANDIDATES) if used == "hybrid" else limit
        if window is not None:
            candidates = max(candidates, WINDOW_CANDIDATES)  # entries of the window may rank low on words alone
        vectors: list[bytes | None] = [None] * len(phrasings)
        vector_error: str | None = None
        inline = used != "bm25" and self.semantic.inline()
        if used != "bm25" and not inline:
            try:
                for n, phrasing in enumerate(phrasings):
                    vectors[n] = await self.semantic.embed_query(phrasing)
            except TimeoutError as exc:
                degraded = Degraded(reason="query_embedding_timeout", hint=QUERY_TIMEOUT_HINT, message=str(exc))
                used = "bm25" if used == "hybrid" else used
            except Exception as exc:  # the endpoint went away, the model failed on this text: words still answer
                vector_error = type(exc).__name__
        archived = self.settings.include_archive if options.include_archive is None else options.include_archive
        exclude = None if archived else ARCHIVED
        return Plan(
            wanted, used, degraded, candidates, phrasings, tuple(vectors), vector_error, window, exclude, inline
        )

    def _read(
        self, notes: WorkspaceNotes, limit: int, snippet_max_chars: int, plan: Plan, reported: list[str]
    ) -> Found:
        """Both sides for every phrasing, fused, as hits (a search thread). Each phrasing's passages are fused on
        their own; a passage several phrasings found keeps its best (the strengths are calibrated: comparable)."""
        try:
            hide = hidden(notes)  # forgotten entries: kept in the files, left out of answers
        except IndexCorrupted as exc:
            return Found(None, exc.reason, None, reported)
        failed = plan.vector_error
        vectors = plan.vectors
        # A lone search (the prompt hook's: latency counts) has a local model embed the question in a thread of
        # its own while this one reads the words' side; among others (the cores are busy) the hand-over only costs
        # CPU (8 clients on 5 MB: 278 → 245 searches/s), and this thread embeds it after the words.
        beside = plan.inline and self._running <= 1
        pending = self.semantic.embed_beside(plan.phrasings) if beside else None
        try:
            words = [self._lexical(notes, phrasing, plan, hide) for phrasing in plan.phrasings]
        except IndexCorrupted as exc:
            return Found(None, exc.reason, None, reported)
        except Exception:
            problem = notes.index.check_file()  # truncated, replaced: what failed is the file
            if problem is None:
                raise
            return Found(None, problem, None, reported)
        finally:
            if pending is not None:
                try:
                    vectors = pending.result()
                except Exception as exc:  # the model failed on this text: words still answer
                    failed = type(exc).__name__
        if plan.inline and not beside:
            try:
                vectors = tuple(self.semantic.embed_inline(p) for p in plan.phrasings)
            except Exception as exc:  # the model failed on this text: words still answer
                failed = type(exc).__name__
        best: dict[tuple[str, int, int], Candidate] = {}
        for (parsed, lexical), vector in zip(words, vectors, strict=True):
            chosen, vector_failed = self._fused(notes, parsed, lexical, vector, plan, hide)
            failed = failed or vector_failed
            for c in chosen:
                key = (c.passage.path, c.passage.start_line, c.passage.lines)
                if key not in best or c.score > best[key].score:
                    best[key] = c
        ranked = fusion.best(best.values(), len(best)) if len(plan.phrasings) > 1 else list(best.values())
        kind = next((k for p in plan.phrasings if (k := intent.asks_for(p)) is not None), None)
        if kind is not None:  # entries of the kind asked for ahead of a note that mentions the topic (same order else)
            ranked.sort(key=lambda c: (not c.ident, -c.score * (INTENT_BOOST if _kind(c) == kind else 1.0)))
        window = plan.window
        if window is not None:  # entries of the window first, in their order; the rest after
            ranked.sort(key=lambda c: not window.holds(dates.entry_date(c.passage.path, c.passage.heading)))
        chosen = ranked[:limit]
        named = item_ids(notes, chosen)
        hits = [c.hit(notes.ws.id, snippet_max_chars, item_id) for c, item_id in zip(chosen, named, strict=True)]
        # a reported file the index already holds as it is now (remember's own write) is not pending
        behind = [rel for rel in reported[:20] if not notes.index.is_current(rel)] + reported[20:]
        return Found(hits, notes.index.check_file(header=False), failed, behind)  # a stat: deleted or replaced?

    def _lexical(
        self, notes: WorkspaceNotes, query: str, plan: Plan, hide: set[tuple[str, int]]
    ) -> tuple[textindex.Query, list[Candidate]]:
        """One phrasing read as words, and the passages the word side finds for it, best first."""
        parsed = textindex.parse_query(query)
        added = self.dictionary.words(parsed.words) if self.dictionary is not None else []
        terms = dictionary.expanded(parsed, added) if added else parsed.terms
        if plan.used == "vector" or not terms:
            return parsed, []
        match = textindex.join_terms(notes.index.prune(terms))
        count = plan.candidates + min(len(hide), plan.candidates)
        found = [] if match is None else notes.index.search(match, count, exclude=plan.exclude)
        if match is not None and plan.window is not None:  # the window's own files, whatever else ranks higher
            seen = {(h.path, h.start_line) for h in found}
            found += [
                h
                for h in notes.index.search(match, count, _files(plan.window, archived=plan.exclude is None))
                if (h.path, h.start_line) not in seen
            ]
        if hide:
            found = [h for h in found if (h.path, h.start_line) not in hide]
        weights, mass = word_weights(notes, parsed.words, added)
        return parsed, fusion.from_lexical(found, parsed.words + added, set(parsed.idents), len(found), weights, mass)

    def _fused(
        self,
        notes: WorkspaceNotes,
        parsed: textindex.Query,
        lexical: list[Candidate],
        vector: bytes | None,
        plan: Plan,
        hide: set[tuple[str, int]],
    ) -> tuple[list[Candidate], str | None]:
        """One phrasing's passages, the word side's (``lexical``) and the meaning side's fused, best first (at most
        ``plan.candidates``)."""
        semantic: list[Candidate] = []
        failed = None
        if plan.used != "bm25" and vector is not None:
            wanted = plan.candidates + min(len(hide), plan.candidates)
            try:
                near, distances = self._nearest(notes, vector, wanted, plan.exclude)
            except Exception as exc:  # the vector file failed: words still answer
                failed = type(exc).__name__
                near, distances = [], []
            floor = fusion.noise_floor([1.0 - d for d in distances[: fusion.FLOOR_RANK]], fusion.FLOOR_RANK)
            near = [h for h in near if (h.passage.path, h.passage.section_start) not in hide][: plan.candidates]
            semantic = [fusion.from_vector(h, parsed.words[: textindex.MAX_TERMS], floor) for h in near]
        keep = plan.candidates if plan.window is None else len(lexical) + len(semantic)  # the window sorts them all
        if plan.used == "hybrid":
            fused = fusion.fuse(lexical, semantic, keep, self.settings.fusion, self.settings.vector_weight)
        else:
            fused = (semantic or lexical)[:keep]
        return fused, failed

    def _nearest(
        self, notes: WorkspaceNotes, vector: bytes, k: int, exclude: str | None
    ) -> tuple[list[VectorHit], list[float]]:
        """The ``k`` passages nearest to ``vector``, none under ``exclude``, and the distances of the nearest
        FLOOR_RANK vectors, whose units are not read (the noise floor's). When the excluded crowd the nearest vectors
        out, four times as many are looked through once."""
        near, distances = self.semantic.nearest(notes.ws.id, vector, k, fusion.FLOOR_RANK, exclude)
        if exclude is not None and len(near) < k and len(distances) == max(k, fusion.FLOOR_RANK) + 8:  # cut short
            near, _ = self.semantic.nearest(notes.ws.id, vector, 4 * max(k, fusion.FLOOR_RANK), 0, exclude)
        return near[:k], distances

    def _answer(self, notes: WorkspaceNotes, plan: Plan, found: Found) -> api.WorkspaceHits:
        ws_id = notes.ws.id
        if found.hits is None:  # still rebuilding: no hits yet, and say the answer is not complete
            log.info("search_degraded", workspace_id=ws_id, reason="index_rebuilding", mode=plan.wanted)
            return api.WorkspaceHits(
                hits=[],
                stale=True,
                pending=sorted(notes.pending)[:50],
                mode="bm25",
                degraded=Degraded(
                    reason="index_rebuilding",
                    hint="The index file is being rebuilt from the Markdown files; search again in a moment "
                    "(`memoryctl status` shows when it is done).",
                    message=found.problem or "",
                ),
            )
        used, degraded = plan.used, plan.degraded
        if found.vector_error is not None:
            log.warning("vector_search_failed", workspace_id=ws_id, error=found.vector_error)
            used = "bm25" if used == "hybrid" else used
            degraded = Degraded(
                reason="vector_search_failed",
                hint="The vector index could not be read; run `memoryctl index --rebuild-vectors` if it keeps failing.",
                message=found.vector_error,
            )
        if degraded is None and used != "bm25":
            embedded, total = self.semantic.coverage(ws_id)
            if embedded < total:  # vectors trail the text index: say the meaning side is not complete yet
                degraded = Degraded(
                    reason="vectors_behind",
                    hint="Search mixes BM25 with the passages embedded so far; `memoryctl status` shows the progress.",
                    message=f"{embedded} of {total} passages embedded",
                )
        if degraded is not None and degraded.reason != "vectors_behind":
            log.info("search_degraded", workspace_id=ws_id, reason=degraded.reason, mode=plan.wanted)
        return api.WorkspaceHits(
            hits=found.hits,
            stale=bool(found.behind) or notes.full_rescan,
            pending=found.behind,
            mode=used,
            degraded=degraded,
        )


def hidden(notes: WorkspaceNotes) -> set[tuple[str, int]]:
    """(path, first line) of every indexed section a tombstone names, every window of a block longer than
    chunk_max_lines included (worker thread). Worked out again only when the index or the tombstones changed."""
    tombstones = items.forgotten(notes.root)
    if not tombstones:
        return set()
    key = (notes.index.last_write, id(tombstones))
    if notes.hidden[0] == key:
        return notes.hidden[1]
    wanted: dict[str, set[tuple[str, str]]] = {}
    for t in tombstones.values():
        wanted.setdefault(str(t.get("path")), set()).add(items.section_key(t))
    out = set()
    for path, keys in wanted.items():
        hiding = False  # the last block that started was forgotten: its later windows go with it
        for start, _end, heading, text in notes.index.sections(path):
            first, _, rest = text.partition("\n")
            if heading and first.removeprefix("\ufeff").strip() != heading:  # a later window of a long block
                if hiding:
                    out.add((path, start))
                continue
            hiding = items.names(keys, items.key_of(heading, rest.split("\n")))
            if hiding:
                out.add((path, start))
    notes.hidden = (key, out)
    return out


def item_ids(notes: WorkspaceNotes, chosen: list[Candidate]) -> list[str | None]:
    """For each candidate, the id of the remembered entry it lies in, or None (worker thread)."""
    ids = notes.item_ids.current(notes.root)
    sections: dict[str, list[tuple[int, int, str, str]]] = {}
    out: list[str | None] = []
    for c in chosen:
        path = c.passage.path
        if path not in ids.paths:
            out.append(None)
            continue
        if path not in sections:
            sections[path] = notes.index.sections(path)
        out.append(itemids.lookup(ids, sections[path], path, c.passage.section_start))
    return out


def word_weights(notes: WorkspaceNotes, words: list[str], added: list[str]) -> tuple[dict[str, float], float]:
    """Each searched word's weight (its idf in this workspace) and the question's total: its content words, those
    no note holds at their highest; the dictionary's words weigh what they weigh but add nothing to the total."""
    words = words[: textindex.MAX_TERMS]
    content = [w for w in words if w not in textindex.STOP_WORDS] or words
    tokens = {w: textindex.index_token(w) for w in [*content, *added]}
    idf = notes.index.idf(sorted({t for t in tokens.values() if t}))
    top = max(idf.values(), default=1.0)
    weights = {w: idf[t] if t else top for w, t in tokens.items()}
    return weights, sum(weights[w] for w in set(content))


def _window(query: str, options: Options) -> dates.Window | None:
    """The days the search prefers: the caller's ``since``/``until``, else a date or relative time in the question
    (read relative to ``today``), else None."""
    if options.since is not None or options.until is not None:
        return dates.Window(options.since or date.min, options.until or date.max, query)
    # read on the event loop: only a question's first part (a pasted 100 kB text costs the loop nothing)
    head, tail = query[:DATES_MAX_CHARS], query[DATES_MAX_CHARS:]
    found = dates.window(head, options.today or date.today())
    return None if found is None else dates.Window(found.since, found.until, found.rest + tail)


def _kind(c: Candidate) -> str | None:
    return intent.entry_kind(c.passage.heading)


def _files(window: dates.Window, *, archived: bool) -> list[str]:
    """The daily files of the window's days (the most recent WINDOW_FILES_MAX of them), archived or not."""
    last = min(window.until, date.today() + timedelta(days=1))
    first = max(window.since, last - timedelta(days=WINDOW_FILES_MAX - 1))
    days = [f"{first + timedelta(days=n):%Y-%m-%d}.md" for n in range((last - first).days + 1)]
    return [f"memory/{d}" for d in days] + ([f"{ARCHIVED}{d}" for d in days] if archived else [])
