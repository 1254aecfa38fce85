"""One write pass of the note index over a connection: the files found, those whose (mtime, size) changed read,
the documents changed or gone removed, the changed ones inserted; and an append's last section replaced in place.

:class:`~memoryd.store.index.NoteIndex` owns the connections and the locks and calls these inside its write lock,
on its writer (a sync) or on the new file of a rebuild. Prepared rows travel as JSON and go in with one
``INSERT … SELECT … FROM jsonb_each(?)`` per table and batch, so SQLite works a whole batch with the GIL released;
while it does, a worker thread prepares the next files (:func:`~memoryd.store.prepare.batches`), which on two cores
hides the inserts. Large rebuilds on three or more cores also prepare in worker processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import orjson

from memoryd.fsio import FileTooLarge, NotRegularFile, read_regular
from memoryd.store.prepare import (
    PIPELINE_MIN_BYTES,
    batches,
    indexed_files,
    indexed_stats,
    pool_size,
    prepare_many,
    prepare_text,
)

Signature = tuple[int, int, str]  # a file's (mtime_ns, size, sha256)


@dataclass(slots=True)
class SyncReport:
    files_indexed: int = 0
    files_removed: int = 0
    files_unchanged: int = 0
    bytes_indexed: int = 0
    rebuilt: bool = False
    rebuild_reason: str | None = None
    ms: float = 0.0
    chunk_delta: int = 0  # chunks added minus chunks removed
    phases: dict[str, float] = field(default_factory=dict)  # ms: find, read, insert (logged with a rebuild)


_Changed = tuple[str, os.stat_result, str, str]  # a file to (re)index: path, stat, sha256, text


class _Progress:
    """A sync's progress for the caller's callback: reading the files is the first half, inserting the second."""

    def __init__(self, callback: Callable[[int, int], None] | None, files: int) -> None:
        self.callback, self.files, self.total = callback, files, files * 2

    def reading(self, number: int) -> None:
        if self.callback is not None and number % 50 == 0:
            self.callback(number - 1, self.total)

    def inserted(self, files: int, of: int) -> None:
        if self.callback is not None:
            self.callback(self.files + files * self.files // of, self.total)

    def done(self) -> None:
        if self.callback is not None:
            self.callback(self.total, self.total)


@dataclass(slots=True)
class SyncPass:
    """One pass, in one transaction: find the files (every one, or ``only``), read those whose (mtime, size) differ
    from the index, remove the documents changed or gone, insert the changed ones. :attr:`refused` then holds the
    files named like memory files that were left out, with why."""

    conn: apsw.Connection
    root: Path
    chunk_max_lines: int
    max_file_bytes: int  # larger files are not read, not indexed, and reported in refused
    report: SyncReport = field(default_factory=SyncReport)
    refused: dict[str, str] = field(default_factory=dict)

    def run(self, only: set[str] | None, progress: Callable[[int, int], None] | None) -> SyncReport:
        conn, report = self.conn, self.report
        started = time.perf_counter()
        known = _known_documents(conn)
        present = self._present(only)
        steps = _Progress(progress, len(present))
        found = time.perf_counter()
        with conn:
            changed, stale = self._read_changed(known, present, steps)
            read = time.perf_counter()
            gone = (set(known) - set(present)) if only is None else {p for p in only if p in known and p not in present}
            stale += [known[rel][0] for rel in gone]
            report.files_removed = len(gone)
            if stale:
                report.chunk_delta -= _delete_docs(conn, stale)
            self._insert_changed(changed, steps)
            steps.done()
        done = time.perf_counter()
        report.phases = {
            "find": round((found - started) * 1000, 1),
            "read": round((read - found) * 1000, 1),
            "insert": round((done - read) * 1000, 1),
        }
        return report

    def _present(self, only: set[str] | None) -> dict[str, os.stat_result]:
        """relative path → stat of the files to index: the walk of every tree, or just ``only`` (what is not a
        file to index goes to ``refused`` with why)."""
        if only is None:
            return dict(indexed_files(self.root, self.refused))
        return indexed_stats(self.root, set(only), self.refused)

    def _read_changed(
        self, known: dict[str, tuple[int, int, int, str]], present: dict[str, os.stat_result], steps: _Progress
    ) -> tuple[list[_Changed], list[int]]:
        """The files whose (mtime, size) differ from the index, read (at most ``max_file_bytes``), and the ids of
        the documents they replace. A file whose bytes did not change keeps its chunks (its new mtime is stored);
        one that cannot be read is refused (and dropped from ``present`` when it is not a file to index)."""
        report = self.report
        changed: list[_Changed] = []
        stale: list[int] = []
        wanted = []
        for rel in sorted(present):
            info = present[rel]
            old = known.get(rel)
            if info.st_size > self.max_file_bytes:  # not read at all, and no longer searchable
                self.refused[rel] = _too_large(info.st_size, self.max_file_bytes)
                del present[rel]
            elif old is not None and old[1] == info.st_mtime_ns and old[2] == info.st_size:
                report.files_unchanged += 1
            else:
                wanted.append(rel)
        steps.reading(len(present) - len(wanted))
        for number, rel in enumerate(wanted, len(present) - len(wanted) + 1):
            steps.reading(number)
            info = present[rel]
            old = known.get(rel)
            data = self._read(rel, present)
            if data is None:
                continue
            sha = hashlib.sha256(data).hexdigest()
            if old is not None and old[3] == sha:
                self.conn.execute(
                    "UPDATE documents SET mtime_ns=?, size=? WHERE doc_id=?", (info.st_mtime_ns, info.st_size, old[0])
                )
                report.files_unchanged += 1
                continue
            if old is not None:
                stale.append(old[0])
            changed.append((rel, info, sha, data.decode("utf-8", errors="replace")))
            report.bytes_indexed += len(data)
        return changed, stale

    def _read(self, rel: str, present: dict[str, os.stat_result]) -> bytes | None:
        """A file's bytes, or None (refused, or gone: then dropped from ``present``). Only a regular file is opened
        (a FIFO swapped in since the walk would block this thread), and never more than the limit read. The stat
        is older than the bytes read, so a file that grew meanwhile differs from the stored (mtime, size) and is
        read again."""
        try:
            return read_regular(self.root / rel, self.max_file_bytes)
        except FileNotFoundError:
            del present[rel]
        except FileTooLarge as exc:
            self.refused[rel] = _too_large(exc.size, exc.limit)
            del present[rel]
        except NotRegularFile:
            self.refused[rel] = "not a regular file"
            del present[rel]
        except OSError as exc:  # kept as indexed before: a passing error should not lose a file's chunks
            self.refused[rel] = f"unreadable: {exc.strerror or type(exc).__name__}"
        return None

    def _insert_changed(self, changed: list[_Changed], steps: _Progress) -> None:
        """Insert the changed files as new documents and their chunks, numbered on from the highest ids: prepared
        in batches (a thread, or worker processes for large rebuilds) while SQLite inserts the previous ones."""
        conn, report = self.conn, self.report
        row = conn.execute(
            "SELECT (SELECT coalesce(max(doc_id), 0) FROM documents), (SELECT coalesce(max(chunk_id), 0) FROM chunks)"
        ).fetchone()
        last_doc, first_chunk = int(row[0]), int(row[1])  # type: ignore[index]
        last_chunk = first_chunk
        items = [(last_doc + n, rel, text) for n, (rel, _info, _sha, text) in enumerate(changed, 1)]
        documents = [
            (last_doc + n, rel, info.st_mtime_ns, info.st_size, sha, time.time())
            for n, (rel, info, sha, _text) in enumerate(changed, 1)
        ]
        conn.execute(_INSERT_DOCUMENTS, (orjson.dumps(documents),))
        processes = pool_size(report.bytes_indexed, len(items))
        threaded = len(items) > 1 and report.bytes_indexed >= PIPELINE_MIN_BYTES
        with (
            contextlib.closing(prepare_many(items, self.chunk_max_lines, processes)) as prepared,
            contextlib.closing(batches(prepared, threaded=threaded, size=_encoded_size)) as runs,
        ):
            for batch in runs:
                last_chunk = _insert_chunks(conn, batch, last_chunk)
                report.files_indexed += len(batch)
                steps.inserted(report.files_indexed, len(changed))
        report.chunk_delta += last_chunk - first_chunk


def replace_tail(
    conn: apsw.Connection,
    rel: str,
    section: str,
    first_line: int,
    before: Signature,
    after: Signature,
    chunk_max_lines: int,
) -> int | None:
    """Replace the chunks of ``rel`` that start at ``first_line`` or later by ``section``'s (see
    :meth:`~memoryd.store.index.NoteIndex.index_section`), and store the file's signature ``after``. Returns the
    change in the number of chunks, or None, changing nothing, when the index's row for ``rel`` does not hold
    ``before``."""
    row = conn.execute("SELECT doc_id, mtime_ns, size, sha256 FROM documents WHERE path = ?", (rel,)).fetchone()
    if row is None or (int(row[1]), int(row[2]), str(row[3])) != before:
        return None
    doc_id = int(row[0])
    offset = first_line - 1
    rows = [
        [doc_id, start + offset, end + offset, *rest]
        for start, end, *rest in prepare_text(rel, section, chunk_max_lines)
    ]
    with conn:
        # The file's chunks were inserted in file order (a sync, or earlier sections), so the last block's are the
        # document's highest chunk ids: read backwards along chunks_doc, not through every chunk.
        old_ids: list[int] = []
        for chunk_id, start_line in conn.execute(
            "SELECT chunk_id, start_line FROM chunks WHERE doc_id = ? ORDER BY chunk_id DESC", (doc_id,)
        ):
            if int(start_line) < first_line:
                break
            old_ids.append(int(chunk_id))
        old = orjson.dumps(old_ids)
        chosen = "IN (SELECT value FROM json_each(?))"
        conn.execute(f"DELETE FROM chunks_fts WHERE rowid {chosen}", (old,))
        conn.execute(f"DELETE FROM chunks WHERE chunk_id {chosen}", (old,))
        removed = conn.changes()
        (last_chunk,) = conn.execute("SELECT coalesce(max(chunk_id), 0) FROM chunks").fetchone() or (0,)
        _insert_chunks(conn, [(len(rows), orjson.dumps(rows))], int(last_chunk))
        conn.execute(
            "UPDATE documents SET mtime_ns=?, size=?, sha256=?, indexed_at=? WHERE doc_id=?",
            (after[0], after[1], after[2], time.time(), doc_id),
        )
    return len(rows) - removed


def _encoded_size(prepared: tuple[int, bytes]) -> int:
    return len(prepared[1])


def _known_documents(conn: apsw.Connection) -> dict[str, tuple[int, int, int, str]]:
    """path → (doc_id, mtime_ns, size, sha256) of every indexed file."""
    return {
        str(path): (int(doc_id), int(mtime_ns), int(size), str(sha))
        for doc_id, path, mtime_ns, size, sha in conn.execute(
            "SELECT doc_id, path, mtime_ns, size, sha256 FROM documents"
        )
    }


_INSERT_DOCUMENTS = (
    "INSERT INTO documents(doc_id, path, mtime_ns, size, sha256, indexed_at) "
    "SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5 FROM json_each(?)"
)
# ?1: the chunk id before the batch's first; ?2: the batch's rows (see prepare_encoded), converted to JSONB once
# per statement: jsonb_each then hands each row over as a blob that ->> reads without parsing it again.
_INSERT_CHUNKS = (
    "INSERT INTO chunks(chunk_id, doc_id, start_line, end_line, heading, text, text_digest, text_length) "
    "SELECT ?1 + key + 1, value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6 "
    "FROM jsonb_each(jsonb(?2))"
)
_INSERT_FTS = (
    "INSERT INTO chunks_fts(rowid, body, idents) "
    "SELECT ?1 + key + 1, coalesce(value->>7, value->>4), value->>8 FROM jsonb_each(jsonb(?2))"
)


def _insert_chunks(conn: apsw.Connection, prepared: list[tuple[int, bytes]], last_chunk: int) -> int:
    """Insert prepared chunks numbered on from ``last_chunk``; returns the last number used. Two statements in all:
    with a worker thread holding the GIL, every call into SQLite waits up to 5 ms to get it back."""
    rows = b",".join(encoded[1:-1] for count, encoded in prepared if count)
    if rows:
        batch = b"[" + rows + b"]"
        conn.execute(_INSERT_CHUNKS, (last_chunk, batch))
        conn.execute(_INSERT_FTS, (last_chunk, batch))
    return last_chunk + sum(count for count, _encoded in prepared)


def _delete_docs(conn: apsw.Connection, doc_ids: list[int]) -> int:
    """Remove documents with their chunks; returns how many chunks went."""
    ids = (orjson.dumps(doc_ids),)
    chosen = "IN (SELECT value FROM json_each(?))"
    conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN (SELECT chunk_id FROM chunks WHERE doc_id {chosen})", ids)
    conn.execute(f"DELETE FROM chunks WHERE doc_id {chosen}", ids)
    removed = conn.changes()
    conn.execute(f"DELETE FROM documents WHERE doc_id {chosen}", ids)
    return removed


def _too_large(size: int, limit: int) -> str:
    return f"too large: {size} bytes; the limit is {limit} (index_max_file_bytes)"
