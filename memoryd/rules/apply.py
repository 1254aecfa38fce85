"""compile.apply: a compile response checked against its request, the evidence and the rules, then written as
rules, candidates and overrides in one recorded change (idempotent: the same response twice is applied once).
Blocking: called under the workspace's lock from a worker thread."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

import orjson
import structlog

from memoryd import ids
from memoryd.errors import AppError
from memoryd.fsio import FileTooLarge, NotRegularFile, confine, read_regular
from memoryd.notes.daily import strip_private_value
from memoryd.rules import api as m
from memoryd.rules import changes, handedit, journal
from memoryd.rules import compile as comp
from memoryd.rules.changes import REQUESTS_DIR
from memoryd.rules.extension import Curator
from memoryd.rules.fwrange import parse_range
from memoryd.rules.models import CompileResponse, ProposedOverride, ProposedRule, Rule
from memoryd.rules.ruleset import Layer, overrides_yaml, rule_yaml
from memoryd.rules.workspace import WorkspaceRules
from memoryd.settings import RulesSettings
from memoryd.store.prepare import CANDIDATES, OVERRIDES, PROFILES

log = structlog.get_logger("memoryd.rules")

RESPONSE_MAX_BYTES = 8 * 1024 * 1024  # a compile response read from a file: as large as one on the wire


def _load_response(wr: WorkspaceRules, response: dict[str, Any] | None, path: str | None) -> Any:
    if response is not None:
        return response
    assert path is not None
    target = confine(wr.root, path, suffixes=(".json",))
    try:
        return orjson.loads(read_regular(target, RESPONSE_MAX_BYTES, root=wr.root))
    except FileNotFoundError as exc:
        raise AppError("MEMORY_FILE_NOT_FOUND", f"No file {path}") from exc
    except (NotRegularFile, FileTooLarge) as exc:
        raise AppError("MEMORY_FILE_REFUSED", f"{path}: {exc.strerror or exc}") from exc
    except OSError as exc:
        raise AppError("MEMORY_READ_FAILED", f"Cannot read {path}: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise AppError(
            "MEMORY_COMPILE_INVALID", violations=[{"pointer": "", "reason": f"not JSON: {exc.msg}"}]
        ) from exc


def apply(
    settings: RulesSettings,
    wr: WorkspaceRules,
    *,
    response: dict[str, Any] | None = None,
    path: str | None = None,
    dry_run: bool = False,
    curator: Curator | None = None,
) -> m.ApplyResult:
    """Apply the compile response given inline (``response``) or in a workspace file (``path``). ``curator``: its
    consolidation fields (memory_update, daily_sections, history_entry, insights_update) are planned by it and
    written in the same change."""
    # <private> spans leave every string of the response (facts, summaries, keys, the kept compile_response.json)
    # before anything is checked, planned or written: rule files are meant for commits, overrides for prompts.
    raw = strip_private_value(_load_response(wr, response, path))
    wr.evidence.refresh()
    wr.rules.reload()
    handedit.record(wr)  # a hand edit not recorded yet is a revision before this change
    root = wr.root
    state = comp.load_state(journal.read_bytes(root, comp.STATE_FILE))
    request_id = raw.get("request_id") if isinstance(raw, dict) else None
    record = state["requests"].get(request_id) if isinstance(request_id, str) else None
    digest = hashlib.sha256(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)).hexdigest()
    if record is not None and record["status"] == "applied" and record.get("response_sha") == digest:
        assert isinstance(request_id, str)
        return m.ApplyResult(
            request_id=request_id,
            run_id=record.get("run_id"),
            applied=False,
            already_applied=True,
            dry_run=dry_run,
            writes=[],
        )
    warnings, cited = _check(wr, raw, request_id, record)
    proposed = CompileResponse.model_validate(raw)  # checked against the response schema just above
    now = ids.iso(datetime.now())
    writes, demoted = _plan(settings, wr, proposed, now)
    assert record is not None  # _check refused a response that answers no outstanding request
    extra = None if curator is None else curator.plan(wr, raw, proposed.request_id, record, now, dry_run)
    rule_paths = [w.path for w in writes]
    if extra is not None:
        writes += extra.writes
    planned = changes.planned(root, writes)
    if dry_run:
        return m.ApplyResult(
            request_id=proposed.request_id,
            run_id=None,
            applied=False,
            dry_run=True,
            writes=planned,
            demoted=demoted,
            warnings=warnings,
            consolidation=None if extra is None else extra.answer,
        )
    run_id = ids.new_id("apply")
    comp.mark_compiled(state, wr.evidence, record["observation_ids"])
    record.update(status="applied", run_id=run_id, response_sha=digest, applied_at=now)
    record["observation_ids"] = []
    record.pop("entries", None)  # marked consolidated by the curator's writes, in this same change
    bookkeeping = [
        journal.FileWrite(
            f"{REQUESTS_DIR}/{proposed.request_id}/compile_response.json",
            orjson.dumps(raw, option=orjson.OPT_INDENT_2) + b"\n",
            record=False,
        ),
        journal.FileWrite(comp.STATE_FILE, comp.dump_state(state), record=False),
        *(extra.bookkeeping if extra is not None else ()),
    ]
    entry = {"op": "compile.apply", "ts": now, "request_id": proposed.request_id, "observation_ids": sorted(cited)}
    if extra is not None:
        entry.update(extra.entry)
    journal.commit(root, run_id, entry, writes + bookkeeping)
    wr.rules.reload(rule_paths)
    if extra is not None and extra.after is not None:
        extra.after(run_id)
    log.info(
        "compile_applied",
        workspace_id=wr.ws.id,
        run_id=run_id,
        files=sum(1 for w in planned if w.action != "unchanged"),
        demoted=len(demoted),
    )
    return m.ApplyResult(
        request_id=proposed.request_id,
        run_id=run_id,
        applied=True,
        dry_run=False,
        writes=planned,
        demoted=demoted,
        warnings=warnings,
        consolidation=None if extra is None else extra.answer,
    )


def _check(wr: WorkspaceRules, raw: Any, request_id: Any, record: dict[str, Any] | None) -> tuple[list[str], set[str]]:
    """Refuse a response that is too large, invalid, cites unknown evidence or answers no outstanding request
    (MEMORY_TOO_LARGE, MEMORY_COMPILE_INVALID, MEMORY_PROVENANCE_UNKNOWN); else its warnings and the observation
    ids it cites."""
    items = comp.count_items(raw)
    if items > comp.MAX_ITEMS:
        raise AppError(
            "MEMORY_TOO_LARGE",
            f"The response proposes {items} rules, candidates and overrides; the limit is {comp.MAX_ITEMS}",
            hint=f"Propose at most {comp.MAX_ITEMS} items in one response; prepare by --run or --model to split the work.",
            limit=comp.MAX_ITEMS,
        )
    violations, warnings, cited = comp.check_response(raw, wr.evidence, wr.rules)
    if record is not None and record["status"] == "applied":
        violations.insert(
            0,
            {
                "pointer": "/request_id",
                "reason": f"already applied (change {record.get('run_id')}) with a different response; "
                "run compile prepare for a new request",
            },
        )
    elif record is None and isinstance(request_id, str):
        violations.insert(0, {"pointer": "/request_id", "reason": f"no request {request_id}: run compile prepare"})
    elif record is not None and record["status"] != "outstanding":
        violations.insert(0, {"pointer": "/request_id", "reason": f"request {request_id} was {record['status']}"})
    if violations:
        unknown_only = all(v["reason"].startswith("unknown observation id") for v in violations)
        raise AppError(
            "MEMORY_PROVENANCE_UNKNOWN" if unknown_only else "MEMORY_COMPILE_INVALID",
            f"{violations.total} violation(s); nothing was written"
            + (f" (the first {len(violations)} listed)" if violations.total > len(violations) else ""),
            violations=list(violations),
            count=violations.total,
        )
    return warnings, cited


def _plan(
    settings: RulesSettings, wr: WorkspaceRules, response: CompileResponse, now: str
) -> tuple[list[journal.FileWrite], list[str]]:
    """The files the response changes: one per profile or candidate, one per touched override file."""
    threshold = settings.min_confidence
    demoted: list[str] = []
    singles: dict[str, tuple[Rule, Layer, Rule | None]] = {}  # path: (new rule, layer, the rule it replaces)
    override_files: dict[str, dict[str, Rule]] = {}
    override_revs: dict[str, list[dict[str, Any]]] = {}

    def existing(path: str, rule_id: str) -> Rule | None:
        return next((r.rule for r in wr.rules.in_file(path) if r.rule_id == rule_id), None)

    def stage(item: ProposedRule | ProposedOverride, rule_id: str, why: str) -> None:
        path = f"{CANDIDATES}/{item.model_id}/{rule_id}.yaml"
        target: Literal["profile", "override"] = "override" if isinstance(item, ProposedOverride) else "profile"
        old = singles[path][0] if path in singles else existing(path, rule_id)
        extra = {"status": "candidate", "target": target, "reason": why}
        if isinstance(item, ProposedOverride):
            extra["instance_id"] = item.instance_id
        replaced = singles[path][2] if path in singles else old
        singles[path] = (changes.merge(old, item, rule_id, now, response.request_id, extra), "candidate", replaced)

    for item in response.rules:
        if item.confidence < threshold:
            demoted.append(item.rule_id)
            stage(item, item.rule_id, f"confidence {item.confidence} < min_confidence {threshold}")
            continue
        path = f"{PROFILES}/{item.model_id}/{item.rule_id}.yaml"
        old = singles[path][0] if path in singles else existing(path, item.rule_id)
        replaced = singles[path][2] if path in singles else old
        singles[path] = (changes.merge(old, item, item.rule_id, now, response.request_id, {}), "profile", replaced)
    for item in response.candidates:
        stage(item, item.rule_id, "proposed as a candidate")
    for override in response.overrides:
        rule_id = override.rule_id or changes.override_rule_id(override.model_id, parse_range(override.fw_range).text)
        if override.confidence < threshold:
            demoted.append(rule_id)
            stage(override, rule_id, f"confidence {override.confidence} < min_confidence {threshold}")
            continue
        path = f"{OVERRIDES}/{override.instance_id}.yaml"
        if path not in override_files:
            changes.refuse_broken(wr, path)
            override_files[path] = {r.rule_id: r.rule for r in wr.rules.in_file(path)}
            override_revs[path] = []
        old = override_files[path].get(rule_id)
        rule = changes.merge(old, override, rule_id, now, response.request_id, {"instance_id": override.instance_id})
        override_files[path][rule_id] = rule
        override_revs[path].append(changes.revs(old, rule))
    writes: list[journal.FileWrite] = []
    for path, (rule, layer, replaced) in sorted(singles.items()):
        changes.refuse_broken(wr, path)
        writes.append(
            journal.FileWrite(path, rule_yaml(rule), {"layer": layer, "rules": [changes.revs(replaced, rule)]})
        )
    for path, rules in sorted(override_files.items()):
        instance = path.rsplit("/", 1)[1].rsplit(".", 1)[0]
        meta = {"layer": "override", "rules": override_revs[path]}
        writes.append(journal.FileWrite(path, overrides_yaml(instance, list(rules.values())), meta))
    return writes, demoted
