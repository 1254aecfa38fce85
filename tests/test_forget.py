"""Auditable memory items: forget soft-deletes an entry as a recorded change, restore undoes any recorded change
(a forget, a compile.apply, a restore), items written before this version read with stable defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from memoryctl.rpc import RemoteError

from tests.conftest import Daemon
from tests.test_rules import PROFILE, compiled, history, observe, resolve, rule


def remember(d: Daemon, ws: str, text: str) -> dict[str, Any]:
    result: dict[str, Any] = d.call("remember", {"workspace": ws, "type": "decision", "text": text})
    return result


def found(d: Daemon, ws: str, query: str) -> list[str]:
    return [h["snippet"] for h in d.call("search", {"workspace": ws, "query": query, "mode": "bm25"})["hits"]]


def context_text(d: Daemon, ws: str, query: str) -> str:
    result = d.call("context", {"workspace": ws, "query_text": query})
    return str(result["dynamic"]["text"])


def items_file(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "data/memory/items.jsonl").read_text().splitlines()]


def test_forget_hides_an_entry_keeps_it_for_audit_and_restore_brings_it_back(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    first = remember(daemon, ws, "串口 ERR_UART_TIMEOUT_0x3F 在开启流控后消失")
    remember(daemon, ws, "串口 波特率 921600 需要 RTS/CTS")
    assert len(found(daemon, ws, "串口")) == 2
    recorded = items_file(root)
    assert [i["id"] for i in recorded] == [first["id"], recorded[1]["id"]]
    assert recorded[0]["confidence"] == 1.0 and recorded[0]["evidence"] == [] and recorded[0]["revision"] == 1

    forgot = daemon.call("forget", {"workspace": ws, "id": first["id"], "reason": "wrong board"})
    assert forgot["item"]["id"] == first["id"] and forgot["item"]["deleted_at"]
    assert forgot["item"]["deleted_run"] == forgot["run_id"]
    assert not any("ERR_UART_TIMEOUT_0x3F" in s for s in found(daemon, ws, "串口 ERR_UART_TIMEOUT_0x3F"))
    assert len(found(daemon, ws, "串口")) == 1
    assert "ERR_UART_TIMEOUT_0x3F" not in context_text(daemon, ws, "ERR_UART_TIMEOUT_0x3F 串口")
    assert "ERR_UART_TIMEOUT_0x3F" not in context_text(daemon, ws, "what did we decide yesterday about the 串口?")
    daily = (root / first["path"]).read_text(encoding="utf-8")
    assert "ERR_UART_TIMEOUT_0x3F" in daily  # kept in the Markdown, for audit
    entry = history(root)[-1]
    assert entry["op"] == "forget" and entry["run_id"] == forgot["run_id"] and entry["item_id"] == first["id"]
    assert entry["reason"] == "wrong board"

    with pytest.raises(RemoteError) as again:
        daemon.call("forget", {"workspace": ws, "id": first["id"]})
    assert again.value.name == "MEMORY_CONFLICT" and forgot["run_id"] in str(again.value.data or again.value)

    restored = daemon.call("restore", {"workspace": ws, "run_id": forgot["run_id"]})
    assert restored["restored"] == forgot["run_id"] and restored["run_id"] != forgot["run_id"]
    assert restored["writes"] == [{"path": "data/memory/forgotten.json", "action": "delete"}]
    assert any("ERR_UART_TIMEOUT_0x3F" in s for s in found(daemon, ws, "ERR_UART_TIMEOUT_0x3F"))
    assert history(root)[-1]["op"] == "restore" and history(root)[-1]["restores"] == forgot["run_id"]

    # a restore is a change too: restoring it forgets the entry again
    daemon.call("restore", {"workspace": ws, "run_id": restored["run_id"]})
    assert not any("ERR_UART_TIMEOUT_0x3F" in s for s in found(daemon, ws, "ERR_UART_TIMEOUT_0x3F"))


def test_restores_of_independent_forgets_do_not_conflict(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """Forget X, then Y: X's forget is restored alone (Y stays forgotten), in either order, and each restore is
    undone on its own too. Before, only the latest forget could be restored (MEMORY_CONFLICT)."""
    _, ws = workspace
    a = remember(daemon, ws, "alpha note")
    b = remember(daemon, ws, "bravo note")
    first = daemon.call("forget", {"workspace": ws, "id": a["id"]})
    second = daemon.call("forget", {"workspace": ws, "id": b["id"]})
    back_a = daemon.call("restore", {"workspace": ws, "run_id": first["run_id"]})
    assert found(daemon, ws, "alpha") and not found(daemon, ws, "bravo")
    daemon.call("restore", {"workspace": ws, "run_id": second["run_id"]})
    assert found(daemon, ws, "alpha") and found(daemon, ws, "bravo")
    daemon.call("restore", {"workspace": ws, "run_id": back_a["run_id"]})  # alpha forgotten again, bravo kept
    assert not found(daemon, ws, "alpha") and found(daemon, ws, "bravo")
    again = daemon.call("restore", {"workspace": ws, "run_id": first["run_id"]})  # its forget is in force again
    assert again["restored"] == first["run_id"] and found(daemon, ws, "alpha")


def test_a_second_restore_of_the_same_run_says_already_restored(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _, ws = workspace
    forgot = daemon.call("forget", {"workspace": ws, "id": remember(daemon, ws, "alpha note")["id"]})
    restored = daemon.call("restore", {"workspace": ws, "run_id": forgot["run_id"]})
    with pytest.raises(RemoteError) as info:
        daemon.call("restore", {"workspace": ws, "run_id": forgot["run_id"]})
    assert info.value.name == "MEMORY_CONFLICT" and "already restored" in str(info.value)
    assert restored["run_id"] in str(info.value) and f"restore {restored['run_id']}" in (info.value.hint or "")
    assert found(daemon, ws, "alpha")  # nothing changed


def test_restore_refuses_a_file_changed_since_and_names_the_later_change(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    first = compiled(daemon, ws, rule(observe(daemon, ws)))
    second = compiled(daemon, ws, rule(observe(daemon, ws, "again"), priority=20))
    with pytest.raises(RemoteError) as info:
        daemon.call("restore", {"workspace": ws, "run_id": first["run_id"]})
    assert info.value.name == "MEMORY_CONFLICT" and second["run_id"] in (info.value.hint or "")
    daemon.call("restore", {"workspace": ws, "run_id": second["run_id"]})
    daemon.call("restore", {"workspace": ws, "run_id": first["run_id"]})
    assert not (root / PROFILE).exists()


def test_restore_undoes_a_compile_apply(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    done = compiled(daemon, ws, rule(observe(daemon, ws)))
    assert (root / PROFILE).exists() and resolve(daemon, ws, "1.2.3")["facts"]
    restored = daemon.call("restore", {"workspace": ws, "run_id": done["run_id"]})
    assert {"path": PROFILE, "action": "delete"} in restored["writes"]
    assert not (root / PROFILE).exists()
    assert resolve(daemon, ws, "1.2.3")["facts"] == {}
    daemon.call("restore", {"workspace": ws, "run_id": restored["run_id"]})  # and back
    assert resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.flow_control"] == "rts_cts"


def test_unknown_ids_and_older_items(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    for method, params in (("forget", {"id": "ent_0000000000000000"}), ("restore", {"run_id": "forget_nope"})):
        with pytest.raises(RemoteError) as info:
            daemon.call(method, {"workspace": ws, **params})
        assert info.value.name in ("MEMORY_ITEM_NOT_FOUND", "MEMORY_RUN_NOT_FOUND") and info.value.hint
    # an item line from before these fields existed (or written by hand), and a torn line: read with defaults
    entry = remember(daemon, ws, "charlie note")
    sidecar = root / "data/memory/items.jsonl"
    sidecar.write_text(
        json.dumps({"id": entry["id"], "path": entry["path"], "heading": entry["heading"][3:]}) + "\n{torn",
        encoding="utf-8",
    )
    item = daemon.call("forget", {"workspace": ws, "id": entry["id"]})["item"]
    assert (item["confidence"], item["evidence"], item["metadata"], item["revision"]) == (1.0, [], {}, 1)
    assert not found(daemon, ws, "charlie")


def test_memoryctl_forget_and_restore(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    entry = remember(daemon, ws, "delta note")
    out = daemon.memoryctl("forget", entry["id"], "--reason", "typo", cwd=root)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split("memoryctl restore ")[1].split(")")[0]
    assert f"forgot {entry['id']}" in out.stdout
    out = daemon.memoryctl("restore", run_id, cwd=root)
    assert out.returncode == 0 and f"restored {run_id}" in out.stdout, out.stderr
    assert found(daemon, ws, "delta")


def test_forgetting_an_entry_longer_than_a_window_hides_all_of_it(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """Issue 19 §4: an entry longer than chunk_max_lines (40) is indexed in several windows; forget hid only the
    first, the rest stayed searchable (and injectable)."""
    _, ws = workspace
    body = "\n".join(f"step {n} of the bring-up" for n in range(90)) + "\nKQZTAILWORD at the very end"
    entry = remember(daemon, ws, "KQZHEADWORD long bring-up log\n" + body)
    kept = remember(daemon, ws, "KQZTAILWORD said again elsewhere")
    assert len(found(daemon, ws, "KQZTAILWORD")) == 2 and found(daemon, ws, "KQZHEADWORD")
    daemon.call("forget", {"workspace": ws, "id": entry["id"]})
    assert found(daemon, ws, "KQZHEADWORD") == []
    tail = found(daemon, ws, "KQZTAILWORD")
    assert len(tail) == 1 and "said again" in tail[0], tail
    assert "bring-up" not in context_text(daemon, ws, "KQZTAILWORD bring-up step")
    assert not [h for h in daemon.call("search", {"workspace": ws, "query": "bring-up step"})["hits"]]
    assert kept["id"] != entry["id"]


def test_timeline_shows_what_remember_wrote_and_what_a_forget_hid(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """issue 19 §3.11: remember entries are on the timeline, and a forget says what it forgot (id, path:line, its
    first line), not "forget: 1 file(s)"."""
    root, ws = workspace
    first = remember(daemon, ws, "串口 ERR_UART_TIMEOUT_0x3F 在开启流控后消失")
    second = remember(daemon, ws, "baud 921600 needs RTS/CTS")
    forgot = daemon.call("forget", {"workspace": ws, "id": first["id"]})
    events = daemon.call("timeline", {"workspace": ws})["events"]
    where = f"{first['path']}:{first['start_line']}"
    by_id = {e["id"]: e for e in events}
    assert by_id[first["id"]]["type"] == "remember" and by_id[second["id"]]["type"] == "remember", events
    assert by_id[first["id"]]["summary"] == f"{where} 串口 ERR_UART_TIMEOUT_0x3F 在开启流控后消失"
    assert by_id[first["id"]]["paths"] == [first["path"]]
    change = by_id[forgot["run_id"]]
    assert change["op"] == "forget"
    assert change["summary"] == f"forgot {first['id']} {where} 串口 ERR_UART_TIMEOUT_0x3F 在开启流控后消失", change
    assert events[0]["id"] == forgot["run_id"]  # newest first
    restored = daemon.call("restore", {"workspace": ws, "run_id": forgot["run_id"]})
    shown = daemon.memoryctl("timeline", cwd=root)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert f"{restored['run_id']}  undid {forgot['run_id']}: {first['id']} {where}" in lines[0], lines
    assert any(f"remember     {second['id']}  {second['path']}:{second['start_line']} baud" in line for line in lines)
    assert not any("file(s)" in line for line in lines), lines
    # --run-id keeps one run's observations only
    assert daemon.call("timeline", {"workspace": ws, "run_id": "run-x"})["events"] == []
