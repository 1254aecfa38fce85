"""The rules of one workspace, loaded from YAML, and ``resolve``: layered merge with a cache.

Files: ``spec/memory/profiles/<model_id>/<rule_id>.yaml`` (one rule each), ``spec/memory/candidates/<model_id>/
<rule_id>.yaml`` (one candidate each) and ``data/memory/overrides/<instance_id>.yaml`` (``instance_id`` and a
``rules:`` list). A file that does not parse or does not hold valid rules keeps its last good rules and is reported
(status, validate, resolve's ``errors``); hand edits are welcome and picked up by the watcher.

Precedence in ``resolve``, low to high: profiles < overrides; within a layer a wider ``fw_range`` < a narrower one;
then a lower ``priority`` < a higher one; a remaining tie is won by the ``rule_id`` that sorts first (byte order).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from memoryd import yamlsafe
from memoryd.fsio import FileTooLarge, NotRegularFile, read_regular
from memoryd.rules import journal
from memoryd.rules.api import TraceEntry
from memoryd.rules.fwrange import FwRange, FwRangeError, parse_range, parse_version
from memoryd.rules.models import Rule
from memoryd.store.prepare import Kind, file_kind, indexed_files, indexed_stats

Layer = Literal["profile", "override", "candidate"]
LAYER_RANK = {"profile": 0, "override": 1}
RULE_FIELDS = [
    "rule_id",
    "model_id",
    "instance_id",
    "fw_range",
    "priority",
    "summary",
    "facts",
    "confidence",
    "provenance",
    "revision",
    "created_at",
    "updated_at",
    "status",
    "target",
    "reason",
]

MAX_FILE_BYTES = 1024 * 1024  # the rule_max_file_bytes setting's default


class RuleFileError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class LoadedRule:
    rule: Rule
    layer: Layer
    path: str
    range: FwRange

    @property
    def rule_id(self) -> str:
        return self.rule.rule_id


# --- YAML in and out --------------------------------------------------------------------------------------------


def flatten(facts: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings become dotted keys: {"transport": {"baud": 1}} → {"transport.baud": 1}."""
    out: dict[str, Any] = {}
    for key, value in facts.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _plain(value: Any) -> Any:
    """YAML's own types made JSON-like: timestamps as ISO strings."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def rule_dict(rule: Rule, *, in_override_file: bool = False) -> dict[str, Any]:
    data = rule.model_dump(exclude_none=True)
    data["facts"] = dict(sorted(rule.facts.items()))
    if in_override_file:
        data.pop("instance_id", None)
    return {k: data[k] for k in RULE_FIELDS if k in data}


def dump_yaml(data: Any) -> bytes:
    return yamlsafe.dump(data)


def rule_yaml(rule: Rule) -> bytes:
    return dump_yaml(rule_dict(rule))


def overrides_yaml(instance_id: str, rules: list[Rule]) -> bytes:
    items = [rule_dict(r, in_override_file=True) for r in sorted(rules, key=lambda r: r.rule_id)]
    return dump_yaml({"instance_id": instance_id, "rules": items})


def _parse_rule(raw: Any, where: str, **extra: Any) -> Rule:
    if not isinstance(raw, dict):
        raise RuleFileError(f"{where}: expected a mapping of rule fields")
    data = _plain(raw)
    data.update(extra)
    if isinstance(data.get("facts"), dict):
        data["facts"] = flatten(data["facts"])
    if isinstance(data.get("fw_range"), int | float):
        raise RuleFileError(f"{where}: fw_range must be a quoted string, e.g. '1.2.*'")
    try:
        rule = Rule.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise RuleFileError(f"{where}: {loc}: {first['msg']}") from exc
    try:
        parse_range(rule.fw_range)
    except FwRangeError as exc:
        raise RuleFileError(f"{where}: fw_range: {exc}") from exc
    return rule


def read_rule_bytes(root: Path, rel: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a rule file: a regular file within ``max_bytes`` (a FIFO would hang the reader, a device flood
    it); RuleFileError otherwise, naming the file."""
    try:
        # data/memory/ (overrides, backups) is the daemon's: no symlink there is followed (docs/reference/files.md)
        return read_regular(root / rel, max_bytes, root=root if rel.startswith("data/memory/") else None)
    except FileTooLarge as exc:
        raise RuleFileError(f"{rel}: {exc.size} bytes; rule files may have at most {exc.limit}") from exc
    except NotRegularFile as exc:
        raise RuleFileError(f"{rel}: not a regular file (or a symlink); not read") from exc
    except OSError as exc:
        raise RuleFileError(f"{rel}: unreadable ({type(exc).__name__})") from exc


def parse_yaml(rel: str, data: bytes) -> Any:
    """The YAML of a rule file the daemon did not necessarily write, checked by :mod:`memoryd.yamlsafe` (no
    aliases, bounded nesting, values the wire can carry). RuleFileError says what is wrong, naming the file."""
    try:
        return yamlsafe.load(data.decode("utf-8"))
    except yaml.YAMLError as exc:
        raise RuleFileError(f"{rel}: {_yaml_problem(data, exc)}") from exc
    except yamlsafe.YamlRefused as exc:
        raise RuleFileError(f"{rel}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RuleFileError(f"{rel}: not UTF-8") from exc


def _yaml_problem(data: bytes, exc: yaml.YAMLError) -> str:
    """``line N: not valid YAML: <the parser's reason>``, N the line a person has to fix. The parser notices many
    slips a line late: a key missing its colon reads as a plain scalar running into the next line (``mapping
    values are not allowed here`` there), an unclosed bracket is found where the next key starts; the line where
    that scalar or the construct began is the one to name."""
    problem = str(getattr(exc, "problem", None) or type(exc).__name__)
    context = getattr(exc, "context", None)
    mark = getattr(exc, "problem_mark", None)
    begun = getattr(exc, "context_mark", None)
    if mark is None:
        return f"not valid YAML: {problem}"
    line = mark.line
    if begun is not None and begun.line < line:
        line = begun.line
    elif problem.startswith("mapping values are not allowed"):
        lines = data.decode("utf-8", "replace").split("\n")
        indent = len(lines[line]) - len(lines[line].lstrip(" ")) if line < len(lines) else 0
        while line > 0:  # back over the lines the plain scalar ran through: same indentation, no key of their own
            above = lines[line - 1]
            if not above.strip() or len(above) - len(above.lstrip(" ")) != indent:
                break
            if ":" in above or above.lstrip().startswith(("-", "#")):
                break
            line -= 1
    where = f" ({context}, line {begun.line + 1})" if context and begun is not None and begun.line != line else ""
    return f"line {line + 1}: not valid YAML: {problem}{where}"


def read_yaml(root: Path, rel: str, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """:func:`parse_yaml` of :func:`read_rule_bytes`."""
    return parse_yaml(rel, read_rule_bytes(root, rel, max_bytes))


def load_file(
    root: Path, rel: str, layer: Layer, data: bytes | None = None, max_bytes: int = MAX_FILE_BYTES
) -> list[LoadedRule]:
    """The rules in one file (or in ``data``, its content); RuleFileError says what is wrong."""
    raw = parse_yaml(rel, read_rule_bytes(root, rel, max_bytes) if data is None else data)
    parts = rel.split("/")
    if layer == "override":
        instance = parts[-1].rsplit(".", 1)[0]
        if not isinstance(raw, dict) or not isinstance(raw.get("rules"), list):
            raise RuleFileError(f"{rel}: expected `instance_id:` and a `rules:` list")
        if raw.get("instance_id", instance) != instance:
            raise RuleFileError(f"{rel}: instance_id {raw.get('instance_id')!r} does not match the file name")
        rules = [_parse_rule(item, f"{rel}: rules[{n}]", instance_id=instance) for n, item in enumerate(raw["rules"])]
        ids = [r.rule_id for r in rules]
        if len(set(ids)) != len(ids):
            raise RuleFileError(f"{rel}: a rule_id appears twice")
    else:
        rule = _parse_rule(raw, rel)
        model_dir, name = parts[-2], parts[-1].rsplit(".", 1)[0]
        if (rule.model_id, rule.rule_id) != (model_dir, name):
            raise RuleFileError(
                f"{rel}: model_id/rule_id ({rule.model_id}/{rule.rule_id}) must match the path ({model_dir}/{name})"
            )
        rules = [rule]
    return [LoadedRule(r, layer, rel, parse_range(r.fw_range)) for r in rules]


RULE_KINDS: frozenset[Kind] = frozenset({"profile", "candidate", "override"})  # the trees of rule files


def rule_files(root: Path, only: Iterable[str] | None = None) -> dict[str, tuple[Layer, os.stat_result]]:
    """The rule files of the workspace — every one, or those of ``only`` that exist — found as the index finds
    its files (store.prepare): the same trees, no hidden entries, no symlinks out, regular files only."""
    if only is None:
        found: Iterable[tuple[str, os.stat_result]] = indexed_files(root, kinds=RULE_KINDS)
    else:  # a change of thousands of daily files (an archive, its restore): only its rule files are looked at
        found = indexed_stats(root, [rel for rel in only if file_kind(rel) not in (None, "markdown")]).items()
    out: dict[str, tuple[Layer, os.stat_result]] = {}
    for rel, info in found:
        kind = file_kind(rel)
        if kind is not None and kind != "markdown":
            out[rel] = (kind, info)
    return out


# --- the rule set -----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _File:
    signature: tuple[int, int, int]
    rules: list[LoadedRule]  # the last good rules of this file
    error: str | None = None
    data: bytes | None = None  # the content those rules were read from


@dataclass(frozen=True, slots=True)
class HandEdit:
    """A rule file changed by someone other than the daemon (an editor, git) with a rule's content changed but
    its revision not raised: recorded as a new revision by rules.handedit, with ``before`` as the pre-image."""

    path: str
    layer: Layer
    before: bytes
    revisions: dict[str, int]  # rule_id → the revision the edit started from


# Fields a change of which is no new revision (the daemon's own bookkeeping).
_BOOKKEEPING = frozenset({"revision", "created_at", "updated_at"})


def _content(rule: Rule) -> dict[str, Any]:
    return {k: v for k, v in rule_dict(rule).items() if k not in _BOOKKEEPING}


def hand_edited(old: list[LoadedRule], new: list[LoadedRule]) -> dict[str, int]:
    """rule_id → old revision, for each rule whose content changed while its revision did not go up."""
    before = {r.rule_id: r.rule for r in old}
    out = {}
    for loaded in new:
        prior = before.get(loaded.rule_id)
        if prior is not None and loaded.rule.revision <= prior.revision and _content(prior) != _content(loaded.rule):
            out[loaded.rule_id] = prior.revision
    return out


def as_recorded(rules: list[LoadedRule], recorded: dict[str, tuple[int, str]] | None) -> list[LoadedRule]:
    """The rules of a file with the revisions (and times) history records for its content: a hand edit is a
    revision that is never written into the file (journal.Recorded)."""
    if not recorded:
        return rules
    out = []
    for loaded in rules:
        revision, when = recorded.get(loaded.rule_id, (0, ""))
        if revision > loaded.rule.revision:
            update: dict[str, Any] = {"revision": revision}
            if when:
                update["updated_at"] = when
            loaded = replace(loaded, rule=loaded.rule.model_copy(update=update))
        out.append(loaded)
    return out


@dataclass(frozen=True, slots=True)
class Resolved:
    facts: dict[str, Any]
    trace: dict[str, TraceEntry]  # frozen: shared by every answer from the cache
    rules: list[str]
    generation: int  # of the rule set it was computed from


@dataclass(slots=True)
class RuleSet:
    """Every rule of a workspace in memory. Reload is incremental by (inode, mtime, size); thread-safe."""

    root: Path
    max_file_bytes: int = MAX_FILE_BYTES
    generation: int = 0
    _files: dict[str, _File] = field(default_factory=dict)
    _by_model: dict[str, list[LoadedRule]] = field(default_factory=dict)
    _all: list[LoadedRule] = field(default_factory=list)
    _cache: dict[tuple[str, str, str | None], Resolved] = field(default_factory=dict)
    _errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    loaded: bool = False
    hand_edits: dict[str, HandEdit] = field(default_factory=dict)  # path → edit not recorded yet

    def reload(self, paths: Iterable[str] | None = None, force: Iterable[str] = ()) -> bool:
        """Re-read changed files — all, or just ``paths`` (relative; as the watcher reports them); ``force``: read
        these again even if unchanged on disk (a hand edit of theirs was just recorded). True when anything
        changed.

        A file's rules carry the revisions history records for its content (:func:`as_recorded`); a file at the
        content the latest recorded change left it at is the daemon's own write (a change, a restore), never a
        hand edit."""
        forced = set(force)
        with self._lock:
            recorded = journal.recorded(self.root)
            if paths is None or not self.loaded:
                seen = rule_files(self.root)
                gone = set(self._files) - set(seen)
            else:
                asked = set(paths)
                seen = rule_files(self.root, asked)
                gone = {rel for rel in asked - set(seen) if rel in self._files}
            changed = not self.loaded or bool(gone)
            for rel in gone:
                del self._files[rel]
                self.hand_edits.pop(rel, None)
            for rel, (layer, info) in seen.items():
                signature = (info.st_ino, info.st_mtime_ns, info.st_size)
                known = self._files.get(rel)
                if known is not None and known.signature == signature and rel not in forced:
                    continue
                changed = True
                try:
                    data = read_rule_bytes(self.root, rel, self.max_file_bytes)
                    rules = load_file(self.root, rel, layer, data)
                except RuleFileError as exc:
                    self._files[rel] = _File(
                        signature, known.rules if known else [], str(exc), known.data if known else None
                    )
                    continue
                digest = journal.sha(data)
                assert digest is not None
                rules = as_recorded(rules, recorded.revisions.get((rel, digest)))
                self._files[rel] = _File(signature, rules, None, data)
                if recorded.latest.get(rel) == digest:  # as the daemon's last recorded change left it
                    self.hand_edits.pop(rel, None)
                elif known is not None and known.data is not None and self.loaded:
                    edited = hand_edited(known.rules, rules)
                    pending = self.hand_edits.get(rel)
                    if pending is not None:  # a second edit before the first was recorded: one revision
                        edited = {**edited, **pending.revisions}
                    if edited:
                        before = pending.before if pending is not None else known.data
                        self.hand_edits[rel] = HandEdit(rel, layer, before, edited)
            if changed:
                self._index()
            self.loaded = True
            return changed

    def take_hand_edits(self) -> list[HandEdit]:
        with self._lock:
            edits, self.hand_edits = list(self.hand_edits.values()), {}
            return edits

    def requeue(self, edit: HandEdit) -> None:
        """Put back an edit not recorded yet; merged with one noticed meanwhile (the earlier content and
        revisions are where the edit started from)."""
        with self._lock:
            later = self.hand_edits.get(edit.path)
            if later is not None:
                edit = replace(edit, revisions={**later.revisions, **edit.revisions})
            self.hand_edits[edit.path] = edit

    def _index(self) -> None:
        everything = [r for f in self._files.values() for r in f.rules]
        by_model: dict[str, list[LoadedRule]] = {}
        for loaded in everything:
            if loaded.layer != "candidate":
                by_model.setdefault(loaded.rule.model_id, []).append(loaded)
        self._all = sorted(everything, key=lambda r: (r.rule.model_id, r.layer, r.rule_id, r.path))
        self._by_model = by_model
        self._errors = sorted(f.error for f in self._files.values() if f.error)
        self._cache = {}
        self.generation += 1

    # --- reading ------------------------------------------------------------------------------------------

    def all(self) -> list[LoadedRule]:
        return self._all

    def errors(self) -> list[str]:
        """Files that did not load (their last good rules stay in effect), as ``path: problem``."""
        return self._errors

    def find(self, rule_id: str, layer: Layer | None = None, model_id: str | None = None) -> list[LoadedRule]:
        order = {"profile": 0, "override": 1, "candidate": 2}
        found = [
            r
            for r in self._all
            if r.rule_id == rule_id
            and (layer is None or r.layer == layer)
            and (model_id is None or r.rule.model_id == model_id)
        ]
        return sorted(found, key=lambda r: (order[r.layer], r.path))

    def in_file(self, rel: str) -> list[LoadedRule]:
        """The (last good) rules of one file."""
        known = self._files.get(rel)
        return list(known.rules) if known is not None else []

    def for_models(self, model_ids: set[str]) -> list[LoadedRule]:
        return [r for r in self._all if r.rule.model_id in model_ids]

    def resolve(self, model_id: str, fw_version: str, instance_id: str | None) -> Resolved:
        """Raises FwRangeError for a version that does not parse."""
        key = (model_id, fw_version, instance_id)
        cache, by_model, generation = self._cache, self._by_model, self.generation  # one reload's state
        hit = cache.get(key)
        if hit is not None:
            return hit
        version = parse_version(fw_version)
        matching = [
            r
            for r in by_model.get(model_id, ())
            if (r.layer == "profile" or r.rule.instance_id == instance_id) and r.range.contains(version)
        ]
        # Lowest precedence first; the last writer of a key wins. Sorting by rule_id descending first and then
        # (stably) by the real key leaves the smallest rule_id last among exact ties.
        matching.sort(key=lambda r: r.rule_id, reverse=True)
        matching.sort(key=_precedence)
        facts: dict[str, Any] = {}
        trace: dict[str, TraceEntry] = {}
        for loaded in matching:
            rule = loaded.rule
            layer = loaded.layer
            assert layer != "candidate"  # candidates are never in by_model (see _index)
            for fact, value in rule.facts.items():
                previous = trace.get(fact)
                beat = [previous.rule_id, *previous.beat] if previous else []
                facts[fact] = value
                trace[fact] = TraceEntry(
                    rule_id=rule.rule_id,
                    layer=layer,
                    fw_range=loaded.range.text,
                    priority=rule.priority,
                    path=loaded.path,
                    beat=beat,
                )
        answer = Resolved(
            dict(sorted(facts.items())), dict(sorted(trace.items())), [r.rule_id for r in matching], generation
        )
        if len(cache) > 50_000:
            cache.clear()
        cache[key] = answer
        return answer


def _precedence(loaded: LoadedRule) -> tuple[int, int, int, int]:
    unbounded, span = loaded.range.width()
    return (LAYER_RANK[loaded.layer], -unbounded, -span, loaded.rule.priority)
