"""Search hits name the remembered entry they lie in (`item_id`), so a note found weeks later can be forgotten by
the id the hit shows: through the wire, `memoryctl search` (text and --json) and the MCP tool."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Daemon


def test_a_hit_carries_its_entry_id_and_forget_takes_it(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    first = daemon.call("remember", {"workspace": ws, "text": "串口超时 ERR_UART_TIMEOUT_0x3F: turn on RTS/CTS"})
    second = daemon.call("remember", {"workspace": ws, "text": "bench 3 needs the USB hub on port 2"})
    long = daemon.call(
        "remember", {"workspace": ws, "text": "\n".join(f"step {n} of the flash recipe" for n in range(80)) + " zq"}
    )
    (root / "memory" / "MEMORY.md").write_text("## Devices\n- KX-200 USB hub on port 2\n", encoding="utf-8")
    daemon.call("index", {"workspace": ws})

    hits = daemon.call("search", {"workspace": ws, "query": "ERR_UART_TIMEOUT_0x3F"})["hits"]
    assert hits[0].get("item_id") == first["id"]
    by_path = {h["path"]: h for h in daemon.call("search", {"workspace": ws, "query": "USB hub"})["hits"]}
    assert "item_id" not in by_path["memory/MEMORY.md"]  # not written by remember
    assert by_path[second["path"]].get("item_id") == second["id"]
    tail = daemon.call("search", {"workspace": ws, "query": "zq"})["hits"]
    assert tail and tail[0].get("item_id") == long["id"]  # a later window of a long entry names the same entry

    text = daemon.memoryctl("search", "ERR_UART_TIMEOUT_0x3F", cwd=root)
    assert text.returncode == 0 and f"[{first['id']}]" in text.stdout.splitlines()[0], text.stdout
    as_json = json.loads(daemon.memoryctl("--json", "search", "USB hub", cwd=root).stdout)
    item_id = next(h.get("item_id") for h in as_json["data"]["hits"] if h.get("item_id"))
    assert item_id == second["id"]
    forgot = daemon.memoryctl("forget", item_id, cwd=root)
    assert forgot.returncode == 0, forgot.stderr
    after = daemon.call("search", {"workspace": ws, "query": "USB hub"})["hits"]
    assert [h["path"] for h in after] == ["memory/MEMORY.md"]
