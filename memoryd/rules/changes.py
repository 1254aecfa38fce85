"""The blocking bodies of the rule-changing methods: compile prepare, compile apply, candidates promote/reject.

Each runs in a worker thread under the workspace lock (``RulesService`` takes it); every multi-file change goes
through ``journal.commit``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson
import structlog

from memoryd import ids
from memoryd.errors import AppError
from memoryd.fsio import FileTooLarge, NotRegularFile, atomic_write, confine, read_regular
from memoryd.notes.daily import strip_private, strip_private_value
from memoryd.rules import compile as comp
from memoryd.rules import handedit, journal
from memoryd.rules.fwrange import parse_range
from memoryd.rules.models import (
    RECOMMENDED_PREFIXES,
    CompileRequest,
    CompileResponse,
    Observation,
    Policy,
    ProposedOverride,
    ProposedRule,
    RequestChunk,
    Rule,
)
from memoryd.rules.ruleset import Layer, LoadedRule, flatten, overrides_yaml, rule_yaml
from memoryd.rules.workspace import WorkspaceRules
from memoryd.settings import RulesSettings
from memoryd.store.prepare import CANDIDATES, OVERRIDES, PROFILES

if TYPE_CHECKING:
    from memoryd.rules import api as m

log = structlog.get_logger("memoryd.rules")

REQUESTS_DIR = "data/memory/compile"
RESPONSE_MAX_BYTES = 8 * 1024 * 1024  # a compile response read from a file: as large as one on the wire


# --- compile.prepare -----------------------------------------------------------------------------------------------


def prepare(settings: RulesSettings, wr: WorkspaceRules, p: m.PrepareParams) -> dict[str, Any]:
    wr.evidence.refresh()
    wr.rules.reload()
    handedit.record(wr)  # a hand edit not recorded yet is a revision before this change
    root = wr.root
    state = comp.load_state(journal.read_bytes(root, comp.STATE_FILE))
    filters = {"run_id": p.run_id, "model_id": p.model_id, "since": p.since}
    since = None if p.since is None else comp.parse_when(p.since, "since")
    outstanding = sorted(
        ((rid, r) for rid, r in state["requests"].items() if r["status"] == "outstanding"),
        key=lambda item: (item[1]["batch_id"], item[1]["index"]),
    )
    if p.restart:
        for _rid, record in outstanding:
            record["status"] = "abandoned"
        outstanding = []
    else:
        same = [(rid, r) for rid, r in outstanding if r["filters"] == filters]
        if same:
            rid, record = same[0]
            return _prepared(*_request(settings, wr, rid, record), len(same) - 1, resumed=True)
    taken = {oid for _rid, r in outstanding for oid in r["observation_ids"]}
    selected = []
    for stored in wr.evidence.iter_ordered():
        obs = stored.observation
        if obs.observation_id in taken:
            continue
        if p.run_id is not None and stored.source != f"run:{p.run_id}":
            continue
        if p.model_id is not None and obs.model_id != p.model_id:
            continue
        if since is not None:
            if ids.id_time(obs.observation_id) < since:
                continue
        elif comp.is_compiled(state, stored.source, obs.observation_id):
            continue
        selected.append(obs)
    if not selected:
        if p.restart:
            atomic_write(root / comp.STATE_FILE, comp.dump_state(state), root=root)
        return {"request_id": None, "path": None, "observation_count": 0, "remaining": 0, "resumed": False}
    chunks: list[list[Observation]] = [[]]
    size = 0
    for obs in selected:
        weight = len(obs.model_dump_json())
        current = chunks[-1]
        if current and (
            len(current) >= settings.compile_max_observations or size + weight > settings.compile_max_request_bytes
        ):
            chunks.append([])
            size = 0
        chunks[-1].append(obs)
        size += weight
    batch_id = ids.new_id("cb")
    first: tuple[CompileRequest, str] | None = None
    for index, chunk in enumerate(chunks, 1):
        rid = ids.new_id("cr")
        record = {
            "status": "outstanding",
            "batch_id": batch_id,
            "index": index,
            "of": len(chunks),
            "filters": filters,
            "observation_ids": [o.observation_id for o in chunk],
            "created_at": ids.iso(datetime.now()),
        }
        state["requests"][rid] = record
        written = _request(settings, wr, rid, record)
        first = first or written
    atomic_write(root / comp.STATE_FILE, comp.dump_state(state), root=root)
    assert first is not None
    log.info("compile_prepared", workspace_id=wr.ws.id, observations=len(selected), requests=len(chunks))
    return _prepared(first[0], first[1], len(chunks) - 1, resumed=False)


def _request(
    settings: RulesSettings, wr: WorkspaceRules, rid: str, record: dict[str, Any]
) -> tuple[CompileRequest, str]:
    """Build and write the request file of one outstanding request from the current rules and evidence; returns
    it and its path."""
    observations = [s.observation for oid in record["observation_ids"] if (s := wr.evidence.get(oid)) is not None]
    models = {o.model_id for o in observations if o.model_id}
    if record["filters"].get("model_id"):
        models.add(record["filters"]["model_id"])
    request = CompileRequest(
        request_id=rid,
        workspace_id=wr.ws.id,
        created_at=record["created_at"],
        chunk=RequestChunk(batch_id=record["batch_id"], index=record["index"], of=record["of"]),
        filters=record["filters"],
        observations=observations,
        rules=[r.rule for r in wr.rules.for_models(models)],
        policy=Policy(
            min_confidence=settings.min_confidence,
            recommended_prefixes=list(RECOMMENDED_PREFIXES),
            max_observations_per_request=settings.compile_max_observations,
        ),
        instructions=comp.INSTRUCTIONS,
        response_schema=comp.response_schema(),
    )
    rel = f"{REQUESTS_DIR}/{rid}/compile_request.json"
    data = request.model_dump(mode="json", exclude_none=True)
    atomic_write(wr.root / rel, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n", root=wr.root)
    return request, rel


def _prepared(request: CompileRequest, path: str, remaining: int, *, resumed: bool) -> dict[str, Any]:
    return {
        "request_id": request.request_id,
        "path": path,
        "observation_count": len(request.observations),
        "chunk": request.chunk.model_dump(),
        "remaining": remaining,
        "resumed": resumed,
        "request": request,
    }


# --- compile.apply -------------------------------------------------------------------------------------------------


def _load_response(wr: WorkspaceRules, p: m.ApplyParams) -> Any:
    if p.response is not None:
        return p.response
    assert p.path is not None
    target = confine(wr.root, p.path, suffixes=(".json",))
    try:
        return orjson.loads(read_regular(target, RESPONSE_MAX_BYTES, root=wr.root))
    except FileNotFoundError as exc:
        raise AppError("MEMORY_FILE_NOT_FOUND", f"No file {p.path}") from exc
    except (NotRegularFile, FileTooLarge) as exc:
        raise AppError("MEMORY_FILE_REFUSED", f"{p.path}: {exc.strerror or exc}") from exc
    except OSError as exc:
        raise AppError("MEMORY_READ_FAILED", f"Cannot read {p.path}: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise AppError(
            "MEMORY_COMPILE_INVALID", violations=[{"pointer": "", "reason": f"not JSON: {exc.msg}"}]
        ) from exc


def apply(settings: RulesSettings, wr: WorkspaceRules, p: m.ApplyParams) -> dict[str, Any]:
    # <private> spans leave every string of the response (facts, summaries, keys, the kept compile_response.json)
    # before anything is checked, planned or written: rule files are meant for commits, overrides for prompts.
    raw = strip_private_value(_load_response(wr, p))
    wr.evidence.refresh()
    wr.rules.reload()
    handedit.record(wr)  # a hand edit not recorded yet is a revision before this change
    root = wr.root
    state = comp.load_state(journal.read_bytes(root, comp.STATE_FILE))
    request_id = raw.get("request_id") if isinstance(raw, dict) else None
    record = state["requests"].get(request_id) if isinstance(request_id, str) else None
    digest = hashlib.sha256(orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)).hexdigest()
    if record is not None and record["status"] == "applied" and record.get("response_sha") == digest:
        return {
            "request_id": request_id,
            "run_id": record.get("run_id"),
            "applied": False,
            "already_applied": True,
            "dry_run": p.dry_run,
            "writes": [],
        }
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
    response = CompileResponse.model_validate(raw)
    now = ids.iso(datetime.now())
    writes, demoted = _plan(settings, wr, response, now)
    planned = _planned(root, writes)
    if p.dry_run:
        return {
            "request_id": response.request_id,
            "run_id": None,
            "applied": False,
            "dry_run": True,
            "writes": planned,
            "demoted": demoted,
            "warnings": warnings,
        }
    run_id = ids.new_id("apply")
    comp.mark_compiled(state, wr.evidence, record["observation_ids"] if record else [])
    assert record is not None
    record.update(status="applied", run_id=run_id, response_sha=digest, applied_at=now)
    record["observation_ids"] = []
    bookkeeping = [
        journal.FileWrite(
            f"{REQUESTS_DIR}/{response.request_id}/compile_response.json",
            orjson.dumps(raw, option=orjson.OPT_INDENT_2) + b"\n",
            record=False,
        ),
        journal.FileWrite(comp.STATE_FILE, comp.dump_state(state), record=False),
    ]
    entry = {"op": "compile.apply", "ts": now, "request_id": response.request_id, "observation_ids": sorted(cited)}
    journal.commit(root, run_id, entry, writes + bookkeeping)
    wr.rules.reload([w.path for w in writes])
    log.info(
        "compile_applied",
        workspace_id=wr.ws.id,
        run_id=run_id,
        files=sum(1 for w in planned if w["action"] != "unchanged"),
        demoted=len(demoted),
    )
    return {
        "request_id": response.request_id,
        "run_id": run_id,
        "applied": True,
        "dry_run": False,
        "writes": planned,
        "demoted": demoted,
        "warnings": warnings,
    }


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
        singles[path] = (_merge(old, item, rule_id, now, response.request_id, extra), "candidate", replaced)

    for item in response.rules:
        if item.confidence < threshold:
            demoted.append(item.rule_id)
            stage(item, item.rule_id, f"confidence {item.confidence} < min_confidence {threshold}")
            continue
        path = f"{PROFILES}/{item.model_id}/{item.rule_id}.yaml"
        old = singles[path][0] if path in singles else existing(path, item.rule_id)
        replaced = singles[path][2] if path in singles else old
        singles[path] = (_merge(old, item, item.rule_id, now, response.request_id, {}), "profile", replaced)
    for item in response.candidates:
        stage(item, item.rule_id, "proposed as a candidate")
    for override in response.overrides:
        rule_id = override.rule_id or _override_rule_id(override.model_id, parse_range(override.fw_range).text)
        if override.confidence < threshold:
            demoted.append(rule_id)
            stage(override, rule_id, f"confidence {override.confidence} < min_confidence {threshold}")
            continue
        path = f"{OVERRIDES}/{override.instance_id}.yaml"
        if path not in override_files:
            _refuse_broken(wr, path)
            override_files[path] = {r.rule_id: r.rule for r in wr.rules.in_file(path)}
            override_revs[path] = []
        old = override_files[path].get(rule_id)
        rule = _merge(old, override, rule_id, now, response.request_id, {"instance_id": override.instance_id})
        override_files[path][rule_id] = rule
        override_revs[path].append(_revs(old, rule))
    writes: list[journal.FileWrite] = []
    for path, (rule, layer, replaced) in sorted(singles.items()):
        _refuse_broken(wr, path)
        writes.append(journal.FileWrite(path, rule_yaml(rule), {"layer": layer, "rules": [_revs(replaced, rule)]}))
    for path, rules in sorted(override_files.items()):
        instance = path.rsplit("/", 1)[1].rsplit(".", 1)[0]
        meta = {"layer": "override", "rules": override_revs[path]}
        writes.append(journal.FileWrite(path, overrides_yaml(instance, list(rules.values())), meta))
    return writes, demoted


def _refuse_broken(wr: WorkspaceRules, path: str) -> None:
    for error in wr.rules.errors():
        if error.startswith(path + ":"):
            raise AppError(
                "MEMORY_CONFLICT",
                f"{path} is not valid ({error.split(': ', 1)[-1]}); fix it before applying",
                hint="`memoryctl validate` shows the problem; the last good version is still in effect.",
            )


# --- candidates promote and reject ---------------------------------------------------------------------------------


def move(wr: WorkspaceRules, p: m.CandidateRef, action: Literal["promote", "reject"]) -> dict[str, Any]:
    wr.rules.reload()
    handedit.record(wr)  # a hand edit not recorded yet is a revision before this change
    found = wr.rules.find(p.rule_id, "candidate", p.model_id)
    if not found:
        raise AppError("MEMORY_RULE_NOT_FOUND", f"No candidate {p.rule_id}")
    if len(found) > 1:
        models = ", ".join(sorted(r.rule.model_id for r in found))
        raise AppError("MEMORY_CONFLICT", f"Candidate {p.rule_id} exists for {models}", hint="Pass model_id.")
    candidate = found[0]
    now = ids.iso(datetime.now())
    cand_meta = {"rule_id": p.rule_id, "rev_before": candidate.rule.revision, "rev_after": None}
    writes = [journal.FileWrite(candidate.path, None, {"layer": "candidate", "rules": [cand_meta]})]
    if action == "promote":
        writes.insert(0, _promotion(wr, candidate, now))
    planned = _planned(wr.root, writes)
    if p.dry_run:
        return {"run_id": None, "rule_id": p.rule_id, "writes": planned, "dry_run": True}
    run_id = ids.new_id(action)
    entry = {"op": f"candidates.{action}", "ts": now, "rule_id": p.rule_id}
    if p.reason:
        entry["reason"] = strip_private(p.reason)
    journal.commit(wr.root, run_id, entry, writes)
    wr.rules.reload([w.path for w in writes])
    log.info(f"candidate_{action}d", workspace_id=wr.ws.id, run_id=run_id)
    return {"run_id": run_id, "rule_id": p.rule_id, "writes": planned, "dry_run": False}


def _promotion(wr: WorkspaceRules, candidate: LoadedRule, now: str) -> journal.FileWrite:
    rule = candidate.rule
    fields = rule.model_dump(exclude={"status", "target", "reason", "revision", "created_at", "updated_at"})
    if rule.target == "override" and rule.instance_id:
        path = f"{OVERRIDES}/{rule.instance_id}.yaml"
        _refuse_broken(wr, path)
        current = {r.rule_id: r.rule for r in wr.rules.in_file(path)}
        old = current.get(rule.rule_id)
        promoted = _promoted(old, fields, now)
        current[rule.rule_id] = promoted
        meta = {"layer": "override", "rules": [_revs(old, promoted)]}
        return journal.FileWrite(path, overrides_yaml(rule.instance_id, list(current.values())), meta)
    path = f"{PROFILES}/{rule.model_id}/{rule.rule_id}.yaml"
    _refuse_broken(wr, path)
    old = next((r.rule for r in wr.rules.in_file(path) if r.rule_id == rule.rule_id), None)
    fields["instance_id"] = None
    promoted = _promoted(old, fields, now)
    return journal.FileWrite(path, rule_yaml(promoted), {"layer": "profile", "rules": [_revs(old, promoted)]})


# --- helpers -------------------------------------------------------------------------------------------------------


def _override_rule_id(model_id: str, fw_range: str) -> str:
    return f"{model_id[:100]}-{hashlib.sha256(fw_range.encode()).hexdigest()[:8]}"


def _merge(
    old: Rule | None,
    item: ProposedRule | ProposedOverride,
    rule_id: str,
    now: str,
    request_id: str,
    extra: dict[str, Any],
) -> Rule:
    """The rule after ``item`` is applied to ``old``: facts merged (null removes), provenance united."""
    facts = dict(old.facts) if old else {}
    for key, value in flatten(item.facts).items():
        if value is None:
            facts.pop(key, None)
        else:
            facts[key] = value
    cited = list(old.provenance.observation_ids) if old else []
    cited += [oid for oid in item.provenance.observation_ids if oid not in cited]
    content = {
        "rule_id": rule_id,
        "model_id": item.model_id,
        "fw_range": parse_range(item.fw_range).text,
        "priority": item.priority,
        "summary": item.summary if item.summary is not None else (old.summary if old else None),
        "facts": facts,
        "confidence": item.confidence,
        **extra,
    }
    if old is not None:
        same = all(getattr(old, key) == value for key, value in content.items()) and cited == list(
            old.provenance.observation_ids
        )
        if same:
            return old
    return Rule.model_validate(
        {
            **content,
            "provenance": {"observation_ids": cited, "request_id": request_id},
            "revision": old.revision + 1 if old else 1,
            "created_at": old.created_at if old else now,
            "updated_at": now,
        }
    )


def _promoted(old: Rule | None, fields: dict[str, Any], now: str) -> Rule:
    facts = {**(old.facts if old else {}), **fields["facts"]}
    cited = list(old.provenance.observation_ids) if old else []
    cited += [o for o in fields["provenance"]["observation_ids"] if o not in cited]
    data = {
        **{k: v for k, v in fields.items() if v is not None},
        "facts": facts,
        "provenance": {**fields["provenance"], "observation_ids": cited},
        "revision": old.revision + 1 if old else 1,
        "created_at": old.created_at if old else now,
        "updated_at": now,
    }
    return Rule.model_validate(data)


def _revs(old: Rule | None, new: Rule) -> dict[str, Any]:
    return {"rule_id": new.rule_id, "rev_before": old.revision if old else None, "rev_after": new.revision}


def _planned(root: Path, writes: list[journal.FileWrite]) -> list[dict[str, Any]]:
    """What each write would do (the answer's ``writes``): path, action, layer and, for a one-rule file, the rule
    and its new revision."""
    out = []
    for write in writes:
        rules = write.meta.get("rules") or []
        item: dict[str, Any] = {"layer": write.meta.get("layer")}
        if len(rules) == 1:
            item["rule_id"] = rules[0]["rule_id"]
            item["revision"] = rules[0]["rev_after"]
        item.update(path=write.path, action=journal.action(journal.read_bytes(root, write.path), write.content))
        out.append(item)
    return out
