"""The reads the review page needs beside search, get and the rules' methods: files (the memory files the index
holds, in reading order), items (the entries remember wrote, forgotten ones marked), changes.show (a recorded change
as per-file diffs) and restore's dry run (what a restore would write, refused the same way)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memoryctl.rpc import RemoteError

from tests.conftest import Daemon
from tests.test_forget import remember
from tests.test_rules import compiled, history, observe, rule


def test_files_lists_memory_files_long_term_first_then_daily_newest_first(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    memory = root / "memory"
    (memory / "archive").mkdir()
    for name, text in [
        ("MEMORY.md", "## 长期\n- 串口 uses RTS/CTS\n"),
        ("INSIGHTS.md", "## Lessons\n- flaky bench\n"),
        ("2026-01-02.md", "## 2026-01-02\n- b\n"),
        ("2026-03-04.md", "## 2026-03-04\n- c\n"),
        ("archive/2025-12-01.md", "## 2025-12-01\n- a\n"),
    ]:
        (memory / name).write_text(text, encoding="utf-8")
    daemon.call("index", {"workspace": ws})
    listed = daemon.call("files", {"workspace": ws})
    paths = [f["path"] for f in listed["files"]]
    assert paths == [
        "memory/MEMORY.md",
        "memory/INSIGHTS.md",
        "memory/2026-03-04.md",
        "memory/2026-01-02.md",
        "memory/archive/2025-12-01.md",
    ]
    assert [f["kind"] for f in listed["files"]] == ["memory", "insights", "daily", "daily", "archive"]
    assert listed["total"] == 5 and listed["files"][0]["bytes"] == len("## 长期\n- 串口 uses RTS/CTS\n".encode())
    page = daemon.call("files", {"workspace": ws, "offset": 2, "limit": 2})
    assert [f["path"] for f in page["files"]] == paths[2:4] and page["total"] == 5


def test_items_mark_the_forgotten_and_page(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    made = [remember(daemon, ws, f"第 {n} 条 note number {n}") for n in range(3)]
    forgot = daemon.call("forget", {"workspace": ws, "id": made[1]["id"]})
    listed = daemon.call("items", {"workspace": ws, "path": made[0]["path"]})
    assert [i["id"] for i in listed["items"]] == [m["id"] for m in made]
    assert listed["total"] == 3 and listed["forgotten"] == 1
    assert [bool(i.get("deleted_at")) for i in listed["items"]] == [False, True, False]
    assert listed["items"][1]["deleted_run"] == forgot["run_id"]
    assert daemon.call("items", {"workspace": ws, "path": "memory/none.md"}) == {
        "items": [],
        "total": 0,
        "forgotten": 0,
    }
    page = daemon.call("items", {"workspace": ws, "offset": 2, "limit": 5})
    assert [i["id"] for i in page["items"]] == [made[2]["id"]]


def test_items_survive_hand_written_lines_of_any_shape(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    remember(daemon, ws, "a real entry")
    sidecar = root / "data/memory/items.jsonl"
    odd = [
        {"id": "ent_0123456789ab", "path": "memory/x.md", "heading": 7, "start_line": "three", "metadata": []},
        {"id": "ent_0123456789ac", "path": "memory/x.md", "heading": "h", "confidence": "high", "junk": 1},
    ]
    with sidecar.open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps(o) + "\n" for o in odd) + '{"torn": \n')
    listed = daemon.call("items", {"workspace": ws})
    assert listed["total"] == 3
    assert {i["id"]: i.get("start_line") for i in listed["items"]}["ent_0123456789ab"] is None


def test_changes_show_diffs_each_file_from_its_backup_to_what_the_change_left(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    _root, ws = workspace
    oid = observe(daemon, ws)
    first = compiled(daemon, ws, rule(oid, summary="first 串口 summary"))
    observe(daemon, ws, "again")
    second = compiled(daemon, ws, rule(oid, summary="second summary"))
    created = daemon.call("changes.show", {"workspace": ws, "run_id": first["run_id"]})
    assert created["op"] == "compile.apply" and created.get("restored_by") is None
    (only,) = created["files"]
    # what the first change left is known from the backup the second took
    assert only["action"] == "create" and only["after_known"] and "+summary: first 串口 summary" in only["diff"]
    updated = daemon.call("changes.show", {"workspace": ws, "run_id": second["run_id"]})
    diff = updated["files"][0]["diff"]
    assert "-summary: first 串口 summary" in diff and "+summary: second summary" in diff
    assert "changes" not in updated["record"] and updated["record"]["run_id"] == second["run_id"]
    undo = daemon.call("restore", {"workspace": ws, "run_id": second["run_id"]})
    assert daemon.call("changes.show", {"workspace": ws, "run_id": second["run_id"]})["restored_by"] == undo["run_id"]
    with pytest.raises(RemoteError) as missing:
        daemon.call("changes.show", {"workspace": ws, "run_id": "apply_nothing"})
    assert missing.value.data["name"] == "MEMORY_RUN_NOT_FOUND"


def test_a_change_whose_file_moved_on_says_its_after_is_unknown(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    entry = remember(daemon, ws, "note")
    forgot = daemon.call("forget", {"workspace": ws, "id": entry["id"]})
    tombstones = root / "data/memory/forgotten.json"
    tombstones.write_text(tombstones.read_text() + " ")  # by hand: no change recorded, no backup of what it left
    shown = daemon.call("changes.show", {"workspace": ws, "run_id": forgot["run_id"]})
    (only,) = shown["files"]
    assert only["after_known"] is False and only["diff"] == ""


def test_a_crafted_history_line_pointing_outside_is_shown_not_read(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    secret = root.parent / f"{root.name}-secret.txt"
    secret.write_text("do not show")
    line = {
        "op": "compile.apply",
        "ts": "2026-01-01T00:00:00+00:00",
        "run_id": "apply_crafted",
        "changes": [
            {"path": "../" + secret.name, "action": "update", "sha_after": None, "backup": None},
            {"path": "memory/MEMORY.md", "action": "update", "sha_after": "x", "backup": "../" + secret.name},
        ],
    }
    (root / "data/memory").mkdir(parents=True, exist_ok=True)
    with (root / "data/memory/history.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")
    shown = daemon.call("changes.show", {"workspace": ws, "run_id": "apply_crafted"})
    assert [f["after_known"] for f in shown["files"]] == [False, False]
    assert "do not show" not in json.dumps(shown)
    secret.unlink()


def test_restore_dry_run_shows_the_diff_writes_nothing_and_meets_the_same_conflicts(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    entry = remember(daemon, ws, "串口 flow control note")
    forgot = daemon.call("forget", {"workspace": ws, "id": entry["id"]})
    before = (root / "data/memory/forgotten.json").read_bytes()
    preview = daemon.call("restore", {"workspace": ws, "run_id": forgot["run_id"], "dry_run": True})
    assert preview["dry_run"] and preview.get("run_id") is None and preview["restored"] == forgot["run_id"]
    assert [w["path"] for w in preview["writes"]] == ["data/memory/forgotten.json"]
    assert entry["id"] in preview["diffs"][0]["diff"] and preview["diffs"][0]["diff"].count("\n-") >= 1
    assert (root / "data/memory/forgotten.json").read_bytes() == before
    assert [e["op"] for e in history(root)] == ["forget"]
    daemon.call("restore", {"workspace": ws, "run_id": forgot["run_id"]})
    with pytest.raises(RemoteError) as again:
        daemon.call("restore", {"workspace": ws, "run_id": forgot["run_id"], "dry_run": True})
    assert again.value.data["name"] == "MEMORY_CONFLICT"


def test_memoryctl_restore_dry_run_prints_the_diff_and_writes_nothing(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    entry = remember(daemon, ws, "串口 note to forget")
    forgot = daemon.call("forget", {"workspace": ws, "id": entry["id"]})
    out = daemon.memoryctl("restore", forgot["run_id"], "--dry-run", cwd=root)
    assert out.returncode == 0, out.stderr
    assert "dry run: nothing written" in out.stdout and f'-  "{entry["id"]}"' in out.stdout
    assert [e["op"] for e in history(root)] == ["forget"]


def test_timeline_names_the_kind_of_a_curation_change(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    (root / "memory" / "2025-01-02.md").write_text("## 2025-01-02\n- 旧 old\n", encoding="utf-8")
    daemon.call("index", {"workspace": ws})
    run = daemon.call("lifecycle.archive", {"workspace": ws})
    (newest,) = daemon.call("timeline", {"workspace": ws, "limit": 1})["events"]
    assert newest["id"] == run["run_id"] and newest["type"] == "change" and newest["kind"] == "archive"
    # notes remembered since do not push the change out of a timeline of changes only
    for n in range(3):
        daemon.call("remember", {"workspace": ws, "text": f"note {n} 之后的笔记"})
    (change,) = daemon.call("timeline", {"workspace": ws, "limit": 1, "types": ["change"]})["events"]
    assert change["id"] == run["run_id"]
    assert {e["type"] for e in daemon.call("timeline", {"workspace": ws})["events"]} == {"change", "remember"}
    remembered = daemon.call("timeline", {"workspace": ws, "types": ["remember"]})["events"]
    assert len(remembered) == 3 and {e["type"] for e in remembered} == {"remember"}


@pytest.mark.anyio
async def test_a_review_read_waits_for_the_change_under_way(tmp_path: Path) -> None:
    """A change writes its history line before the rule set reloads: a review read in between showed a rule older
    than the history listing its revision (a hand edit's ``rules show`` said revision 1 beside history's 2)."""
    import threading

    import anyio
    import anyio.lowlevel

    from memoryd.rules.service import RulesService
    from memoryd.settings import RulesSettings
    from memoryd.workspaces import Workspace

    rules = RulesService(RulesSettings(), watched=False)
    ws = Workspace("ws_review_wait", tmp_path, "review-wait", "2026-11-25T00:00:00Z")
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def change(_: object) -> None:
        entered.set()
        release.wait(10)
        order.append("change")

    async def read() -> None:
        await rules.candidates(ws)
        order.append("read")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rules.locked, ws, change)
            await anyio.to_thread.run_sync(entered.wait)
            tg.start_soon(read)
            lock = rules._by_id[ws.id].lock
            while lock.statistics().tasks_waiting == 0:
                await anyio.lowlevel.checkpoint()
            assert order == []
            release.set()
    assert order == ["change", "read"]
