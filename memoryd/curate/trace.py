"""The recall trace (seed 002 §R4 context trace): one row per recall for a prompt, and the replay store.

``context`` with a ``query_text`` (the prompt hooks, the MCP tool, ``memoryctl context``) hands a :class:`Recall` to
:meth:`TraceWriter.submit`, which only queues it: the files are written by :meth:`TraceWriter.run`, a task of its
own, in a worker thread, so the prompt path never waits on a disk (measured in bench/bench_recall_trace.py).

- ``recall.jsonl`` gets one row per recall: why it fired or did not (``trigger``), how many hits the search found,
  how many passages were injected, their item ids and places — never text.
- ``replay.jsonl`` gets one row per recall whose hits were injected: the prompt's text (the one observability file
  that keeps any: in the workspace only, never in a log; at most :data:`QUERY_MAX_CHARS`) and, per injected
  passage, its path, line range, item id and the SHA-256 of each of its lines — not their text. The file keeps the
  newest ``replay_keep`` rows: when it holds twice that many it is rewritten atomically with the newest half.
  ``memoryd/curate/replay.py`` replays them before a consolidation writes.

Only a daemon that holds the workspace's write lock writes (``may_write``); the others answer and write nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog

from memoryd import fsio
from memoryd.curate import observe
from memoryd.settings import ObservabilitySettings
from memoryd.text.chunker import split_lines
from memoryd.text.passages import MARK

log = structlog.get_logger("memoryd.curate")

QUERY_MAX_CHARS = 8000  # of a prompt kept for replay (a pasted log: its head, where the question usually is)
COALESCE_S = 0.25  # recalls arriving this close together are written in one batch: one append, one fsync each file
PENDING_MAX = 4096  # recalls queued for writing; beyond it they are dropped (counted, logged)
READ_MAX_BYTES = 8 * 1024 * 1024  # a memory file read to fingerprint a passage (index_max_file_bytes' default)
REPLAY_READ_MAX_BYTES = 64 * 1024 * 1024
_SESSION = re.compile(r"[A-Za-z0-9._:-]{1,128}")


@dataclass(frozen=True, slots=True)
class Answer:
    """One injected passage: where it is and what it said (``snippet``: the text shown, only to check the file
    still says it when the row is written; never stored)."""

    path: str
    start_line: int
    lines: int
    item_id: str | None
    snippet: str


@dataclass(frozen=True, slots=True)
class Recall:
    ts: str
    session: str | None
    query: str
    trigger: str  # why recall fired or did not: injected, no_hits, below_floor, filtered, over_budget, …
    hits: int
    injected: int
    past: bool
    recent: int
    mode: str | None = None
    degraded: str | None = None
    answers: tuple[Answer, ...] = ()


def session_label(session_id: str | None) -> str | None:
    """A host's session id as rows keep it: as is when it looks like one (a UUID), else its digest."""
    if session_id is None:
        return None
    if _SESSION.fullmatch(session_id):
        return session_id
    return "sha256:" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def line_digest(line: str) -> str:
    """A line as replay rows keep it: the first 16 hex of the SHA-256 of its text without surrounding whitespace and
    without ``**`` (a snippet's match marks, and Markdown bold alike, so a line read from a snippet and the same line
    read from its file have one digest)."""
    return hashlib.sha256(line.replace(MARK, "").strip().encode("utf-8", "surrogatepass")).hexdigest()[:16]


def recall_row(recall: Recall) -> dict[str, Any]:
    row: dict[str, Any] = {
        "ts": recall.ts,
        "session": recall.session,
        "trigger": recall.trigger,
        "hits": recall.hits,
        "injected": recall.injected,
        "item_ids": [a.item_id for a in recall.answers if a.item_id],
        "passages": [f"{a.path}:{a.start_line}" for a in recall.answers],
        "past": recall.past,
        "recent": recall.recent,
    }
    if recall.mode is not None:
        row["mode"] = recall.mode
    if recall.degraded is not None:
        row["degraded"] = recall.degraded
    return row


@dataclass(eq=False)
class Job:
    workspace_id: str
    root: Path
    recall: Recall


@dataclass
class TraceWriter:
    settings: ObservabilitySettings
    may_write: Callable[[str], bool] = lambda _workspace_id: True
    dropped: int = 0
    _pending: deque[Job] = field(default_factory=deque)
    _wake: anyio.Event = field(default_factory=anyio.Event)
    _progress: anyio.Event = field(default_factory=anyio.Event)
    _urgent: anyio.Event = field(default_factory=anyio.Event)
    _submitted: int = 0
    _done: int = 0
    _replay_rows: dict[str, int] = field(default_factory=dict)  # workspace id → rows in replay.jsonl (once counted)

    @property
    def enabled(self) -> bool:
        return self.settings.trace or self.settings.replay

    def submit(self, workspace_id: str, root: Path, recall: Recall) -> None:
        """Queue one recall for writing; never blocks (called on the prompt's path)."""
        if not self.enabled:
            return
        if len(self._pending) >= PENDING_MAX:
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 10_000 == 0:
                log.warning("recall_trace_dropped", count=self.dropped)
            return
        self._pending.append(Job(workspace_id, root, recall))
        self._submitted += 1
        self._wake.set()

    async def flush(self) -> None:
        """Until every recall submitted so far is written (or was given up on)."""
        target = self._submitted
        while self._done < target:
            progress = self._progress
            self._urgent.set()
            await progress.wait()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            with anyio.move_on_after(COALESCE_S):  # let a burst of prompts gather (flush cuts the wait short)
                await self._urgent.wait()
            self._wake = anyio.Event()
            self._urgent = anyio.Event()
            batch = list(self._pending)
            self._pending.clear()
            try:
                await anyio.to_thread.run_sync(self.write, batch)
            finally:
                self._done += len(batch)
                self._progress.set()
                self._progress = anyio.Event()

    def write(self, batch: list[Job]) -> None:
        """Write ``batch`` (worker thread): per workspace, its recall rows in one append, then its replay rows."""
        by_workspace: dict[str, list[Job]] = {}
        for job in batch:
            by_workspace.setdefault(job.workspace_id, []).append(job)
        for workspace_id, jobs in by_workspace.items():
            if not self.may_write(workspace_id):  # another daemon writes this workspace: it keeps its own rows
                continue
            root = jobs[0].root
            try:
                if self.settings.trace:
                    rows = [recall_row(j.recall) for j in jobs]
                    observe.append(root, observe.RECALL, rows, rotate_bytes=self.settings.recall_max_bytes)
                if self.settings.replay:
                    files: dict[str, list[str] | None] = {}  # each memory file read once per batch
                    replays = [r for j in jobs if j.recall.answers and (r := replay_row(root, j.recall, files))]
                    if replays:
                        self._append_replay(workspace_id, root, replays)
            except OSError as exc:  # a full disk, a symlink planted at the file: the prompt was answered anyway
                log.warning("recall_trace_not_written", workspace_id=workspace_id, error=type(exc).__name__)

    def _append_replay(self, workspace_id: str, root: Path, rows: list[dict[str, Any]]) -> None:
        keep = self.settings.replay_keep
        count = self._replay_rows.get(workspace_id)
        if count is None:
            count = len(observe.read_rows(root, observe.REPLAY, REPLAY_READ_MAX_BYTES).rows)
        observe.append(root, observe.REPLAY, rows)
        count += len(rows)
        if count > 2 * keep:
            kept = observe.read_rows(root, observe.REPLAY, REPLAY_READ_MAX_BYTES).rows[-keep:]
            fsio.atomic_write(root / observe.REPLAY, observe.dumps(kept) + b"\n", root=root)
            count = len(kept)
        self._replay_rows[workspace_id] = count


def replay_row(root: Path, recall: Recall, files: dict[str, list[str] | None] | None = None) -> dict[str, Any] | None:
    """The replay row of ``recall`` (worker thread). A passage shown whole (its snippet not cut: most are) is
    fingerprinted from the snippet itself; a cut one from its file as it is now (``files``: the lines of files
    already read), and left out when the file no longer says what was shown (changed meanwhile, unreadable). None
    when no answer is left."""
    answers = []
    files = {} if files is None else files
    for answer in recall.answers:
        body = _whole(answer.snippet)
        if body is None:
            body = _from_file(root, answer, files)
        if not body:
            continue
        answers.append(
            {
                "path": answer.path,
                "start_line": answer.start_line,
                "lines": answer.lines,
                "item_id": answer.item_id,
                "digests": [line_digest(line) for line in body],
            }
        )
    if not answers:
        return None
    return {
        "ts": recall.ts,
        "query": recall.query[:QUERY_MAX_CHARS],
        "item_ids": [a["item_id"] for a in answers if a["item_id"]],
        "paths": sorted({a["path"] for a in answers}),
        "answers": answers,
    }


def _whole(snippet: str) -> list[str] | None:
    """The passage's non-blank lines when ``snippet`` shows it whole (no … at either end), else None."""
    if not snippet.strip() or snippet.startswith("…") or snippet.endswith("…"):
        return None
    return [line for line in snippet.split("\n") if line.strip()]


def _from_file(root: Path, answer: Answer, files: dict[str, list[str] | None]) -> list[str]:
    if answer.path not in files:
        files[answer.path] = _lines(root, answer.path)
    lines = files[answer.path]
    if lines is None:
        return []
    passage = [line for line in lines[answer.start_line - 1 : answer.start_line - 1 + answer.lines] if line.strip()]
    body = [line for line in passage if not line.lstrip().startswith("#")] or passage
    return body if body and _shows(body, answer.snippet) else []


def _lines(root: Path, rel: str) -> list[str] | None:
    target = fsio.within(root, root / rel)
    if target is None:
        return None
    try:
        return split_lines(fsio.read_regular(target, READ_MAX_BYTES).decode("utf-8", "replace"))
    except OSError:
        return None


_SPACE = re.compile(r"\s+")


def _flat(text: str) -> str:
    return _SPACE.sub(" ", text.replace(MARK, "")).strip()


def _shows(body: list[str], snippet: str) -> bool:
    """Whether the passage ``body`` still says what ``snippet`` showed (marks and the cut's … aside)."""
    shown = _flat(snippet).strip("…").strip()
    return not shown or shown in _flat("\n".join(body))
