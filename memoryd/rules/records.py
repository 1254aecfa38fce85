"""The records of changes as the daemon keeps them on disk — history.jsonl lines and intent journals — as typed
values, parsed once where the files are read (``journal``).

Both files can be edited by a person or shipped by a cloned repository, so a record is proved to have the shape
the daemon writes before anything reads it: a line or a journal that does not is set aside (``parse`` answers None;
``journal`` reports the line, or renames the journal ``.unreadable``), never half-read. The shape on disk is what
it always was; fields this version does not read are kept in ``extra``, so a line written by a later version still
reads (and fields are only ever added).

A history line: ``{"op", "ts", "run_id", "changes": [{"path", "action", "sha_before", "sha_after", "backup",
"layer"?, "rules"?: [{"rule_id", "rev_before", "rev_after"}], "restores"?, "item_id"?, …}], "kind"?, "item_id"?,
"path"?, "restores"?, "restored_op"?, "reason"?, …}``. An intent journal: ``{"run_id", "history": <the line to
append>, "writes": [{"path", "content": str | null}]}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_ENTRY_TEXT = ("op", "ts", "run_id", "kind", "item_id", "path", "restores", "restored_op", "reason")
_CHANGE_TEXT = ("action", "sha_before", "sha_after", "backup", "layer", "restores", "item_id")


def _text(raw: Mapping[str, Any], key: str) -> tuple[bool, str | None]:
    """(whether ``raw[key]`` is absent, null or a string, the string or None)."""
    value = raw.get(key)
    return (value is None or isinstance(value, str)), (value if isinstance(value, str) else None)


def _int(value: object) -> bool:
    return value is None or type(value) is int


@dataclass(frozen=True, slots=True)
class RuleRevision:
    """A rule a change touched: its revision before (None: it was new) and after (None: it went away)."""

    rule_id: str
    rev_before: int | None
    rev_after: int | None

    @classmethod
    def parse(cls, raw: object) -> RuleRevision | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("rule_id"), str):
            return None
        before, after = raw.get("rev_before"), raw.get("rev_after")
        if not _int(before) or not _int(after):
            return None
        return cls(raw["rule_id"], before, after)

    def to_dict(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "rev_before": self.rev_before, "rev_after": self.rev_after}


@dataclass(frozen=True, slots=True)
class Change:
    """One file a recorded change touched: its content's sha256 before and after (None: absent), where its
    pre-image was backed up (None: it did not exist), and what the change says of it besides."""

    path: str
    action: str | None
    sha_before: str | None
    sha_after: str | None
    backup: str | None
    layer: str | None
    rules: tuple[RuleRevision, ...]
    restores: str | None  # the run a restore undid
    item_id: str | None  # the memory item a forget (or its restore) concerns
    extra: Mapping[str, Any]  # the rest (moved_to, expired, bullets…), as written

    @classmethod
    def parse(cls, raw: object) -> Change | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
            return None
        texts: dict[str, str | None] = {}
        for key in _CHANGE_TEXT:
            ok, texts[key] = _text(raw, key)
            if not ok:
                return None
        listed = raw.get("rules", [])
        if not isinstance(listed, list):
            return None
        rules = tuple(RuleRevision.parse(r) for r in listed)
        if any(r is None for r in rules):
            return None
        extra = {k: v for k, v in raw.items() if k not in (*_CHANGE_TEXT, "path", "rules")}
        return cls(
            path=raw["path"],
            action=texts["action"],
            sha_before=texts["sha_before"],
            sha_after=texts["sha_after"],
            backup=texts["backup"],
            layer=texts["layer"],
            rules=tuple(r for r in rules if r is not None),
            restores=texts["restores"],
            item_id=texts["item_id"],
            extra=extra,
        )


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One line of history.jsonl: one recorded change (or, for ``hand_edit``, edits a person saved)."""

    op: str | None
    ts: str | None
    run_id: str | None
    kind: str | None  # consolidate, archive, ttl, compact: what a curation change was (None for the others)
    changes: tuple[Change, ...]
    item_id: str | None
    path: str | None
    restores: str | None
    restored_op: str | None
    reason: str | None
    extra: Mapping[str, Any]  # the rest (request_id, observation_ids, rule_id, thresholds…), as written

    @classmethod
    def parse(cls, raw: object) -> HistoryEntry | None:
        """The entry ``raw`` (a parsed JSON value) records, None when it is not of the shape the daemon writes."""
        if not isinstance(raw, dict):
            return None
        texts: dict[str, str | None] = {}
        for key in _ENTRY_TEXT:
            ok, texts[key] = _text(raw, key)
            if not ok:
                return None
        listed = raw.get("changes", [])
        if not isinstance(listed, list):
            return None
        changes = tuple(Change.parse(c) for c in listed)
        if any(c is None for c in changes):
            return None
        return cls(
            op=texts["op"],
            ts=texts["ts"],
            run_id=texts["run_id"],
            kind=texts["kind"],
            changes=tuple(c for c in changes if c is not None),
            item_id=texts["item_id"],
            path=texts["path"],
            restores=texts["restores"],
            restored_op=texts["restored_op"],
            reason=texts["reason"],
            extra={k: v for k, v in raw.items() if k not in (*_ENTRY_TEXT, "changes")},
        )

    def touches(self, path: str) -> bool:
        return any(c.path == path for c in self.changes)


@dataclass(frozen=True, slots=True)
class JournalWrite:
    path: str
    content: bytes | None  # None deletes the file


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """An intent record: the files one change writes (or deletes) and the history line that records it."""

    run_id: str
    history: Mapping[str, Any]  # appended to history.jsonl as it is
    writes: tuple[JournalWrite, ...]

    @classmethod
    def parse(cls, raw: object) -> JournalRecord:
        """The record ``raw`` holds; ValueError when it is not of the shape ``journal.commit`` writes (the paths
        are the journal's to check: they must name files a change may write)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("history"), dict):
            raise ValueError("not an intent record")
        if HistoryEntry.parse(raw["history"]) is None:
            raise ValueError("its history line is not of the shape the daemon writes")
        run_id = raw.get("run_id")
        if not isinstance(run_id, str):
            raise ValueError("its run id is missing")
        writes = raw.get("writes")
        if not isinstance(writes, list):
            raise ValueError("no list of writes")
        out = []
        for item in writes:
            if not isinstance(item, dict) or not isinstance(item.get("content"), str | None):
                raise ValueError("a write is not {path, content}")
            if not isinstance(item.get("path"), str):
                raise ValueError("a write names no path")
            content = item["content"]
            out.append(JournalWrite(item["path"], None if content is None else content.encode("utf-8")))
        return cls(run_id, raw["history"], tuple(out))

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "history": dict(self.history),
            "writes": [
                {"path": w.path, "content": None if w.content is None else w.content.decode("utf-8")}
                for w in self.writes
            ],
        }
