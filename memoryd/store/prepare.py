"""Which files a workspace indexes, and their preparation for the index: pure Python, no SQLite.

Indexed: Markdown under ``memory/`` and rule YAML under ``spec/memory/profiles/``, ``spec/memory/candidates/``
and ``data/memory/overrides/`` (:data:`TREES`); :func:`indexed_files` walks those trees, :func:`indexed_stats`
checks named paths without walking them.

Preparation (chunking, segmentation, identifiers, see :func:`prepare_text`) is the CPU-heavy part of indexing.
Prepared rows travel as JSON (:func:`prepare_encoded`); while SQLite inserts one batch with the GIL released, a
worker thread prepares the next files (:func:`batches`), which on two cores hides the inserts. Large rebuilds on
three or more cores also prepare in spawned worker processes (:func:`prepare_many`), which exit once the process
that started them is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import stat
import threading
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Literal, TypeVar, cast

import orjson
import structlog

from memoryd.notes import chunker, textindex

log = structlog.get_logger("memoryd.index")

Kind = Literal["markdown", "profile", "candidate", "override"]
PROFILES = "spec/memory/profiles"
CANDIDATES = "spec/memory/candidates"
OVERRIDES = "data/memory/overrides"
_YAML = (".yaml", ".yml")
# What is indexed: each tree (relative to the workspace) with the kind and suffixes of its files (DESIGN.md §2).
# The one definition of the memory files: the rule set and get's confinement use it too.
TREES: tuple[tuple[str, Kind, tuple[str, ...]], ...] = (
    ("memory", "markdown", (".md",)),
    (PROFILES, "profile", _YAML),
    (CANDIDATES, "candidate", _YAML),
    (OVERRIDES, "override", _YAML),
)
SUFFIXES = (".md", *_YAML)

# start_line, end_line, heading, text, text_digest, text_length, body (None: the text itself), idents
Prepared = tuple[int, int, str, str, str, int, str | None, str]
Row = tuple[int, int, int, str, str, str, int, str | None, str]  # doc_id, *Prepared
PARALLEL_MIN_BYTES = 8 * 1024 * 1024
PIPELINE_MIN_BYTES = 256 * 1024  # ~25 ms of preparation: less is not worth a thread
PIPELINE_DEPTH = 32  # prepared files waiting for the inserting thread, at most

T = TypeVar("T")


def file_kind(rel: str) -> Kind | None:
    """The kind of indexed file the workspace-relative path ``rel`` names by its name, None when it names none
    (another tree or suffix, or a hidden entry on the way)."""
    if any(not part or part.startswith(".") for part in rel.split("/")):
        return None
    for tree, kind, suffixes in TREES:
        if rel.startswith(tree + "/") and rel.lower().endswith(suffixes):
            return kind
    return None


def indexed_files(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, stat) of every indexed file, tree by tree, each in path order: no hidden entries, no
    symlinked directories entered, no symlinks that leave the workspace, regular files only."""
    real_root = root.resolve()
    for tree, _kind, suffixes in TREES:
        if not _inside(real_root, root / tree):
            continue
        found: list[tuple[str, os.stat_result]] = []
        pending = [tree]
        while pending:
            rel_dir = pending.pop()
            try:
                entries = list(os.scandir(root / rel_dir))
            except OSError:
                continue
            for entry in entries:  # scandir knows each entry's type: no system call but for a file's stat
                if entry.name.startswith("."):
                    continue
                rel = f"{rel_dir}/{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    pending.append(rel)
                elif entry.name.lower().endswith(suffixes):
                    info = _file_stat(real_root, Path(entry.path)) if entry.is_symlink() else _regular(entry)
                    if info is not None:
                        found.append((rel, info))
        yield from sorted(found, key=lambda item: item[0])


def _regular(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        info = entry.stat()
    except OSError:
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def indexed_stats(root: Path, rels: Iterable[str]) -> dict[str, os.stat_result]:
    """The stat of each of ``rels`` that :func:`indexed_files` would list, without walking the trees."""
    real_root = root.resolve()  # once: resolving costs a system call per path component
    usable = [tree for tree, _kind, _suffixes in TREES if _inside(real_root, root / tree)]
    found = {}
    for rel in rels:
        tree = next((tree for tree in usable if rel.startswith(tree + "/")), None)
        if tree is None or file_kind(rel) is None:
            continue
        parent = root / tree
        for part in rel[len(tree) + 1 :].split("/")[:-1]:  # the walk does not enter symlinked directories
            parent /= part
            if parent.is_symlink():
                break
        else:
            info = _file_stat(real_root, root / rel)
            if info is not None:
                found[rel] = info
    return found


def _inside(real_root: Path, tree: Path) -> bool:
    """Whether the directory ``tree`` exists and is, once resolved, inside the workspace."""
    try:
        return tree.is_dir() and real_root in tree.resolve().parents
    except OSError:
        return False


def _file_stat(real_root: Path, full: Path) -> os.stat_result | None:
    try:
        if full.is_symlink() and real_root not in full.resolve().parents:
            return None
        info = full.stat()
    except OSError:
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def prepare_text(rel: str, text: str, max_lines: int = 40) -> list[Prepared]:
    """Chunk one file (``rel``, relative to the workspace, says what kind) and compute its FTS fields: the
    CPU-heavy part of indexing (pure)."""
    return [row[1:] for row in _rows(0, rel, text, max_lines)]


def prepare_encoded(item: tuple[int, str, str], max_lines: int) -> tuple[int, bytes]:
    """``(doc_id, rel, text)`` → how many chunks, and the JSON array of their rows, each ``[doc_id, *Prepared]``:
    what the inserts take, and cheaper to pass between processes than tuples."""
    rows = _rows(*item, max_lines)
    return len(rows), orjson.dumps(rows)


def _rows(doc_id: int, rel: str, text: str, max_lines: int) -> list[Row]:
    kind = file_kind(rel)
    if kind is None:
        raise ValueError(f"not an indexed file: {rel}")
    if kind == "markdown":
        lines = chunker.split_lines(text)
        spans = chunker.chunk_spans(lines, max_lines=max_lines)
        fields = textindex.index_chunks(lines, [(lo, hi) for lo, hi, _heading in spans])
        return [
            (
                doc_id,
                lo + 1,
                hi,
                heading,
                chunk,
                _text_digest(chunk),
                len(chunk),
                None if body == chunk else body,
                idents,
            )
            for (lo, hi, heading), (chunk, body, idents) in zip(spans, fields, strict=True)
        ]
    rows: list[Row] = []
    for chunk in chunker.chunk_rules(text, kind, PurePosixPath(rel).stem, max_lines=max_lines):
        # The heading is searched too, as a Markdown chunk's heading line is: it names the rule, the model and the
        # layer, which then outrank a note that mentions them in passing.
        body, idents = textindex.index_fields(f"{chunk.heading}\n{chunk.text}\n{chunk.summary}", chunk.identifiers)
        digest = _text_digest(chunk.text)
        rows.append(
            (doc_id, chunk.start_line, chunk.end_line, chunk.heading, chunk.text, digest, len(chunk.text), body, idents)
        )
    return rows


def pool_size(total_bytes: int, files: int) -> int:
    """How many worker processes to prepare this much in: none below :data:`PARALLEL_MIN_BYTES` (spawning them
    costs ~0.3 s) or on fewer than three cores, where the threaded pipeline already keeps two cores busy (50 MB on
    two cores: 12-13 MB/s with threads alone, 11-12 with two more processes); else one per core but one, which is
    left to the inserts."""
    workers = min((os.cpu_count() or 1) - 1, 8)
    return workers if total_bytes >= PARALLEL_MIN_BYTES and workers >= 2 and files >= 4 else 0


def prepare_many(
    items: list[tuple[int, str, str]], max_lines: int, processes: int = 0
) -> Generator[tuple[int, bytes], None, None]:
    """:func:`prepare_encoded` for each item, in order, in this process or spread over ``processes`` spawned
    worker processes (spawned, not forked: the daemon has threads)."""
    if processes < 1:
        for item in items:
            yield prepare_encoded(item, max_lines)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from functools import partial

    done = 0
    try:
        pool = ProcessPoolExecutor(
            max_workers=processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_exit_with_parent,
            initargs=(os.getpid(),),
        )
        try:
            # results arrive in order while later ones are still being computed: the caller inserts meanwhile
            for encoded in pool.map(partial(prepare_encoded, max_lines=max_lines), items, chunksize=4):
                done += 1
                yield encoded
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # when stopped early, do not finish the rest first
    except (OSError, RuntimeError, BrokenProcessPool) as exc:  # no processes to be had: do the rest here
        log.warning("parallel_index_unavailable", error=type(exc).__name__)
        for item in items[done:]:
            yield prepare_encoded(item, max_lines)


def _exit_with_parent(parent: int) -> None:
    """Pool worker initializer: exit once the process that started the pool is gone. A worker waits for work on
    a pipe whose writing end it holds itself, so a daemon killed or forced out mid-rebuild would orphan it."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="memoryd-parent-watch", daemon=True).start()


_DONE = object()


def batches(items: Iterator[T], *, threaded: bool) -> Generator[list[T], None, None]:
    """``items`` in runs. Unthreaded, all in one run: each multi-row insert leaves an FTS5 segment, and a sync of
    500 small rule files must not leave 500. Threaded, a worker thread advances ``items`` while the caller works on
    the previous run, and each run is all that is ready (a slower caller takes bigger runs). Preparation holds the
    GIL, but SQLite releases it for a whole ``INSERT … SELECT``: on two cores, the inserts then cost little."""
    if not threaded:
        whole = list(items)
        if whole:
            yield whole
        return
    ready: queue.Queue[object] = queue.Queue(maxsize=PIPELINE_DEPTH)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    break
                ready.put(item)
        except BaseException as exc:  # raised again in the caller's thread
            ready.put(exc)
        finally:
            ready.put(_DONE)

    worker = threading.Thread(target=produce, name="memoryd-index-prepare", daemon=True)
    worker.start()
    try:
        while True:
            run = [ready.get()]
            with contextlib.suppress(queue.Empty):
                while len(run) < PIPELINE_DEPTH:
                    run.append(ready.get_nowait())
            for entry in run:
                if isinstance(entry, BaseException):
                    raise entry
            done = run[-1] is _DONE
            if done:
                run.pop()
            if run:
                yield cast(list[T], run)
            if done:
                return
    finally:
        stop.set()
        while worker.is_alive():  # it may be blocked on a full queue
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.05)
        worker.join()


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
