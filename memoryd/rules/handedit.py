"""Hand edits of rule files become revisions (issue 11, item 4; issue 19, §3.9: without touching the file).

The rule set notices, on any reload, a rule whose content changed while its ``revision`` did not go up (an editor,
``git checkout``): ``RuleSet.hand_edits``. ``record`` turns each into a change like the daemon's own, through
``journal.commit``: the content from before the edit is kept under ``data/memory/backups/<run_id>/`` and
``history.jsonl`` gets an ``op: hand_edit`` line with the revisions (``rev_before`` → ``rev_after``) and the
sha256 of the file as the person saved it. The file itself is never written: its bytes and mtime stay exactly what
the person saved, so an open editor never says "changed on disk". The rule set reads the new revision (and its
time, as ``updated_at``) from that history line for as long as the file holds that content
(``journal.recorded``), so ``rules show``, ``rules diff``, ``timeline`` and the next change's numbering
(``max(file, recorded) + 1``, written into the file by that change) tell the truth; ``restore`` of the hand edit
puts the old bytes back.

It runs under the workspace's rules lock, in a worker thread. From the watcher it waits until the file has been
quiet for ``QUIET_S``, so a person who saves twice in a row makes one revision. Not noticed: edits made while the
daemon was stopped, and an edit that raises ``revision`` itself (it is taken as the new revision, with no
pre-image on record).
"""

from __future__ import annotations

import os
import time
from datetime import datetime

import structlog

from memoryd import ids
from memoryd.rules import journal
from memoryd.rules.ruleset import HandEdit, RuleFileError, load_file
from memoryd.rules.workspace import WorkspaceRules

log = structlog.get_logger("memoryd.rules")


QUIET_S = 1.0  # the watcher's path records an edit once its file has not changed for this long


def record(wr: WorkspaceRules, quiet_s: float = 0.0) -> list[str]:
    """Record every pending hand edit; returns the paths recorded. With ``quiet_s``, an edit whose file changed
    less than that long ago stays pending: a person who saves twice in a row makes one revision. A change of the
    daemon's own records them all first (0)."""
    recorded = []
    now = time.time()
    for edit in wr.rules.take_hand_edits():
        if quiet_s and _changed_since(wr, edit.path, now - quiet_s):
            wr.rules.requeue(edit)
            continue
        if _record_one(wr, edit):
            recorded.append(edit.path)
    if recorded:
        wr.rules.reload(recorded, force=recorded)  # same bytes on disk: read them again for the new revisions
    return recorded


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
    bumped = {rid: rev + 1 for rid, rev in edit.revisions.items() if any(r.rule_id == rid for r in loaded)}
    if not bumped or current == edit.before:
        return False
    meta = {
        "layer": edit.layer,
        "rules": [{"rule_id": rid, "rev_before": edit.revisions[rid], "rev_after": rev} for rid, rev in bumped.items()],
    }
    run_id = ids.new_id("edit")
    write = journal.FileWrite(edit.path, current, meta, on_disk=True)
    entry = {"op": "hand_edit", "ts": ids.iso(datetime.now())}
    journal.commit(wr.root, run_id, entry, [write], pre_images={edit.path: edit.before})
    log.info("hand_edit_recorded", workspace_id=wr.ws.id, run_id=run_id, path=edit.path, rules=len(bumped))
    return True
