"""Evidence to rules per workspace: observe, compile prepare/apply, resolve, audit and review (seed 000).

One ``WorkspaceRules`` per registered workspace: its evidence store, its rule set (with the resolve cache) and a
write lock. Nothing here touches another workspace. Every multi-file change goes through ``journal.commit`` (backups,
intent journal, atomic writes, history), so a crash at any point is repaired on the next start. Blocking work runs in
worker threads.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import orjson
import structlog
import yaml

from memoryd import ids
from memoryd.config import Settings
from memoryd.errors import AppError
from memoryd.fsio import append_line, atomic_write, confine
from memoryd.notes.daily import strip_private
from memoryd.rules import compile as comp
from memoryd.rules import journal
from memoryd.rules.evidence import EvidenceStore, file_of
from memoryd.rules.fwrange import FwRangeError, parse_range, parse_version
from memoryd.rules.models import (
    RECOMMENDED_PREFIXES,
    CompileRequest,
    CompileResponse,
    Observation,
    Policy,
    ProposedOverride,
    ProposedRule,
    Rule,
)
from memoryd.rules.ruleset import (
    CANDIDATES,
    OVERRIDES,
    PROFILES,
    Layer,
    LoadedRule,
    RuleSet,
    overrides_yaml,
    rule_dict,
    rule_yaml,
)
from memoryd.workspaces import Workspace

if TYPE_CHECKING:
    from memoryd.methods import rules as m
    from memoryd.notes.service import NotesService

log = structlog.get_logger("memoryd.rules")

REQUESTS_DIR = "data/memory/compile"


@dataclass(eq=False)
class WorkspaceRules:
    ws: Workspace
    evidence: EvidenceStore
    rules: RuleSet
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    opened: anyio.Event = field(default_factory=anyio.Event)
    open_error: str | None = None
    recovered: list[str] = field(default_factory=list)
    # resolve answers ready to send, valid for one rule-set generation
    answers: dict[tuple[str, str, str | None], m.ResolveResult] = field(default_factory=dict)
    answers_generation: int = -1

    @property
    def root(self) -> Path:
        return self.ws.path


def _private(value: Any) -> Any:
    """<private> spans stripped from every string inside a JSON value."""
    if isinstance(value, str):
        return strip_private(value)
    if isinstance(value, dict):
        return {k: _private(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_private(v) for v in value]
    return value


def _override_rule_id(model_id: str, fw_range: str) -> str:
    return f"{model_id[:100]}-{hashlib.sha256(fw_range.encode()).hexdigest()[:8]}"


def _summary(loaded: LoadedRule) -> dict[str, Any]:
    rule = loaded.rule
    return {
        "rule_id": rule.rule_id,
        "layer": loaded.layer,
        "model_id": rule.model_id,
        "fw_range": loaded.range.text,
        "priority": rule.priority,
        "confidence": rule.confidence,
        "revision": rule.revision,
        "summary": rule.summary,
        "instance_id": rule.instance_id,
        "path": loaded.path,
        "facts": sorted(rule.facts),
    }


class RulesService:
    def __init__(self, settings: Settings, notes: NotesService) -> None:
        self.settings = settings
        self.notes = notes
        self._by_id: dict[str, WorkspaceRules] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self, tg: anyio.abc.TaskGroup, workspaces: list[Workspace]) -> None:
        self._tg = tg
        for ws in workspaces:
            self.attach(ws)

    def attach(self, ws: Workspace) -> WorkspaceRules:
        existing = self._by_id.get(ws.id)
        if existing is not None:
            return existing
        wr = WorkspaceRules(ws, EvidenceStore(ws.path), RuleSet(ws.path))
        self._by_id[ws.id] = wr
        if self._tg is not None:
            self._tg.start_soon(self._open, wr)
        return wr

    def detach(self, ws: Workspace) -> None:
        self._by_id.pop(ws.id, None)

    async def _open(self, wr: WorkspaceRules) -> None:
        """Finish changes a crash interrupted, then load rules and evidence."""

        def work() -> None:
            wr.recovered = journal.recover(wr.root)
            wr.rules.reload()
            wr.evidence.refresh()

        try:
            async with wr.lock:
                await anyio.to_thread.run_sync(work)
        except Exception as exc:
            wr.open_error = type(exc).__name__
            log.exception("rules_open_failed", workspace_id=wr.ws.id)
        finally:
            wr.opened.set()

    async def _ready(self, ws: Workspace) -> WorkspaceRules:
        wr = self._by_id.get(ws.id) or self.attach(ws)
        if self._tg is None and not wr.opened.is_set():
            await self._open(wr)
        await wr.opened.wait()
        if wr.open_error is not None:
            raise AppError(
                "MEMORY_READ_FAILED",
                f"The rules of this workspace could not be loaded ({wr.open_error})",
                hint="See the daemon log; check permissions of spec/memory and data/memory.",
            )
        return wr

    async def files_changed(self, ws: Workspace, paths: list[str] | None) -> None:
        """The watcher saw rule files change (a hand edit, git): reload them now, so resolve is current.
        None: the periodic safety-net rescan of every rule file."""
        wr = self._by_id.get(ws.id)
        if wr is None or not wr.opened.is_set() or wr.open_error:
            return
        changed = await anyio.to_thread.run_sync(wr.rules.reload, paths)
        if changed:
            log.info("rules_reloaded", workspace_id=ws.id, files=len(paths or ()), generation=wr.rules.generation)

    async def _locked(self, ws: Workspace, work: Any) -> Any:
        wr = await self._ready(ws)
        async with wr.lock:
            return await anyio.to_thread.run_sync(work, wr)

    async def _reindex(self, ws: Workspace, paths: list[str]) -> None:
        if paths:
            await self.notes.sync_paths(ws, paths)

    # --- observe ------------------------------------------------------------------------------------------

    async def observe(self, ws: Workspace, p: m.ObserveParams) -> dict[str, Any]:
        text = strip_private(p.text)
        if not text.strip():
            raise AppError("MEMORY_EMPTY")
        observation_id = ids.new_id("obs")
        record = Observation(
            observation_id=observation_id,
            ts=ids.iso(ids.id_time(observation_id)),
            kind=p.kind,
            text=text,
            source=strip_private(p.source),
            run_id=p.run_id,
            model_id=p.model_id,
            fw_version=p.fw_version,
            tags=None if p.tags is None else [strip_private(t) for t in p.tags],
            data=None if p.data is None else _private(p.data),
        )
        line = orjson.dumps(record.model_dump(exclude_none=True)) + b"\n"
        if len(line) > self.settings.observe_max_bytes:
            raise AppError(
                "MEMORY_TOO_LARGE",
                f"Observation is {len(line)} bytes; the limit is {self.settings.observe_max_bytes}",
                limit=self.settings.observe_max_bytes,
            )
        rel = file_of(p.run_id)
        result = {"observation_id": observation_id, "ts": record.ts, "path": rel}
        if p.dry_run:
            return {**result, "dry_run": True}
        wr = await self._ready(ws)

        def write() -> None:
            target = confine(wr.root, rel, suffixes=(".jsonl",))
            try:
                append_line(target, line)
            except OSError as exc:
                raise AppError("MEMORY_WRITE_FAILED", f"Cannot append to {rel}: {exc.strerror}") from exc

        await anyio.to_thread.run_sync(write)
        log.info("observed", workspace_id=ws.id, path=rel, kind=p.kind, text_length=len(text))
        return result

    # --- compile.prepare ----------------------------------------------------------------------------------

    async def prepare(self, ws: Workspace, p: m.PrepareParams) -> dict[str, Any]:
        result: dict[str, Any] = await self._locked(ws, lambda wr: self._prepare(wr, p))
        return result

    def _prepare(self, wr: WorkspaceRules, p: m.PrepareParams) -> dict[str, Any]:
        wr.evidence.refresh()
        wr.rules.reload()
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
                request = self._request(wr, rid, record, state)
                return self._prepared(request, record, len(same) - 1, resumed=True)
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
                atomic_write(root / comp.STATE_FILE, comp.dump_state(state))
            return {"request_id": None, "path": None, "observations": 0, "remaining": 0, "resumed": False}
        chunks: list[list[Observation]] = [[]]
        size = 0
        for obs in selected:
            weight = len(obs.model_dump_json())
            current = chunks[-1]
            if current and (
                len(current) >= self.settings.compile_max_observations
                or size + weight > self.settings.compile_max_request_bytes
            ):
                chunks.append([])
                size = 0
            chunks[-1].append(obs)
            size += weight
        batch_id = ids.new_id("cb")
        first: tuple[dict[str, Any], dict[str, Any]] | None = None
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
            request = self._request(wr, rid, record, state)
            first = first or (request, record)
        atomic_write(root / comp.STATE_FILE, comp.dump_state(state))
        assert first is not None
        log.info("compile_prepared", workspace_id=wr.ws.id, observations=len(selected), requests=len(chunks))
        return self._prepared(first[0], first[1], len(chunks) - 1, resumed=False)

    def _request(self, wr: WorkspaceRules, rid: str, record: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """Build (and write) the request file of one outstanding request from the current rules and evidence."""
        observations = [s.observation for oid in record["observation_ids"] if (s := wr.evidence.get(oid)) is not None]
        models = {o.model_id for o in observations if o.model_id}
        if record["filters"].get("model_id"):
            models.add(record["filters"]["model_id"])
        request = CompileRequest(
            request_id=rid,
            workspace_id=wr.ws.id,
            created_at=record["created_at"],
            chunk={"batch_id": record["batch_id"], "index": record["index"], "of": record["of"]},  # type: ignore[arg-type]
            filters=record["filters"],
            observations=observations,
            rules=[r.rule for r in wr.rules.for_models(models)],
            policy=Policy(
                min_confidence=self.settings.min_confidence,
                recommended_prefixes=list(RECOMMENDED_PREFIXES),
                max_observations_per_request=self.settings.compile_max_observations,
            ),
            instructions=comp.INSTRUCTIONS,
            response_schema=comp.response_schema(),
        )
        data = request.model_dump(mode="json", exclude_none=True)
        rel = f"{REQUESTS_DIR}/{rid}/compile_request.json"
        atomic_write(wr.root / rel, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
        data["_path"] = rel
        return data

    @staticmethod
    def _prepared(request: dict[str, Any], record: dict[str, Any], remaining: int, *, resumed: bool) -> dict[str, Any]:
        path = request.pop("_path")
        return {
            "request_id": request["request_id"],
            "path": path,
            "observations": len(request["observations"]),
            "chunk": request["chunk"],
            "remaining": remaining,
            "resumed": resumed,
            "request": CompileRequest.model_validate(request),
        }

    # --- compile.apply ------------------------------------------------------------------------------------

    async def apply(self, ws: Workspace, p: m.ApplyParams) -> dict[str, Any]:
        result: dict[str, Any] = await self._locked(ws, lambda wr: self._apply(wr, p))
        await self._reindex(ws, [w["path"] for w in result["writes"] if w["action"] != "unchanged"])
        return result

    def _load_response(self, wr: WorkspaceRules, p: m.ApplyParams) -> Any:
        if p.response is not None:
            return p.response
        assert p.path is not None
        target = confine(wr.root, p.path, suffixes=(".json",))
        try:
            return orjson.loads(target.read_bytes())
        except FileNotFoundError as exc:
            raise AppError("MEMORY_FILE_NOT_FOUND", f"No file {p.path}") from exc
        except orjson.JSONDecodeError as exc:
            raise AppError(
                "MEMORY_COMPILE_INVALID", violations=[{"pointer": "", "reason": f"not JSON: {exc.msg}"}]
            ) from exc

    def _apply(self, wr: WorkspaceRules, p: m.ApplyParams) -> dict[str, Any]:
        raw = self._load_response(wr, p)
        wr.evidence.refresh()
        wr.rules.reload()
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
                f"{len(violations)} violation(s); nothing was written",
                violations=violations[:500],
                count=len(violations),
            )
        response = CompileResponse.model_validate(raw)
        now = ids.iso(datetime.now())
        writes, demoted = self._plan(wr, response, now)
        planned = [
            {**journal_meta_flat(w), "path": w.path, "action": _action(before, w.content)}
            for w, before in ((w, journal.read_bytes(root, w.path)) for w in writes)
        ]
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
        self, wr: WorkspaceRules, response: CompileResponse, now: str
    ) -> tuple[list[journal.FileWrite], list[str]]:
        """The files the response changes: one per profile or candidate, one per touched override file."""
        threshold = self.settings.min_confidence
        demoted: list[str] = []
        singles: dict[str, tuple[Rule, Layer, int | None]] = {}
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
            rule = _merge(old, item, rule_id, now, response.request_id, extra)
            singles[path] = (rule, "candidate", old.revision if old else None)

        for item in response.rules:
            if item.confidence < threshold:
                demoted.append(item.rule_id)
                stage(item, item.rule_id, f"confidence {item.confidence} < min_confidence {threshold}")
                continue
            path = f"{PROFILES}/{item.model_id}/{item.rule_id}.yaml"
            old = singles[path][0] if path in singles else existing(path, item.rule_id)
            singles[path] = (
                _merge(old, item, item.rule_id, now, response.request_id, {}),
                "profile",
                old.revision if old else None,
            )
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
                self._refuse_broken(wr, path)
                override_files[path] = {r.rule_id: r.rule for r in wr.rules.in_file(path)}
                override_revs[path] = []
            old = override_files[path].get(rule_id)
            rule = _merge(old, override, rule_id, now, response.request_id, {"instance_id": override.instance_id})
            override_files[path][rule_id] = rule
            override_revs[path].append(
                {"rule_id": rule_id, "rev_before": old.revision if old else None, "rev_after": rule.revision}
            )
        writes: list[journal.FileWrite] = []
        for path, (rule, layer, rev_before) in sorted(singles.items()):
            self._refuse_broken(wr, path)
            meta = {
                "layer": layer,
                "rules": [{"rule_id": rule.rule_id, "rev_before": rev_before, "rev_after": rule.revision}],
            }
            writes.append(journal.FileWrite(path, rule_yaml(rule), meta))
        for path, rules in sorted(override_files.items()):
            instance = path.rsplit("/", 1)[1].rsplit(".", 1)[0]
            meta = {"layer": "override", "rules": override_revs[path]}
            writes.append(journal.FileWrite(path, overrides_yaml(instance, list(rules.values())), meta))
        return writes, demoted

    @staticmethod
    def _refuse_broken(wr: WorkspaceRules, path: str) -> None:
        for error in wr.rules.errors():
            if error.startswith(path + ":"):
                raise AppError(
                    "MEMORY_CONFLICT",
                    f"{path} is not valid ({error.split(': ', 1)[-1]}); fix it before applying",
                    hint="`memoryctl validate` shows the problem; the last good version is still in effect.",
                )

    # --- resolve ------------------------------------------------------------------------------------------

    async def resolve(self, ws: Workspace, p: m.ResolveParams) -> m.ResolveResult:
        from memoryd.methods.rules import ResolveResult

        wr = await self._ready(ws)
        rules = wr.rules
        if not self.settings.watch:  # no watcher to report hand edits: look at the files every time
            await anyio.to_thread.run_sync(rules.reload)
        generation = rules.generation
        if wr.answers_generation != generation:
            wr.answers, wr.answers_generation = {}, generation
        key = (p.model_id, p.fw_version, p.instance_id)
        cached = wr.answers.get(key)
        if cached is not None:
            return cached
        try:
            answer = rules.resolve(p.model_id, p.fw_version, p.instance_id)
        except FwRangeError as exc:
            raise AppError("MEMORY_VERSION_INVALID", str(exc)) from exc
        result = ResolveResult.model_validate(
            {
                "model_id": p.model_id,
                "fw_version": p.fw_version,
                "instance_id": p.instance_id,
                "facts": answer.facts,
                "trace": answer.trace,
                "rules": answer.rules,
                "generation": generation,
                "errors": rules.errors(),
            }
        )
        if rules.generation == generation and wr.answers_generation == generation:
            if len(wr.answers) >= 50_000:
                wr.answers.clear()
            wr.answers[key] = result
        return result

    # --- audit and review ---------------------------------------------------------------------------------

    async def search(self, ws: Workspace, p: m.RulesSearchParams) -> dict[str, Any]:
        wr = await self._ready(ws)
        version = None
        if p.fw_version is not None:
            try:
                version = parse_version(p.fw_version)
            except FwRangeError as exc:
                raise AppError("MEMORY_VERSION_INVALID", str(exc)) from exc
        words = [w.casefold() for w in (p.query or "").split() if w]
        found = []
        for loaded in wr.rules.all():
            rule = loaded.rule
            if p.model_id is not None and rule.model_id != p.model_id:
                continue
            if p.layer is not None and loaded.layer != p.layer:
                continue
            if version is not None and not loaded.range.contains(version):
                continue
            if words:
                haystack = orjson.dumps(rule_dict(rule), option=orjson.OPT_NON_STR_KEYS).decode().casefold()
                if not all(w in haystack for w in words):
                    continue
            found.append(_summary(loaded))
        return {"rules": found[: p.limit], "total": len(found)}

    def _one(self, wr: WorkspaceRules, rule_id: str, layer: Layer | None, model_id: str | None = None) -> LoadedRule:
        found = wr.rules.find(rule_id, layer, model_id)
        if not found:
            raise AppError("MEMORY_RULE_NOT_FOUND", f"No rule {rule_id}" + (f" in {layer}s" if layer else ""))
        return found[0]

    async def show(self, ws: Workspace, p: m.RuleRef) -> dict[str, Any]:
        wr = await self._ready(ws)

        def work() -> dict[str, Any]:
            wr.evidence.refresh()
            loaded = self._one(wr, p.rule_id, p.layer)
            observations, missing = [], []
            for oid in loaded.rule.provenance.observation_ids:
                stored = wr.evidence.get(oid)
                if stored is None:
                    missing.append(oid)
                else:
                    observations.append(stored.observation)
            return {
                "rule": loaded.rule,
                "layer": loaded.layer,
                "path": loaded.path,
                "observations": observations,
                "missing_observations": missing,
                "history": _rule_history(journal.read_history(wr.root), loaded.rule_id),
            }

        result: dict[str, Any] = await anyio.to_thread.run_sync(work)
        return result

    async def diff(self, ws: Workspace, p: m.RulesDiffParams) -> dict[str, Any]:
        wr = await self._ready(ws)

        def work() -> dict[str, Any]:
            loaded = self._one(wr, p.rule_id, p.layer)
            current = loaded.rule.revision
            to_rev = current if p.to_rev is None else p.to_rev
            history = journal.read_history(wr.root)
            before = _revision(wr.root, history, loaded, p.from_rev)
            after = _revision(wr.root, history, loaded, to_rev)
            text_a = yaml.safe_dump(before, sort_keys=False, allow_unicode=True).splitlines(keepends=True)
            text_b = yaml.safe_dump(after, sort_keys=False, allow_unicode=True).splitlines(keepends=True)
            diff = "".join(difflib.unified_diff(text_a, text_b, f"{p.rule_id}@{p.from_rev}", f"{p.rule_id}@{to_rev}"))
            facts_a, facts_b = before.get("facts", {}), after.get("facts", {})
            changes = []
            for key in sorted(set(facts_a) | set(facts_b)):
                if key not in facts_b:
                    changes.append({"key": key, "before": facts_a[key], "change": "removed"})
                elif key not in facts_a:
                    changes.append({"key": key, "after": facts_b[key], "change": "added"})
                elif facts_a[key] != facts_b[key]:
                    changes.append({"key": key, "before": facts_a[key], "after": facts_b[key], "change": "changed"})
            return {"rule_id": p.rule_id, "from_rev": p.from_rev, "to_rev": to_rev, "diff": diff, "facts": changes}

        result: dict[str, Any] = await anyio.to_thread.run_sync(work)
        return result

    async def timeline(self, ws: Workspace, p: m.TimelineParams) -> dict[str, Any]:
        wr = await self._ready(ws)
        since = None if p.since is None else comp.parse_when(p.since, "since")
        until = None if p.until is None else comp.parse_when(p.until, "until")

        def inside(moment: datetime) -> bool:
            return (since is None or moment >= since) and (until is None or moment < until)

        def work() -> dict[str, Any]:
            wr.evidence.refresh()
            events: list[tuple[datetime, dict[str, Any]]] = []
            for stored in wr.evidence.iter_ordered():
                obs = stored.observation
                if p.run_id is not None and obs.run_id != p.run_id:
                    continue
                moment = ids.id_time(obs.observation_id)
                if inside(moment):
                    text = " ".join(obs.text.split())
                    events.append(
                        (
                            moment,
                            {
                                "ts": obs.ts,
                                "type": "observation",
                                "id": obs.observation_id,
                                "summary": text if len(text) <= 160 else text[:159] + "…",
                                "kind": obs.kind,
                                "run_id": obs.run_id,
                                "model_id": obs.model_id,
                            },
                        )
                    )
            if p.run_id is None:
                for entry in journal.read_history(wr.root):
                    try:
                        moment = datetime.fromisoformat(str(entry.get("ts")))
                    except ValueError:
                        continue
                    if not inside(moment):
                        continue
                    changes = entry.get("changes") or []
                    events.append(
                        (
                            moment,
                            {
                                "ts": str(entry["ts"]),
                                "type": "change",
                                "id": str(entry.get("run_id")),
                                "op": str(entry.get("op")),
                                "summary": _change_summary(entry),
                                "paths": [str(c.get("path")) for c in changes],
                            },
                        )
                    )
            events.sort(key=lambda e: (e[0], e[1]["id"]), reverse=True)
            return {"events": [e for _, e in events[: p.limit]], "truncated": len(events) > p.limit}

        result: dict[str, Any] = await anyio.to_thread.run_sync(work)
        return result

    async def candidates(self, ws: Workspace, p: m.CandidatesListParams) -> dict[str, Any]:
        wr = await self._ready(ws)
        return {
            "candidates": [
                _summary(r)
                for r in wr.rules.all()
                if r.layer == "candidate" and (p.model_id is None or r.rule.model_id == p.model_id)
            ]
        }

    async def move_candidate(
        self, ws: Workspace, p: m.CandidateRef, action: Literal["promote", "reject"]
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._locked(ws, lambda wr: self._move(wr, p, action))
        await self._reindex(ws, [w["path"] for w in result["writes"]])
        return result

    def _move(self, wr: WorkspaceRules, p: m.CandidateRef, action: Literal["promote", "reject"]) -> dict[str, Any]:
        wr.rules.reload()
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
            writes.insert(0, self._promotion(wr, candidate, now))
        planned = [
            {**journal_meta_flat(w), "path": w.path, "action": _action(journal.read_bytes(wr.root, w.path), w.content)}
            for w in writes
        ]
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

    def _promotion(self, wr: WorkspaceRules, candidate: LoadedRule, now: str) -> journal.FileWrite:
        rule = candidate.rule
        fields = rule.model_dump(exclude={"status", "target", "reason", "revision", "created_at", "updated_at"})
        if rule.target == "override" and rule.instance_id:
            path = f"{OVERRIDES}/{rule.instance_id}.yaml"
            self._refuse_broken(wr, path)
            current = {r.rule_id: r.rule for r in wr.rules.in_file(path)}
            old = current.get(rule.rule_id)
            promoted = _promoted(old, fields, now)
            current[rule.rule_id] = promoted
            meta = {"layer": "override", "rules": [_revs(old, promoted)]}
            return journal.FileWrite(path, overrides_yaml(rule.instance_id, list(current.values())), meta)
        path = f"{PROFILES}/{rule.model_id}/{rule.rule_id}.yaml"
        self._refuse_broken(wr, path)
        old = next((r.rule for r in wr.rules.in_file(path) if r.rule_id == rule.rule_id), None)
        fields["instance_id"] = None
        promoted = _promoted(old, fields, now)
        return journal.FileWrite(path, rule_yaml(promoted), {"layer": "profile", "rules": [_revs(old, promoted)]})

    # --- status and validate ------------------------------------------------------------------------------

    async def status(self, ws: Workspace) -> dict[str, Any] | None:
        wr = self._by_id.get(ws.id) or self.attach(ws)
        with anyio.move_on_after(5):
            await wr.opened.wait()
        if not wr.opened.is_set():
            return None

        def work() -> dict[str, Any]:
            wr.evidence.refresh()
            state = comp.load_state(journal.read_bytes(wr.root, comp.STATE_FILE))
            layers = {"profile": 0, "override": 0, "candidate": 0}
            for loaded in wr.rules.all():
                layers[loaded.layer] += 1
            return {
                "profiles": layers["profile"],
                "overrides": layers["override"],
                "candidates": layers["candidate"],
                "observations": len(wr.evidence),
                "outstanding_requests": sum(1 for r in state["requests"].values() if r["status"] == "outstanding"),
                "generation": wr.rules.generation,
                "errors": wr.rules.errors() + wr.evidence.problems(),
                "recovered": wr.recovered,
                "error": wr.open_error,
            }

        result: dict[str, Any] = await anyio.to_thread.run_sync(work)
        return result

    async def validate(self, ws: Workspace) -> list[dict[str, Any]]:
        wr = await self._ready(ws)

        def work() -> list[dict[str, Any]]:
            wr.rules.reload()
            wr.evidence.refresh()
            problems = []
            for error in wr.rules.errors():
                path, _, message = error.partition(": ")
                problems.append({"severity": "error", "path": path, "line": None, "message": message or error})
            for problem in wr.evidence.problems():
                path, _, message = problem.partition(": ")
                problems.append({"severity": "warning", "path": path, "line": None, "message": message})
            for loaded in wr.rules.all():
                odd = sorted(k for k in loaded.rule.facts if k.split(".", 1)[0] not in RECOMMENDED_PREFIXES)
                if odd:
                    problems.append(
                        {
                            "severity": "warning",
                            "path": loaded.path,
                            "line": None,
                            "message": f"{loaded.rule_id}: facts outside the recommended prefixes: {', '.join(odd)}",
                        }
                    )
                for oid in loaded.rule.provenance.observation_ids:
                    if oid not in wr.evidence:
                        problems.append(
                            {
                                "severity": "warning",
                                "path": loaded.path,
                                "line": None,
                                "message": f"{loaded.rule_id}: provenance cites unknown observation {oid}",
                            }
                        )
            return problems

        result: list[dict[str, Any]] = await anyio.to_thread.run_sync(work)
        return result


# --- helpers ----------------------------------------------------------------------------------------------------


def _merge(
    old: Rule | None,
    item: ProposedRule | ProposedOverride,
    rule_id: str,
    now: str,
    request_id: str,
    extra: dict[str, Any],
) -> Rule:
    """The rule after ``item`` is applied to ``old``: facts merged (null removes), provenance united."""
    from memoryd.rules.ruleset import flatten

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


def _action(before: bytes | None, after: bytes | None) -> str:
    if before == after:
        return "unchanged"
    if before is None:
        return "create"
    return "delete" if after is None else "update"


def journal_meta_flat(write: journal.FileWrite) -> dict[str, Any]:
    """The planned-write fields of a file write: its layer and, for a one-rule file, the rule and revision."""
    rules = write.meta.get("rules") or []
    out: dict[str, Any] = {"layer": write.meta.get("layer")}
    if len(rules) == 1:
        out["rule_id"] = rules[0]["rule_id"]
        out["revision"] = rules[0]["rev_after"]
    return out


def _rule_history(history: list[dict[str, Any]], rule_id: str) -> list[dict[str, Any]]:
    out = []
    for entry in history:
        for change in entry.get("changes") or []:
            for touched in change.get("rules") or []:
                if touched.get("rule_id") == rule_id:
                    out.append(
                        {
                            "run_id": entry.get("run_id"),
                            "op": entry.get("op"),
                            "ts": entry.get("ts"),
                            "path": change.get("path"),
                            "action": change.get("action"),
                            "layer": change.get("layer"),
                            "rev_before": touched.get("rev_before"),
                            "rev_after": touched.get("rev_after"),
                            "backup": change.get("backup"),
                        }
                    )
    return out


def _revision(root: Path, history: list[dict[str, Any]], loaded: LoadedRule, rev: int) -> dict[str, Any]:
    """The rule as it was at revision ``rev``: the current file, or the pre-image a later change backed up."""
    if rev == loaded.rule.revision:
        return rule_dict(loaded.rule)
    for item in _rule_history(history, loaded.rule_id):
        if item["layer"] == loaded.layer and item["rev_before"] == rev and item["backup"]:
            data = journal.read_bytes(root, str(item["backup"]))
            if data is None:
                break
            raw = yaml.safe_load(data)
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


def _change_summary(entry: dict[str, Any]) -> str:
    changes = entry.get("changes") or []
    rules = sorted({str(r.get("rule_id")) for c in changes for r in (c.get("rules") or [])})
    shown = ", ".join(rules[:5]) + (f" and {len(rules) - 5} more" if len(rules) > 5 else "")
    what = f"{entry.get('op')}: {len(changes)} file(s)"
    return f"{what}; rules {shown}" if rules else what
