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
import errno
import hashlib
import os
import queue
import re
import stat
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Literal, TypeVar, cast

import orjson
import structlog

from memoryd.fsio import within
from memoryd.text import chunker, textindex

log = structlog.get_logger("memoryd.index")

Kind = Literal["markdown", "profile", "candidate", "override"]
PROFILES = "spec/memory/profiles"
CANDIDATES = "spec/memory/candidates"
OVERRIDES = "data/memory/overrides"
_YAML = (".yaml", ".yml")
# What is indexed: each tree (relative to the workspace) with the kind and suffixes of its files (docs/reference/files.md).
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
# A chunk holds at most this many characters: longer runs of lines are cut between lines, longer lines into windows.
MAX_CHUNK_CHARS = 32 * 1024
# C0 controls but tab, line feed and carriage return, and DEL: indexed as spaces (get still reads the file as is).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACES = str.maketrans(dict.fromkeys([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F], " "))
PARALLEL_MIN_BYTES = 8 * 1024 * 1024
PIPELINE_MIN_BYTES = 256 * 1024  # ~25 ms of preparation: less is not worth a thread
PIPELINE_DEPTH = 32  # prepared files waiting for the inserting thread, at most (when their sizes are unknown)
PIPELINE_MAX_BYTES = 4 * 256 * 1024  # prepared bytes waiting for the inserting thread, at most (sizes known)
RUN_MIN_BYTES = 256 * 1024  # prepared bytes a run of inserts waits for (with sizes): ~20 ms of preparation

T = TypeVar("T")


NOT_UTF8 = "a name that is not UTF-8: not read, not indexed (rename it)"


def utf8_name(name: str) -> bool:
    """Whether a name read from the disk is UTF-8. Python keeps other bytes as lone surrogates, which SQLite,
    JSON and YAML cannot carry: such a file is skipped and reported (issue 19, 2.6), never read."""
    if name.isascii():  # most names: no encoding attempted (a sync of 2,401 files spent 7 ms here)
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(name: str) -> str:
    """``name`` as it can be reported: the bytes that are not UTF-8 escaped (``memory/\\xff.md``)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def file_kind(rel: str) -> Kind | None:
    """The kind of indexed file the workspace-relative path ``rel`` names by its name, None when it names none
    (another tree or suffix, or a hidden entry on the way)."""
    if any(not part or part.startswith(".") for part in rel.split("/")):
        return None
    for tree, kind, suffixes in TREES:
        if rel.startswith(tree + "/") and rel.lower().endswith(suffixes):
            return kind
    return None


def indexed_files(
    root: Path, refused: dict[str, str] | None = None, *, kinds: frozenset[Kind] | None = None
) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, stat) of every indexed file (of the trees holding ``kinds``, or all), tree by tree, each in
    path order: no hidden entries, no symlinked directories entered, no symlinks that leave the workspace, regular
    files only. Entries named like indexed files but left out (a FIFO, a device, a symlink loop, a dangling symlink,
    a symlink out of the workspace) go into ``refused``, with the reason, when it is given."""
    real_root = root.resolve()
    for tree, kind, suffixes in TREES:
        if (kinds is not None and kind not in kinds) or not _inside(real_root, root / tree):
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
                if not utf8_name(entry.name):
                    if refused is not None and (
                        entry.is_dir(follow_symlinks=False) or entry.name.lower().endswith(suffixes)
                    ):
                        refused[shown(rel)] = NOT_UTF8
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(rel)
                elif entry.name.lower().endswith(suffixes):
                    if entry.is_symlink():
                        info = _file_stat(real_root, Path(entry.path), rel, refused)
                    else:
                        info = _regular(entry, rel, refused)
                    if info is not None:
                        found.append((rel, info))
        yield from sorted(found, key=lambda item: item[0])


def _regular(entry: os.DirEntry[str], rel: str, refused: dict[str, str] | None) -> os.stat_result | None:
    try:
        info = entry.stat()
    except OSError:
        return None
    if stat.S_ISREG(info.st_mode):
        return info
    if refused is not None:
        refused[rel] = kind_of(info.st_mode)
    return None


def indexed_stats(root: Path, rels: Iterable[str], refused: dict[str, str] | None = None) -> dict[str, os.stat_result]:
    """The stat of each of ``rels`` that :func:`indexed_files` would list, without walking the trees (and, in
    ``refused``, those of them it would refuse)."""
    real_root = root.resolve()  # once: resolving costs a system call per path component
    usable = [tree for tree, _kind, _suffixes in TREES if _inside(real_root, root / tree)]
    found = {}
    for rel in rels:
        if not utf8_name(rel):
            if refused is not None and file_kind(rel) is not None:
                refused[shown(rel)] = NOT_UTF8
            continue
        tree = next((tree for tree in usable if rel.startswith(tree + "/")), None)
        if tree is None or file_kind(rel) is None:
            continue
        parent = root / tree
        for part in rel[len(tree) + 1 :].split("/")[:-1]:  # the walk does not enter symlinked directories
            parent /= part
            if parent.is_symlink():
                break
        else:
            info = _file_stat(real_root, root / rel, rel, refused)
            if info is not None:
                found[rel] = info
    return found


def _inside(real_root: Path, tree: Path) -> bool:
    """Whether the directory ``tree`` exists and is, once resolved, inside the workspace (not the workspace)."""
    try:
        is_dir = tree.is_dir()
    except OSError:
        return False
    return is_dir and within(real_root, tree) not in (None, real_root)


def _file_stat(real_root: Path, full: Path, rel: str, refused: dict[str, str] | None = None) -> os.stat_result | None:
    """The stat of ``full`` when it is (or links, inside the workspace, to) a regular file; else None, and the
    reason in ``refused``. Never opens anything."""
    reason = refusal(real_root, full)
    if reason is None:
        try:
            info = full.stat()
        except OSError as exc:
            reason = _os_reason(exc)
        else:
            if stat.S_ISREG(info.st_mode):
                return info
            reason = kind_of(info.st_mode)
    if refused is not None and reason != "gone":
        refused[rel] = reason
    return None


def refusal(real_root: Path, full: Path) -> str | None:
    """Why the symlink ``full`` is not followed (a loop, dangling, out of the workspace), None when it is not
    a symlink or may be followed."""
    try:
        if not full.is_symlink():
            return None
        target = full.resolve(strict=True)
    except FileNotFoundError:
        return "dangling symlink"
    except RuntimeError:  # Python < 3.13 reports a loop this way
        return "symlink loop"
    except OSError as exc:
        return _os_reason(exc)
    return None if real_root in target.parents else "symlink out of the workspace"


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "not a regular file: a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "not a regular file: a device"
    if stat.S_ISSOCK(mode):
        return "not a regular file: a socket"
    if stat.S_ISDIR(mode):
        return "not a regular file: a directory"
    return "not a regular file"


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOENT:
        return "gone"
    return f"unreadable: {exc.strerror or type(exc).__name__}"


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
    if _CONTROL.search(text):  # JSON spells each as \u00XX (6×) and nobody searches for them: spaces instead
        text = text.translate(_SPACES)
    if kind == "markdown":
        lines = chunker.split_lines(text)
        spans = _narrow(lines, chunker.chunk_spans(lines, max_lines=max_lines))
        fields = iter(textindex.index_chunks(lines, [(lo, hi) for lo, hi, _heading in spans if hi > lo]))
        rows: list[Row] = []
        for lo, hi, heading in spans:
            if hi > lo:
                text_, body, idents = next(fields)
                rows.append(_row(doc_id, lo + 1, hi, heading, text_, body, idents))
                continue
            line = lines[lo]  # longer than MAX_CHUNK_CHARS: windows of it, each a chunk of this one line
            for at in range(0, len(line), MAX_CHUNK_CHARS):
                window = line[at : at + MAX_CHUNK_CHARS]
                rows.append(_row(doc_id, lo + 1, lo + 1, heading, window, *textindex.index_fields(window)))
        return rows
    rows = []
    for chunk in chunker.chunk_rules(text, kind, PurePosixPath(rel).stem, max_lines=max_lines):
        # The heading is searched too, as a Markdown chunk's heading line is: it names the rule, the model and the
        # layer, which then outrank a note that mentions them in passing.
        body, idents = textindex.index_fields(f"{chunk.heading}\n{chunk.text}\n{chunk.summary}", chunk.identifiers)
        digest = _text_digest(chunk.text)
        rows.append(
            (doc_id, chunk.start_line, chunk.end_line, chunk.heading, chunk.text, digest, len(chunk.text), body, idents)
        )
    return rows


def _row(doc_id: int, first: int, last: int, heading: str, chunk: str, body: str, idents: str) -> Row:
    return (
        doc_id,
        first,
        last,
        heading,
        chunk,
        _text_digest(chunk),
        len(chunk),
        None if body == chunk else body,
        idents,
    )


def _narrow(lines: list[str], spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """``spans`` with those over :data:`MAX_CHUNK_CHARS` characters cut, between lines, into spans under it; a line
    longer than that alone becomes ``(index, index, heading)``: to be cut into windows of characters. Bounds what
    one chunk costs to segment, encode and insert whatever a file holds (a 10 MB line was one 10 MB chunk)."""
    if sum(map(len, lines)) + len(lines) <= MAX_CHUNK_CHARS:
        return spans
    narrowed: list[tuple[int, int, str]] = []
    for lo, hi, heading in spans:
        first, size = lo, 0
        for index in range(lo, hi):
            width = len(lines[index]) + 1
            if width > MAX_CHUNK_CHARS:
                if index > first:
                    narrowed.append((first, index, heading))
                narrowed.append((index, index, heading))
                first, size = index + 1, 0
                continue
            if size + width > MAX_CHUNK_CHARS and index > first:
                narrowed.append((first, index, heading))
                first, size = index, 0
            size += width
        if hi > first:
            narrowed.append((first, hi, heading))
    return narrowed


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


def batches(  # noqa: C901 (the producer thread, run sizing and its shutdown belong together)
    items: Iterator[T], *, threaded: bool, size: Callable[[T], int] | None = None
) -> Generator[list[T], None, None]:
    """``items`` in runs. Unthreaded, all in one run: each multi-row insert leaves an FTS5 segment, and a sync of
    500 small rule files must not leave 500. Threaded, a worker thread advances ``items`` while the caller works on
    the previous run, and each run is all that is ready (a slower caller takes bigger runs) but, with ``size``, at
    least :data:`RUN_MIN_BYTES` of it: each run is a statement and an FTS5 segment, and many small files must not
    make thousands of them (their per-statement cost and the merges of their segments were most of a small files'
    build). Preparation holds the GIL, but SQLite releases it for a whole ``INSERT … SELECT``: on two cores, the
    inserts then cost little."""
    if not threaded:
        whole = list(items)
        if whole:
            yield whole
        return
    # With sizes, what waits is bounded by bytes (PIPELINE_MAX_BYTES), not by count: 32 small daily files are
    # ~100 KB, less than a run, and preparation stood still while SQLite inserted (2,401 files: the inserts and the
    # preparation took their sum, not their maximum).
    ready: queue.Queue[object] = queue.Queue(maxsize=0 if size is not None else PIPELINE_DEPTH)
    stop = threading.Event()
    budget = _Budget(PIPELINE_MAX_BYTES)

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    break
                if size is not None:
                    budget.take(size(item), stop)
                ready.put(item)
        except BaseException as exc:  # raised again in the caller's thread
            ready.put(exc)
        finally:
            ready.put(_DONE)

    def taken(entry: object) -> object:
        """An entry out of the queue: its bytes no longer wait (given back at once, so the budget counts only
        what is queued — the preparing thread never waits on a run this thread is still gathering)."""
        if size is not None and entry is not _DONE and not isinstance(entry, BaseException):
            budget.give(size(cast(T, entry)))
        return entry

    worker = threading.Thread(target=produce, name="memoryd-index-prepare", daemon=True)
    worker.start()
    try:
        while True:
            run = [taken(ready.get())]
            with contextlib.suppress(queue.Empty):
                while size is not None or len(run) < PIPELINE_DEPTH:  # with sizes: all that waits (bounded)
                    run.append(taken(ready.get_nowait()))
            if size is not None:  # wait for more: small runs cost a statement and a segment each
                weight = sum(size(cast(T, e)) for e in run if not isinstance(e, BaseException) and e is not _DONE)
                while weight < RUN_MIN_BYTES and run[-1] is not _DONE and not isinstance(run[-1], BaseException):
                    entry = taken(ready.get())
                    run.append(entry)
                    if not isinstance(entry, BaseException) and entry is not _DONE:
                        weight += size(cast(T, entry))
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


class _Budget:
    """Bytes of prepared files waiting in the queue: the preparing thread takes before it hands a file over
    (waiting while the budget is spent, unless nothing waits: a file larger than the budget goes alone), the
    inserting thread gives them back as it takes each file out."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.changed = threading.Condition()

    def take(self, n: int, stop: threading.Event) -> None:
        with self.changed:
            while self.used > 0 and self.used + n > self.limit and not stop.is_set():
                self.changed.wait(0.05)
            self.used += n

    def give(self, n: int) -> None:
        with self.changed:
            self.used = max(0, self.used - n)
            self.changed.notify_all()


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
