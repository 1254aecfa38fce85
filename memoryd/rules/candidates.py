"""candidates.promote and candidates.reject: a candidate rule moved into its layer, or removed, as one recorded
change (history and a backup of every file it touches). Blocking: called under the workspace's lock from a worker
thread."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import structlog

from memoryd import ids
from memoryd.errors import AppError
from memoryd.notes.daily import strip_private
from memoryd.rules import api as m
from memoryd.rules import changes, changeview, handedit, journal
from memoryd.rules.ruleset import LoadedRule, overrides_yaml, rule_yaml
from memoryd.rules.workspace import WorkspaceRules
from memoryd.store.prepare import OVERRIDES, PROFILES

log = structlog.get_logger("memoryd.rules")


def move(
    wr: WorkspaceRules,
    rule_id: str,
    action: Literal["promote", "reject"],
    *,
    model_id: str | None = None,
    reason: str | None = None,
    dry_run: bool = False,
) -> m.CandidateMoveResult:
    wr.rules.reload()
    handedit.record(wr)  # a hand edit not recorded yet is a revision before this change
    found = wr.rules.find(rule_id, "candidate", model_id)
    if not found:
        raise AppError("MEMORY_RULE_NOT_FOUND", f"No candidate {rule_id}")
    if len(found) > 1:
        models = ", ".join(sorted(r.rule.model_id for r in found))
        raise AppError("MEMORY_CONFLICT", f"Candidate {rule_id} exists for {models}", hint="Pass model_id.")
    candidate = found[0]
    now = ids.iso(datetime.now())
    cand_meta = {"rule_id": rule_id, "rev_before": candidate.rule.revision, "rev_after": None}
    writes = [journal.FileWrite(candidate.path, None, {"layer": "candidate", "rules": [cand_meta]})]
    if action == "promote":
        writes.insert(0, _promotion(wr, candidate, now))
    planned = changes.planned(wr.root, writes)
    if dry_run:
        diffs = [
            changeview.diff_of(w.path, p.action, journal.read_bytes(wr.root, w.path), w.content)
            for w, p in zip(writes, planned, strict=True)
        ]
        return m.CandidateMoveResult(run_id=None, rule_id=rule_id, writes=planned, dry_run=True, diffs=diffs)
    run_id = ids.new_id(action)
    entry = {"op": f"candidates.{action}", "ts": now, "rule_id": rule_id}
    if reason:
        entry["reason"] = strip_private(reason)
    journal.commit(wr.root, run_id, entry, writes)
    wr.rules.reload([w.path for w in writes])
    log.info(f"candidate_{action}d", workspace_id=wr.ws.id, run_id=run_id)
    return m.CandidateMoveResult(run_id=run_id, rule_id=rule_id, writes=planned, dry_run=False)


def _promotion(wr: WorkspaceRules, candidate: LoadedRule, now: str) -> journal.FileWrite:
    rule = candidate.rule
    fields = rule.model_dump(exclude={"status", "target", "reason", "revision", "created_at", "updated_at"})
    if rule.target == "override" and rule.instance_id:
        path = f"{OVERRIDES}/{rule.instance_id}.yaml"
        changes.refuse_broken(wr, path)
        current = {r.rule_id: r.rule for r in wr.rules.in_file(path)}
        old = current.get(rule.rule_id)
        promoted = changes.promoted(old, fields, now)
        current[rule.rule_id] = promoted
        meta = {"layer": "override", "rules": [changes.revs(old, promoted)]}
        return journal.FileWrite(path, overrides_yaml(rule.instance_id, list(current.values())), meta)
    path = f"{PROFILES}/{rule.model_id}/{rule.rule_id}.yaml"
    changes.refuse_broken(wr, path)
    old = next((r.rule for r in wr.rules.in_file(path) if r.rule_id == rule.rule_id), None)
    fields["instance_id"] = None
    promoted = changes.promoted(old, fields, now)
    return journal.FileWrite(path, rule_yaml(promoted), {"layer": "profile", "rules": [changes.revs(old, promoted)]})
