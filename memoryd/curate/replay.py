"""The replay check (issue 22 item 8): before a consolidation writes, replay the workspace's recent recall against
the memory as it would be; an answer found now that would no longer be found holds the apply.

What is replayed: the newest ``keep`` rows of ``data/memory/observability/replay.jsonl`` (``memoryd/curate/trace.py``
writes them: a prompt whose recalled passages were injected, and per passage its path, line range, item id and the
digests of its lines).

How "found" is decided — the same test on the files as they are and as they would be, so only what the change
itself loses counts:

1. **Still said.** Every line of the answer (by digest, whitespace at the ends aside) is still a line of its file.
2. **Still ranked.** The chunk that holds the answer's first line ranks in the top ``top_k`` for the prompt in a
   BM25 over the chunks of the files the consolidation changes, built exactly like the workspace index (same chunker,
   tokenizer, columns and weights: ``memoryd/store/scratch.py``). The rest of the workspace is not in that index,
   so this asks "does the changed file still answer it well", not "would it win against every other file".

An answer in a file the consolidation does not change is unaffected and not checked. An answer not found *before*
the change (the file was edited since the prompt, the passage moved out of the top k) is ``stale``: counted, never
holding. An answer whose item was forgotten is skipped (it is meant not to be found). A row that is not of the shape
above is skipped and counted. Nothing here reads a path a row names: only the files the caller names are read.

Blocking: call from a worker thread.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd import fsio
from memoryd.curate import observe
from memoryd.curate.trace import REPLAY_READ_MAX_BYTES, line_digest
from memoryd.notes import items
from memoryd.store.scratch import ScratchIndex
from memoryd.text.chunker import split_lines

FILE_MAX_BYTES = 64 * 1024 * 1024  # a memory file read as it is now
DIGESTS_MAX = 400  # lines of one answer (a bullet is whole, however long)
_DIGEST = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class LostAnswer:
    query: str
    path: str
    start_line: int
    item_id: str | None


@dataclass(frozen=True, slots=True)
class ReplayVerdict:
    held: bool
    lost: list[LostAnswer] = field(default_factory=list)
    replayed: int = 0  # prompts replayed (rows read, newest keep)
    checked: int = 0  # answers in the changed files, found before the change
    stale: int = 0  # answers in the changed files already not found before it
    skipped: int = 0  # rows or answers not of the expected shape
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class _Answer:
    query: str
    path: str
    start_line: int
    item_id: str | None
    digests: tuple[str, ...]


class _Memory:
    """Some memory files' texts, their line digests and a scratch BM25 index of their chunks."""

    def __init__(self, texts: Mapping[str, str | None], max_lines: int) -> None:
        lines = {path: split_lines(text) for path, text in texts.items() if text is not None}
        self.digests = {path: [line_digest(line) for line in body] for path, body in lines.items()}
        self.sets = {path: set(d) for path, d in self.digests.items()}
        self.index = ScratchIndex(sorted(lines.items()), max_lines=max_lines)
        self._top: dict[str, set[int]] = {}

    def found(self, answer: _Answer, k: int) -> bool:
        have = self.sets.get(answer.path)
        if have is None or not set(answer.digests) <= have:
            return False
        top = self._top.get(answer.query)
        if top is None:
            top = self._top[answer.query] = set(self.index.top(answer.query, k))
        first = answer.digests[0]
        lines = self.digests[answer.path]
        for n in top:
            chunk = self.index.chunks[n]
            if chunk.doc == answer.path and first in lines[chunk.start : chunk.end]:
                return True
        return False

    def close(self) -> None:
        self.index.close()


def replay_check(
    root: Path,
    would_be: Mapping[str, str | None],
    *,
    keep: int = 200,
    top_k: int = 6,
    enabled: bool = True,
    current: Mapping[str, str | None] | None = None,
    chunk_max_lines: int = 40,
) -> ReplayVerdict:
    """Replay the newest ``keep`` kept prompts against ``would_be`` (workspace-relative path → the file's text after
    the change; None: the file would be gone). ``current``: the same files' texts now, when the caller has them
    (else read from disk). Held when an answer found now would no longer be found; ``lost`` lists them."""
    if not enabled:
        return ReplayVerdict(held=False, enabled=False)
    rows = observe.read_rows(root, observe.REPLAY, REPLAY_READ_MAX_BYTES)
    kept = rows.rows[-keep:] if keep > 0 else []
    answers, skipped = _answers(kept, set(would_be))
    skipped += sum(rows.skipped.values())
    hidden = set(items.forgotten(root)) if answers else set()
    answers = [a for a in dict.fromkeys(answers) if a.item_id is None or a.item_id not in hidden]
    if not answers:
        return ReplayVerdict(held=False, replayed=len(kept), skipped=skipped)
    now = dict(current) if current is not None else {}
    for path in would_be:
        if path not in now:
            now[path] = _read(root, path)
    before, after = _Memory(now, chunk_max_lines), _Memory(would_be, chunk_max_lines)
    try:
        lost: list[LostAnswer] = []
        checked = stale = 0
        for answer in answers:
            if not before.found(answer, top_k):
                stale += 1
                continue
            checked += 1
            if not after.found(answer, top_k):
                lost.append(LostAnswer(answer.query, answer.path, answer.start_line, answer.item_id))
    finally:
        before.close()
        after.close()
    return ReplayVerdict(held=bool(lost), lost=lost, replayed=len(kept), checked=checked, stale=stale, skipped=skipped)


def _answers(rows: list[dict[str, Any]], paths: set[str]) -> tuple[list[_Answer], int]:
    """The answers of ``rows`` that lie in ``paths``, and how many rows or answers were not of the shape."""
    out: list[_Answer] = []
    skipped = 0
    for row in rows:
        query, answers = row.get("query"), row.get("answers")
        if not isinstance(query, str) or not query.strip() or not isinstance(answers, list):
            skipped += 1
            continue
        for answer in answers:
            parsed = _answer(query, answer)
            if parsed is None:
                skipped += 1
            elif parsed.path in paths:
                out.append(parsed)
    return out, skipped


def _answer(query: str, raw: object) -> _Answer | None:
    if not isinstance(raw, dict):
        return None
    path, start, item_id, digests = raw.get("path"), raw.get("start_line"), raw.get("item_id"), raw.get("digests")
    if not isinstance(path, str) or not isinstance(start, int) or isinstance(start, bool):
        return None
    if item_id is not None and not isinstance(item_id, str):
        return None
    if not isinstance(digests, list) or not 0 < len(digests) <= DIGESTS_MAX:
        return None
    if not all(isinstance(d, str) and _DIGEST.fullmatch(d) for d in digests):
        return None
    return _Answer(query, path, start, item_id, tuple(digests))


def _read(root: Path, rel: str) -> str | None:
    """A memory file's text now; None when it does not exist (or cannot be read as one)."""
    target = fsio.within(root, fsio.member(root, rel))
    if target is None:
        return None
    try:
        return fsio.read_regular(target, FILE_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
