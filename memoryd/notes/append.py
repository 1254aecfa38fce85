"""Appending ``remember`` entries to the daily log (docs/reference/architecture.md, data safety): cost independent of the file's size.

Entries are appended with one ``write`` on O_APPEND and one fsync (:func:`memoryd.fsio.append_block`), never by
rewriting the file: what was in it is never touched again, so a crash mid-append can at worst leave a torn last
entry (it was never acknowledged) and never loses an earlier one. The service groups concurrent remembers of a
workspace into one batch: one write, one fsync and one index update for all of them, each caller answered with
its own id and lines (group commit).

What the next append needs to know of the file (its identity and size, line count, last byte, sha256 state, where
its last ``## `` block starts) is kept in a :class:`Tail` after each append. While the file's (inode, size, mtime)
still match, nothing is read: the entry's line numbers come from the kept line count, the index is updated from
the last block and the new entries alone (:meth:`~memoryd.store.index.NoteIndex.index_section`), and the sha256
from the kept hash state. A file changed by anyone else is read once (and indexed whole) to learn it again.

Blocking: call from a worker thread.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from memoryd.errors import AppError
from memoryd.fsio import ChangedMeanwhile, NotRegularFile, append_block, confine, make_dirs, read_range
from memoryd.notes import daily
from memoryd.store.index import NoteIndex
from memoryd.text import chunker

log = structlog.get_logger("memoryd.notes")

_SENTINEL = "## \x00end"
_READ_CHUNK = 1 << 20
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")  # as chunker.split_lines breaks lines


@dataclass(frozen=True, slots=True)
class Written:
    """An entry remember wrote (or, in a dry run, would write): where, and what names its section."""

    id: str
    path: str
    start_line: int
    lines: int
    heading: str
    first_line: str  # the first line under the heading that is not blank: for the item's sidecar line


@dataclass(slots=True)
class Request:
    """One remember waiting for the workspace's writer."""

    kind: str
    text: str
    reason: str | None
    followup: str | None
    keywords: tuple[str, ...] = ()
    item: Any = None  # items.ItemFields: what remember said of the entry's item (its sidecar line)
    taken: bool = False
    result: Written | None = None
    error: AppError | None = None

    @property
    def size(self) -> int:
        parts = (self.text, self.reason or "", self.followup or "", *self.keywords)
        return sum(len(part.encode("utf-8")) for part in parts)


@dataclass(slots=True)
class Tail:
    """A daily file as this daemon last left it."""

    rel: str
    ino: int
    size: int
    mtime_ns: int
    breaks: int  # line terminators (\r\n, \r and \n each one), as chunker.split_lines counts lines
    last_byte: bytes  # b"" for an empty file
    sha: Any  # hashlib's sha256 state over the whole file
    block: tuple[int, int] | None  # (byte offset, 1-based line) of the last "## " block; None: unknown
    fence_closed: bool  # the file does not end inside a code fence

    @property
    def signature(self) -> tuple[int, int, int]:
        return self.ino, self.size, self.mtime_ns


def _breaks(data: bytes) -> int:
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


def _last_block(data: bytes) -> tuple[bool, tuple[int, int] | None]:
    """Whether ``data`` (a whole file) ends outside any code fence, and if so where its last ``## `` block starts
    as (byte offset, 1-based line): the preamble's (0, 1) when it has no heading."""
    lines = chunker.split_lines(data.decode("utf-8", errors="replace")) if data else []
    spans = chunker.chunk_spans([*lines, _SENTINEL], max_lines=1 << 30)  # one span per block
    if not spans or spans[-1] != (len(lines), len(lines) + 1, _SENTINEL):
        return False, None
    starts = [lo for lo, _hi, heading in spans[:-1] if heading]  # a heading block's span starts at its heading
    if not starts:
        return True, (0, 1)
    index = starts[-1]
    if index == 0:
        return True, (0, 1)
    breaks = _LINE_BREAK.finditer(data)
    for _ in range(index - 1):
        next(breaks)
    return True, (next(breaks).end(), index + 1)


def _headings(text: str) -> list[str]:
    """The ``## `` block headings of ``text`` as the chunker sees them, then the sentinel if a heading after
    ``text`` would still be one."""
    lines = chunker.split_lines(text) if text else []
    spans = chunker.chunk_spans([*lines, _SENTINEL], max_lines=1 << 30)  # one span per block
    return [heading for _lo, _hi, heading in spans if heading]


def scan(target: Path, rel: str, keep_max_bytes: int) -> Tail | None:
    """Learn a daily file by reading it once (None when it does not exist): the slow path, for a file this daemon
    has not written last. Whether it ends inside a fence is only worked out up to ``keep_max_bytes``."""
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return None
    if not os.path.isfile(target):
        raise NotRegularFile(0, "not a regular file", str(target))
    sha = hashlib.sha256()
    breaks, offset, last = 0, 0, b""
    kept: list[bytes] | None = [] if info.st_size <= keep_max_bytes else None
    while True:
        part = read_range(target, offset, _READ_CHUNK)
        if not part:
            break
        sha.update(part)
        breaks += _breaks(part) - (1 if last == b"\r" and part[:1] == b"\n" else 0)
        last = part[-1:]
        offset += len(part)
        if kept is not None:
            kept.append(part)
            if offset > keep_max_bytes:
                kept = None
    closed, block = _last_block(b"".join(kept)) if kept is not None else (False, None)
    # the stat may be older than what was read if the file grew meanwhile: the append then sees a mismatch
    return Tail(rel, info.st_ino, offset, info.st_mtime_ns, breaks, last, sha, block, closed)


@dataclass(slots=True)
class Planned:
    data: bytes
    results: list[Written]
    last_heading: tuple[int, int]  # (byte offset in data, 1-based line in the file)
    fence_closed: bool


def items_first_line(entry: str) -> str:
    """The first line under an entry's heading that is not blank: with the heading, it names the entry's section
    (two entries of the same minute and type differ by it)."""
    lines = entry.strip("\n").split("\n")
    return next((line.strip() for line in lines[1:] if line.strip()), "")


def plan(tail: Tail | None, rel: str, now: datetime, batch: list[Request]) -> Planned:
    """The bytes to append for ``batch`` and each request's answer, from what is known of the file."""
    parts: list[bytes] = []
    results: list[Written] = []
    length = 0
    breaks = 0 if tail is None else tail.breaks
    last_byte = b"" if tail is None else tail.last_byte
    heading_at = (0, 1)
    for request in batch:
        entry = daily.plan_entry(
            now=now,
            kind=request.kind,
            text=request.text,
            reason=request.reason,
            followup=request.followup,
            keywords=request.keywords,
            file_exists=bool(last_byte),
            file_ends_with_newline=last_byte == b"\n",
        )
        header = entry.header.encode("utf-8")
        body = entry.entry.encode("utf-8")
        leading = len(body) - len(body.lstrip(b"\n"))
        before = header + body[:leading]
        breaks += _breaks(before) - (1 if last_byte == b"\r" and before[:1] == b"\n" else 0)
        heading_at = (length + len(before), breaks + 1)
        results.append(
            Written(
                id=daily.entry_id(),
                path=rel,
                start_line=breaks + 1,
                lines=body.count(b"\n") - leading,
                heading=entry.heading,
                first_line=items_first_line(entry.entry),
            )
        )
        breaks += _breaks(body[leading:])
        parts += [header, body]
        length += len(header) + len(body)
        last_byte = b"\n"
    data = b"".join(parts)
    # Escaped entries hold no heading or fence of their own (daily.escape_structure): the chunker must find the
    # headings written and nothing else, or the last block is not known.
    day_header = [f"## {now:%Y-%m-%d}"] if tail is None or not tail.last_byte else []
    expected = day_header + [r.heading for r in results] + [_SENTINEL]
    return Planned(data, results, heading_at, _headings(data.decode("utf-8")) == expected)


def dry_run(tail: Tail | None, rel: str, now: datetime, request: Request) -> tuple[Written, str]:
    """The entry ``request`` would be, and the text that would be appended for it."""
    planned = plan(tail, rel, now, [request])
    return planned.results[0], planned.data.decode("utf-8").lstrip("\n")


def write(
    tail: Tail | None, root: Path, target: Path, rel: str, now: datetime, batch: list[Request]
) -> tuple[Tail, list[Written], bytes]:
    """Append ``batch`` to ``target`` as planned on ``tail`` (what is known of the file: None when it does not
    exist); returns what is now known of the file, each request's answer and the bytes appended. Raises
    :class:`~memoryd.fsio.ChangedMeanwhile` when the file is not as ``tail`` says (nothing written: plan again).
    """
    planned = plan(tail, rel, now, batch)
    after = append_block(target, planned.data, None if tail is None else tail.signature, root=root)
    sha = hashlib.sha256() if tail is None else tail.sha.copy()
    sha.update(planned.data)
    old_size = 0 if tail is None else tail.size
    closed = (tail is None or tail.fence_closed) and planned.fence_closed
    offset, line = planned.last_heading
    new = Tail(
        rel,
        after.st_ino,
        after.st_size,
        after.st_mtime_ns,
        (0 if tail is None else tail.breaks)
        + _breaks(planned.data)
        - (1 if tail is not None and tail.last_byte == b"\r" and planned.data[:1] == b"\n" else 0),
        b"\n",
        sha,
        (old_size + offset, line) if closed and after.st_size == old_size + len(planned.data) else None,
        closed,
    )
    return new, planned.results, planned.data


def index_appended(index: NoteIndex, tail: Tail | None, new: Tail, target: Path, rel: str, data: bytes) -> str:
    """Index the appended entries: from the file's last block on when it is known, else the whole file."""
    after = (new.mtime_ns, new.size, new.sha.hexdigest())
    if tail is not None and tail.block is not None and new.block is not None:
        offset, line = tail.block
        section = read_range(target, offset, tail.size - offset) + data
        before = (tail.mtime_ns, tail.size, tail.sha.hexdigest())
        if index.index_section(rel, section.decode("utf-8", errors="replace"), line, before, after):
            return "section"
    index.sync([rel])
    return "file"


# One group commit writes at most this many remembers (and about this many bytes); the rest wait for the next.
BATCH_MAX_ENTRIES = 256
BATCH_MAX_BYTES = 1024 * 1024


@dataclass(eq=False)
class Writer:
    """One workspace's remember writer: the entries waiting, and today's file as the last append left it. Used
    under the workspace's write lock; its methods block (worker thread)."""

    root: Path
    workspace_id: str
    scan_max_bytes: int  # a file read whole is chunked (for its last block) up to this size: index_max_file_bytes
    queue: list[Request] = field(default_factory=list)
    tail: Tail | None = None

    def take(self) -> list[Request]:
        """The next batch from the front of the queue: at most BATCH_MAX_ENTRIES and about BATCH_MAX_BYTES."""
        batch: list[Request] = []
        size = 0
        while self.queue and len(batch) < BATCH_MAX_ENTRIES and (not batch or size < BATCH_MAX_BYTES):
            request = self.queue.pop(0)
            request.taken = True
            size += request.size
            batch.append(request)
        return batch

    def _target(self, now: datetime, *, create: bool) -> tuple[str, Path]:
        memory_dir = self.root / "memory"
        rel = f"memory/{now.strftime('%Y-%m-%d')}.md"
        if create:
            try:
                make_dirs(memory_dir, root=self.root)
            except OSError as exc:
                raise AppError("MEMORY_WRITE_FAILED", f"Cannot create memory/: {exc.strerror}") from exc
        target = confine(self.root, rel)
        if memory_dir.resolve() not in target.parents:
            raise AppError("MEMORY_PATH_TRAVERSAL", "memory/ points outside the workspace")
        return rel, target

    def _known(self, rel: str, target: Path) -> Tail | None:
        """What is known of the daily file: the kept tail while the file is as this writer left it, else the file
        is read once."""
        tail = self.tail if self.tail is not None and self.tail.rel == rel else None
        try:
            current = os.stat(target)
        except FileNotFoundError:
            current = None
        except OSError as exc:
            raise AppError("MEMORY_READ_FAILED", f"Cannot read {rel}: {exc.strerror}") from exc
        if (
            tail is not None
            and current is not None
            and (current.st_ino, current.st_size, current.st_mtime_ns) == (tail.signature)
        ):
            return tail
        self.tail = None
        try:
            return scan(target, rel, self.scan_max_bytes)
        except NotRegularFile as exc:
            raise AppError("MEMORY_FILE_REFUSED", f"{rel} is not a regular file") from exc
        except OSError as exc:
            raise AppError("MEMORY_READ_FAILED", f"Cannot read {rel}: {exc.strerror}") from exc

    def dry_run(self, request: Request) -> tuple[Written, str]:
        now = datetime.now().astimezone()
        rel, target = self._target(now, create=False)
        return dry_run(self._known(rel, target), rel, now, request)

    def write(self, batch: list[Request], index: NoteIndex | None) -> str | None:
        """Append ``batch`` to today's file and index it; each request gets its answer or its error. Returns the
        file when it is written but not indexed (no usable index, or indexing failed), else None."""
        try:
            now = datetime.now().astimezone()
            rel, target = self._target(now, create=True)
            for _attempt in range(5):
                tail = self._known(rel, target)
                try:
                    new, results, data = write(tail, self.root, target, rel, now, batch)
                except ChangedMeanwhile:
                    self.tail = None
                    continue  # someone edited the file meanwhile: plan again on the new content
                except NotRegularFile as exc:
                    raise AppError("MEMORY_FILE_REFUSED", f"{rel} is not a regular file") from exc
                except OSError as exc:
                    raise AppError("MEMORY_WRITE_FAILED", f"Cannot write {rel}: {exc.strerror}") from exc
                self.tail = new
                for request, result in zip(batch, results, strict=True):
                    request.result = result
                indexed = "none"
                if index is not None:
                    try:
                        indexed = index_appended(index, tail, new, target, rel, data)
                    except Exception:
                        log.exception("index_after_remember_failed", workspace_id=self.workspace_id)
                log.info(
                    "remembered",
                    workspace_id=self.workspace_id,
                    path=rel,
                    entries=len(batch),
                    start_line=results[0].start_line,
                    bytes=len(data),
                    text_lengths=[len(request.text) for request in batch],
                    indexed=indexed,
                )
                return rel if indexed == "none" else None
            raise AppError("MEMORY_CONFLICT", f"{rel} kept changing while writing")
        except AppError as exc:
            for request in batch:
                request.error = exc
            return None
