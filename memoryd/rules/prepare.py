"""compile.prepare: the uncompiled observations (or those a filter names) and the current rules gathered into
compile_request.json files for the host's own model, split into chunks a request can hold. Blocking: called under
the workspace's lock from a worker thread."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
import structlog

from memoryd import ids
from memoryd.fsio import atomic_write
from memoryd.rules import api as m
from memoryd.rules import compile as comp
from memoryd.rules import handedit, journal
from memoryd.rules.changes import REQUESTS_DIR
from memoryd.rules.extension import Curator
from memoryd.rules.models import RECOMMENDED_PREFIXES, CompileRequest, Observation, Policy, RequestChunk
from memoryd.rules.workspace import WorkspaceRules
from memoryd.settings import RulesSettings

log = structlog.get_logger("memoryd.rules")


def prepare(
    settings: RulesSettings,
    wr: WorkspaceRules,
    *,
    run_id: str | None = None,
    model_id: str | None = None,
    since: str | None = None,
    restart: bool = False,
    curator: Curator | None = None,
) -> m.PrepareResult:
    """``curator``: also gather daily notes not consolidated yet (memoryd.curate), in chunks of their own; a batch
    has as many requests as the longer of its observation and entry chunks."""
    wr.evidence.refresh()
    wr.rules.reload()
    handedit.record(wr)  # a hand edit not recorded yet is a revision before this change
    root = wr.root
    state = comp.load_state(journal.read_bytes(root, comp.STATE_FILE))
    filters = {"run_id": run_id, "model_id": model_id, "since": since}
    start = None if since is None else comp.parse_when(since, "since")
    outstanding = sorted(
        ((rid, r) for rid, r in state["requests"].items() if r["status"] == "outstanding"),
        key=lambda item: (item[1]["batch_id"], item[1]["index"]),
    )
    if restart:
        for _rid, record in outstanding:
            record["status"] = "abandoned"
        outstanding = []
    else:
        same = [(rid, r) for rid, r in outstanding if r["filters"] == filters]
        if same:
            rid, record = same[0]
            handed = _request(settings, wr, rid, record, curator)
            if curator is not None:
                curator.started(wr, rid, record)
            return _prepared(*handed, len(same) - 1, resumed=True)
    taken = {oid for _rid, r in outstanding for oid in [*r["observation_ids"], *r.get("entries", [])]}
    selected = _select(wr, state, taken, run_id=run_id, model_id=model_id, start=start)
    entry_chunks = [] if curator is None or run_id or model_id else curator.select(wr, taken, start)
    if not selected and not entry_chunks:
        if restart:
            atomic_write(root / comp.STATE_FILE, comp.dump_state(state), root=root)
        return m.PrepareResult(request_id=None, path=None, observation_count=0, remaining=0, resumed=False)
    chunks = _chunks(settings, selected) if selected else []
    count = max(len(chunks), len(entry_chunks))
    batch_id = ids.new_id("cb")
    first: tuple[str, dict[str, Any]] | None = None
    for index in range(1, count + 1):
        rid = ids.new_id("cr")
        record = {
            "status": "outstanding",
            "batch_id": batch_id,
            "index": index,
            "of": count,
            "filters": filters,
            "observation_ids": [o.observation_id for o in chunks[index - 1]] if index <= len(chunks) else [],
            "created_at": ids.iso(datetime.now()),
        }
        if index <= len(entry_chunks):
            record["entries"] = entry_chunks[index - 1]
        state["requests"][rid] = record
        first = first or (rid, record)
    atomic_write(root / comp.STATE_FILE, comp.dump_state(state), root=root)
    assert first is not None
    for rid, record in state["requests"].items():  # each request file (rebuilt when it is handed out again)
        if record["batch_id"] == batch_id and rid != first[0]:
            _request(settings, wr, rid, record, curator)
    handed = _request(settings, wr, *first, curator)
    if curator is not None:
        curator.started(wr, *first)
    log.info(
        "compile_prepared",
        workspace_id=wr.ws.id,
        observations=len(selected),
        entries=sum(len(c) for c in entry_chunks),
        requests=count,
    )
    return _prepared(*handed, count - 1, resumed=False)


def _select(
    wr: WorkspaceRules,
    state: dict[str, Any],
    taken: set[str],
    *,
    run_id: str | None,
    model_id: str | None,
    start: datetime | None,
) -> list[Observation]:
    """The observations a new request gathers, in order: not in an outstanding request, of the run and model asked
    for; from ``start`` on (compiled before or not: a recompile), else those no apply has covered yet."""
    selected = []
    for stored in wr.evidence.iter_ordered():
        obs = stored.observation
        if obs.observation_id in taken:
            continue
        if run_id is not None and stored.source != f"run:{run_id}":
            continue
        if model_id is not None and obs.model_id != model_id:
            continue
        if start is not None:
            if ids.id_time(obs.observation_id) < start:
                continue
        elif comp.is_compiled(state, stored.source, obs.observation_id):
            continue
        selected.append(obs)
    return selected


def _chunks(settings: RulesSettings, selected: list[Observation]) -> list[list[Observation]]:
    """The observations split into requests of at most ``compile_max_observations`` and about
    ``compile_max_request_bytes`` each (one observation larger than that is a request of its own)."""
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
    return chunks


def _request(
    settings: RulesSettings, wr: WorkspaceRules, rid: str, record: dict[str, Any], curator: Curator | None = None
) -> tuple[CompileRequest, str]:
    """Build and write the request file of one outstanding request from the current rules and evidence (and, with
    entries to consolidate, the memory files as they are now); returns it and its path."""
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
    material = curator.material(wr, record) if curator is not None and record.get("entries") else None
    if material is not None:
        extra = comp.CONSOLIDATION_INSTRUCTIONS + (comp.COMPACT_INSTRUCTIONS if material.compact else "")
        request = request.model_copy(update={"consolidation": material, "instructions": comp.INSTRUCTIONS + extra})
    rel = f"{REQUESTS_DIR}/{rid}/compile_request.json"
    data = request.model_dump(mode="json", exclude_none=True)
    atomic_write(wr.root / rel, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n", root=wr.root)
    return request, rel


def _prepared(request: CompileRequest, path: str, remaining: int, *, resumed: bool) -> m.PrepareResult:
    return m.PrepareResult(
        request_id=request.request_id,
        path=path,
        observation_count=len(request.observations),
        entry_count=len(request.consolidation.daily_notes) if request.consolidation else 0,
        chunk=request.chunk.model_dump(),
        remaining=remaining,
        resumed=resumed,
        request=request,
    )
