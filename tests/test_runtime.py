"""The workspace runtime (memoryd/runtime.py): changes routed by kind, and a change the daemon made itself reloaded
and indexed once — not a second time when the watcher reports the very same write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import Daemon, wait_for
from tests.test_rules import PROFILE, compiled, observe, resolve, rule


def events(daemon: Daemon, ws: str, name: str) -> list[dict[str, Any]]:
    out = []
    for line in daemon.log.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == name and record.get("workspace_id") == ws:
            out.append(record)
    return out


def settled(daemon: Daemon, root: Path, ws: str, word: str) -> None:
    """Every change the watcher saw before now has been handled: a file written now is searchable only once the
    watcher's callbacks (run one at a time, in order) got to it."""
    (root / "memory" / f"{word}.md").write_text(f"# marker\n\n{word}\n", encoding="utf-8")
    wait_for(lambda: daemon.call("search", {"workspace": ws, "query": word, "mode": "bm25"})["hits"])


def test_an_apply_is_reloaded_and_indexed_once(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    settled(daemon, root, ws, "qzxfirst")
    done = compiled(daemon, ws, rule(observe(daemon, ws)))
    assert any(w["path"] == PROFILE for w in done["writes"])
    assert resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.flow_control"] == "rts_cts"
    hits = daemon.call("search", {"workspace": ws, "query": "串口超时", "mode": "bm25"})["hits"]
    assert any(h["path"] == PROFILE for h in hits)  # indexed before the apply answered
    settled(daemon, root, ws, "qzxsecond")
    indexed = [e for e in events(daemon, ws, "changes_indexed") if PROFILE in e["paths"]]
    synced = [e for e in events(daemon, ws, "index_synced") if PROFILE in e["paths"]]
    assert len(indexed) == 1 and synced == [], (indexed, synced)  # once, by the apply; not by the watcher's echo
    reloaded = [e for e in events(daemon, ws, "rules_reloaded") if PROFILE in (e["paths"] or ())]
    assert reloaded == []  # the apply's own reload only (in the change itself, not logged as the watcher's)


def test_a_hand_edit_goes_to_rules_and_notes(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """A change the daemon did not make is routed by kind: rule YAML is reloaded (resolve sees it) and indexed
    (search finds it); Markdown is indexed."""
    root, ws = workspace
    compiled(daemon, ws, rule(observe(daemon, ws)))
    path = root / PROFILE
    path.write_text(path.read_text(encoding="utf-8").replace("rts_cts", "xon_xoff"), encoding="utf-8")
    wait_for(lambda: resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.flow_control"] == "xon_xoff")
    wait_for(lambda: daemon.call("search", {"workspace": ws, "query": "xon_xoff", "mode": "bm25"})["hits"])
    (root / "memory" / "notes.md").write_text("# Notes\n\nqzxhand edited note\n", encoding="utf-8")
    wait_for(lambda: daemon.call("search", {"workspace": ws, "query": "qzxhand", "mode": "bm25"})["hits"])
