"""Hand edits of rule files become revisions (issue 11, item 4).

The rule set notices, on any reload, a rule whose content changed while its ``revision`` did not go up (an editor,
``git checkout``): ``RuleSet.hand_edits``. ``record`` turns each into a change like the daemon's own: the file gets
``revision`` + 1 (and ``updated_at``), the content from before the edit is kept under ``data/memory/backups/<run_id>/``
and ``history.jsonl`` gets an ``op: hand_edit`` line with the revisions, so ``rules diff`` and ``timeline`` tell the
truth. It runs under the workspace's rules lock, in a worker thread. From the watcher it waits until the file has
been quiet for ``QUIET_S``, and it re-reads the file before replacing it: a second save is never overwritten by the
record of the first.

Rewriting: a one-rule file (profiles, candidates) gets its ``revision:`` and ``updated_at:`` lines replaced in place,
so the rest of the hand-written file (comments, order) stays as written; an overrides file, or a file those lines
cannot be found in, is written out again from its rules. Not noticed: edits made while the daemon was stopped, and an
edit that raises ``revision`` itself (it is taken as the new revision, with no pre-image on record).
"""

from __future__ import annotations

import os
import re
import time
from datetime import datetime

import structlog

from memoryd import ids
from memoryd.rules import journal
from memoryd.rules.ruleset import HandEdit, RuleFileError, load_file, overrides_yaml, rule_yaml
from memoryd.rules.workspace import WorkspaceRules

log = structlog.get_logger("memoryd.rules")


QUIET_S = 1.0  # the watcher's path records an edit once its file has not changed for this long


def record(wr: WorkspaceRules, quiet_s: float = 0.0) -> list[str]:
    """Record every pending hand edit; returns the paths rewritten. With ``quiet_s``, an edit whose file changed
    less than that long ago stays pending (``pending_quiet``): a person who saves twice in a row is never
    overwritten by the record of the first save. A change of the daemon's own records them all first (0)."""
    written = []
    now = time.time()
    for edit in wr.rules.take_hand_edits():
        if quiet_s and _changed_since(wr, edit.path, now - quiet_s):
            wr.rules.requeue(edit)
            continue
        if _record_one(wr, edit):
            written.append(edit.path)
    if written:
        wr.rules.reload(written)
    return written


def _changed_since(wr: WorkspaceRules, rel: str, when: float) -> bool:
    try:
        return os.stat(wr.root / rel).st_mtime > when
    except OSError:
        return False  # gone: _record_one finds nothing to number


def _record_one(wr: WorkspaceRules, edit: HandEdit) -> bool:
    current = journal.read_bytes(wr.root, edit.path)
    if current is None:
        return False  # deleted since: nothing left to number
    try:
        loaded = load_file(wr.root, edit.path, edit.layer, current)
    except RuleFileError:
        wr.rules.requeue(edit)  # broken now: recorded once it parses again
        return False
    now = ids.iso(datetime.now())
    bumped = {rid: rev + 1 for rid, rev in edit.revisions.items() if any(r.rule_id == rid for r in loaded)}
    if not bumped:
        return False
    content = _in_place(current, next(iter(bumped.values())), now) if edit.layer != "override" else None
    if content is None or not _says(wr, edit, content, bumped):
        rules = [
            r.rule.model_copy(update={"revision": bumped[r.rule_id], "updated_at": now})
            if r.rule_id in bumped
            else r.rule
            for r in loaded
        ]
        if edit.layer == "override":
            content = overrides_yaml(edit.path.rsplit("/", 1)[-1].rsplit(".", 1)[0], rules)
        else:
            content = rule_yaml(rules[0])
    meta = {
        "layer": edit.layer,
        "rules": [{"rule_id": rid, "rev_before": edit.revisions[rid], "rev_after": rev} for rid, rev in bumped.items()],
    }
    if journal.read_bytes(wr.root, edit.path) != current:  # edited again meanwhile: never overwrite a person's save
        wr.rules.requeue(edit)
        return False
    run_id = ids.new_id("edit")
    write = journal.FileWrite(edit.path, content, meta)
    journal.commit(wr.root, run_id, {"op": "hand_edit", "ts": now}, [write], pre_images={edit.path: edit.before})
    log.info("hand_edit_recorded", workspace_id=wr.ws.id, run_id=run_id, path=edit.path, rules=len(bumped))
    return True


_REVISION = re.compile(rb"^revision:[ \t]*\d+[ \t]*$", re.MULTILINE)
_UPDATED = re.compile(rb"^updated_at:.*$", re.MULTILINE)


def _in_place(data: bytes, revision: int, now: str) -> bytes | None:
    if len(_REVISION.findall(data)) != 1 or len(_UPDATED.findall(data)) > 1:
        return None
    data = _REVISION.sub(f"revision: {revision}".encode(), data)
    return _UPDATED.sub(f"updated_at: '{now}'".encode(), data)


def _says(wr: WorkspaceRules, edit: HandEdit, content: bytes, bumped: dict[str, int]) -> bool:
    """The rewritten file parses and carries the new revisions."""
    try:
        rules = load_file(wr.root, edit.path, edit.layer, content)
    except RuleFileError:
        return False
    return all(r.rule.revision == bumped[r.rule_id] for r in rules if r.rule_id in bumped)
