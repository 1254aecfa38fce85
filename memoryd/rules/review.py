"""Read-only audit and review of a workspace's rules: rules search/show/diff, the timeline, the candidate list.

``show``, ``diff`` and ``timeline`` read files and run in a worker thread; ``search`` and ``candidates`` only look at
the loaded rule set.
"""

from __future__ import annotations

import bisect
import difflib
import heapq
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import yaml

from memoryd import ids
from memoryd.errors import AppError
from memoryd.fsio import confine
from memoryd.notes import items
from memoryd.rules import api as m
from memoryd.rules import compile as comp
from memoryd.rules import journal
from memoryd.rules.fwrange import FwRangeError, parse_version
from memoryd.rules.models import Observation
from memoryd.rules.ruleset import Layer, LoadedRule, RuleFileError, read_yaml, rule_dict
from memoryd.rules.workspace import WorkspaceRules

_YAML = (".yaml", ".yml")
TIMELINE_PATHS = 200  # paths a timeline event lists at most


def _summary(loaded: LoadedRule) -> m.RuleSummary:
    rule = loaded.rule
    return m.RuleSummary(
        rule_id=rule.rule_id,
        layer=loaded.layer,
        model_id=rule.model_id,
        fw_range=loaded.range.text,
        priority=rule.priority,
        confidence=rule.confidence,
        revision=rule.revision,
        summary=rule.summary,
        instance_id=rule.instance_id,
        path=loaded.path,
        facts=sorted(rule.facts),
    )


def search(
    wr: WorkspaceRules,
    *,
    model_id: str | None = None,
    fw_version: str | None = None,
    query: str | None = None,
    layer: Layer | None = None,
    limit: int = 50,
) -> m.RulesSearchResult:
    version = None
    if fw_version is not None:
        try:
            version = parse_version(fw_version)
        except FwRangeError as exc:
            raise AppError("MEMORY_VERSION_INVALID", str(exc)) from exc
    words = [w.casefold() for w in (query or "").split() if w]
    found = []
    for loaded in wr.rules.all():
        rule = loaded.rule
        if model_id is not None and rule.model_id != model_id:
            continue
        if layer is not None and loaded.layer != layer:
            continue
        if version is not None and not loaded.range.contains(version):
            continue
        if words:
            haystack = orjson.dumps(rule_dict(rule), option=orjson.OPT_NON_STR_KEYS).decode().casefold()
            if not all(w in haystack for w in words):
                continue
        found.append(_summary(loaded))
    return m.RulesSearchResult(rules=found[:limit], total=len(found))


def _one(wr: WorkspaceRules, rule_id: str, layer: Layer | None, model_id: str | None = None) -> LoadedRule:
    found = wr.rules.find(rule_id, layer, model_id)
    if not found:
        raise AppError("MEMORY_RULE_NOT_FOUND", f"No rule {rule_id}" + (f" in {layer}s" if layer else ""))
    return found[0]


def show(wr: WorkspaceRules, rule_id: str, layer: Layer | None = None) -> m.RulesShowResult:
    wr.evidence.refresh()
    loaded = _one(wr, rule_id, layer)
    observations, missing = [], []
    for oid in loaded.rule.provenance.observation_ids:
        stored = wr.evidence.get(oid)
        if stored is None:
            missing.append(oid)
        else:
            observations.append(stored.observation)
    return m.RulesShowResult(
        rule=loaded.rule,
        layer=loaded.layer,
        path=loaded.path,
        observations=observations,
        missing_observations=missing,
        history=_rule_history(journal.read_history(wr.root), loaded.rule_id),
    )


def diff(
    wr: WorkspaceRules, rule_id: str, from_rev: int, to_rev: int | None = None, layer: Layer | None = None
) -> m.RulesDiffResult:
    loaded = _one(wr, rule_id, layer)
    if to_rev is None:
        to_rev = loaded.rule.revision
    history = journal.read_history(wr.root)
    before = _revision(wr.root, history, loaded, from_rev)
    after = _revision(wr.root, history, loaded, to_rev)
    text_a = yaml.safe_dump(before, sort_keys=False, allow_unicode=True).splitlines(keepends=True)
    text_b = yaml.safe_dump(after, sort_keys=False, allow_unicode=True).splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(text_a, text_b, f"{rule_id}@{from_rev}", f"{rule_id}@{to_rev}"))
    facts_a, facts_b = before.get("facts", {}), after.get("facts", {})
    changes = []
    for key in sorted(set(facts_a) | set(facts_b)):
        if key not in facts_b:
            changes.append(m.FactChange(key=key, before=facts_a[key], change="removed"))
        elif key not in facts_a:
            changes.append(m.FactChange(key=key, after=facts_b[key], change="added"))
        elif facts_a[key] != facts_b[key]:
            changes.append(m.FactChange(key=key, before=facts_a[key], after=facts_b[key], change="changed"))
    return m.RulesDiffResult(rule_id=rule_id, from_rev=from_rev, to_rev=to_rev, diff=diff, facts=changes)


def timeline(
    wr: WorkspaceRules,
    *,
    since: str | None = None,
    until: str | None = None,
    run_id: str | None = None,
    limit: int = 50,
    types: Iterable[str] | None = None,
) -> m.TimelineResult:
    wanted = {"observation", "change", "remember"} if types is None else set(types)
    start = None if since is None else comp.parse_when(since, "since")
    end = None if until is None else comp.parse_when(until, "until")

    def inside(moment: datetime) -> bool:
        return (start is None or moment >= start) and (end is None or moment < end)

    wr.evidence.refresh()
    # (when, id, how to build the event): only the newest ``limit`` are built (10,000 remembered entries made a
    # timeline of 50 cost ~300 ms when every one became a model first)
    events: list[tuple[datetime, str, Callable[[], m.TimelineEvent]]] = []
    for stored in wr.evidence.iter_ordered() if "observation" in wanted else ():
        obs = stored.observation
        if run_id is not None and obs.run_id != run_id:
            continue
        moment = ids.id_time(obs.observation_id)
        if inside(moment):
            events.append((moment, obs.observation_id, partial(_observation_event, obs)))
    known = items.records(wr.root) if run_id is None else {}
    # what remember wrote (data/memory/items.jsonl), oldest first
    moments = _item_moments(wr.root, known) if "remember" in wanted else []
    low = 0 if start is None else bisect.bisect_left(moments, (start, ""))
    high = len(moments) if end is None else bisect.bisect_left(moments, (end, ""))
    skipped = max(high - low - (limit + 1), 0)  # older than any the answer can hold: counted, never built
    for moment, item_id in moments[low + skipped : high]:
        events.append((moment, item_id, partial(_item_event, item_id, known[item_id])))
    if run_id is None and "change" in wanted:
        for entry in journal.read_history(wr.root):
            try:
                moment = datetime.fromisoformat(str(entry.ts))
            except ValueError:
                continue
            if inside(moment):
                events.append((moment, str(entry.run_id), partial(_change_event, entry, known)))
    newest = heapq.nlargest(limit + 1, events, key=lambda e: (e[0], e[1]))
    return m.TimelineResult(events=[build() for _, _, build in newest[:limit]], truncated=len(events) + skipped > limit)


# root → (the parsed items it was computed from, their (created_at, id) oldest first): a timeline of 10,000 entries
# allocated a datetime and an event per entry per call, and the garbage collections that followed tripled its p50.
_MOMENTS: dict[Path, tuple[dict[str, dict[str, Any]], list[tuple[datetime, str]]]] = {}


def _item_moments(root: Path, known: dict[str, dict[str, Any]]) -> list[tuple[datetime, str]]:
    cached = _MOMENTS.get(root)
    if cached is not None and cached[0] is known:
        return cached[1]
    out: list[tuple[datetime, str]] = []
    for item_id, item in known.items():
        try:
            moment = datetime.fromisoformat(str(item.get("created_at")))
        except ValueError:
            continue
        out.append((moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC), item_id))
    out.sort()
    if len(_MOMENTS) > 256:
        _MOMENTS.clear()
    _MOMENTS[root] = (known, out)
    return out


def _observation_event(obs: Observation) -> m.TimelineEvent:
    return m.TimelineEvent(
        ts=obs.ts,
        type="observation",
        id=obs.observation_id,
        summary=_clip(obs.text),
        kind=obs.kind,
        run_id=obs.run_id,
        model_id=obs.model_id,
    )


def _item_event(item_id: str, item: dict[str, Any]) -> m.TimelineEvent:
    where = f"{item.get('path')}:{item.get('start_line')}"
    return m.TimelineEvent(
        ts=str(item["created_at"]),
        type="remember",
        id=item_id,
        summary=_clip(f"{where} {_first_line(item)}"),
        paths=[str(item.get("path"))],
    )


def _change_event(entry: journal.HistoryEntry, known: dict[str, dict[str, Any]]) -> m.TimelineEvent:
    return m.TimelineEvent(
        ts=str(entry.ts),
        type="change",
        id=str(entry.run_id),
        op=str(entry.op),
        kind=entry.kind,
        summary=_change_summary(entry, known),
        # an archive of thousands of days: its first paths (the summary counts them all)
        paths=[c.path for c in entry.changes[:TIMELINE_PATHS]],
    )


def candidates(wr: WorkspaceRules, model_id: str | None = None) -> m.CandidatesListResult:
    return m.CandidatesListResult(
        candidates=[
            _summary(r)
            for r in wr.rules.all()
            if r.layer == "candidate" and (model_id is None or r.rule.model_id == model_id)
        ]
    )


# --- helpers -------------------------------------------------------------------------------------------------------


def _rule_history(history: list[journal.HistoryEntry], rule_id: str) -> list[dict[str, Any]]:
    out = []
    for entry in history:
        for change in entry.changes:
            for touched in change.rules:
                if touched.rule_id == rule_id:
                    out.append(
                        {
                            "run_id": entry.run_id,
                            "op": entry.op,
                            "ts": entry.ts,
                            "path": change.path,
                            "action": change.action,
                            "layer": change.layer,
                            "rev_before": touched.rev_before,
                            "rev_after": touched.rev_after,
                            "backup": change.backup,
                        }
                    )
    return out


def _revision(root: Path, history: list[journal.HistoryEntry], loaded: LoadedRule, rev: int) -> dict[str, Any]:
    """The rule as it was at revision ``rev``: the current file, or the pre-image a later change backed up."""
    if rev == loaded.rule.revision:
        return rule_dict(loaded.rule)
    for item in _rule_history(history, loaded.rule_id):
        if item["layer"] == loaded.layer and item["rev_before"] == rev and item["backup"]:
            backup = str(item["backup"])
            try:  # history.jsonl can be edited by hand: a backup path must stay among the backups
                confine(
                    (root / journal.BACKUP_DIR).resolve(), backup.removeprefix(journal.BACKUP_DIR + "/"), suffixes=_YAML
                )
                raw = read_yaml(root, backup)
            except (AppError, RuleFileError):  # gone, elsewhere, or not YAML the daemon can read: not on record
                break
            if loaded.layer == "override" and isinstance(raw, dict):
                for candidate in raw.get("rules") or []:
                    if isinstance(candidate, dict) and candidate.get("rule_id") == loaded.rule_id:
                        return dict(candidate)
                break
            if isinstance(raw, dict):
                return raw
    raise AppError(
        "MEMORY_REVISION_NOT_FOUND",
        f"{loaded.rule_id} has no revision {rev} on record (current: {loaded.rule.revision})",
    )


def _first_line(item: dict[str, Any]) -> str:
    """What an item's entry says first (its bullet without the marker), else its heading."""
    first = str(item.get("first_line") or "").strip()
    for marker in ("- ", "* ", "+ "):
        first = first.removeprefix(marker)
    return first or str(item.get("heading") or "")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 160 else text[:159] + "…"


def _change_summary(entry: journal.HistoryEntry, known: dict[str, dict[str, Any]]) -> str:
    """What a change did, in a line. A forget (or a restore of one) names what was forgotten: the item id, where
    it is (path:line) and its first line, from items.jsonl."""
    op = entry.op
    forgot = None
    if op == "forget":
        forgot = entry.item_id
    elif op == "restore" and entry.restored_op in ("forget", "restore"):
        forgot = next((c.item_id for c in entry.changes), None)
    if forgot is not None:
        item = known.get(forgot) or {}
        where = f"{item.get('path') or entry.path or '?'}:{item.get('start_line') or '?'}"
        first = _first_line(item)
        verb = "forgot" if op == "forget" else f"undid {entry.restores}:"
        return _clip(f"{verb} {forgot} {where} {first}")
    rules = sorted({r.rule_id for c in entry.changes for r in c.rules})
    shown = ", ".join(rules[:5]) + (f" and {len(rules) - 5} more" if len(rules) > 5 else "")
    what = f"{entry.op}: {len(entry.changes)} file(s)"
    return f"{what}; rules {shown}" if rules else what
