"""lifecycle.archive / lifecycle.ttl through the real daemon: dry runs touch nothing, real runs are one recorded change
each that restore undoes byte for byte (and a restore of the restore redoes), a crash in the middle is finished or
undone on restart, hostile files are skipped, archived files are searched only when asked."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from memoryctl.rpc import ClientError, RemoteError

from tests.conftest import Daemon, short_tmp, wait_for

TODAY = date(2026, 3, 1)
ROWS = "data/memory/observability/lifecycle.jsonl"


def day(n: int) -> str:
    """The day ``n`` days before TODAY."""
    return (TODAY - timedelta(days=n)).isoformat()


def daily(root: Path, n: int, text: str | None = None, *, archived: bool = False) -> Path:
    name = day(n)
    path = root / "memory" / ("archive" if archived else "") / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = text or f"- 串口 note of {name} KQZDAY{n}\n"
    path.write_bytes(f"## {name}\n\n## {name} 09:30 — note\n{body}".encode())
    return path


def tree(root: Path, *, bookkeeping: bool = False) -> dict[str, str]:
    """rel path → sha256 of every file under memory/ (and with ``bookkeeping`` the whole data/memory/ but the
    observability rows), the lock file aside."""
    out = {}
    trees = ["memory", "data/memory"] if bookkeeping else ["memory"]
    for top in trees:
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and not rel.endswith(".memoryd.lock") and not rel.startswith("data/memory/observ"):
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run(d: Daemon, ws: str, action: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call(f"lifecycle.{action}", {"workspace": ws, "now": TODAY.isoformat(), **params})
    return result


def history(root: Path) -> list[dict[str, Any]]:
    path = root / "data/memory/history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def rows(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / ROWS).read_text().splitlines()]


def found(d: Daemon, ws: str, query: str, **params: Any) -> list[str]:
    hits = d.call("search", {"workspace": ws, "query": query, "mode": "bm25", "limit": 50, **params})["hits"]
    return sorted({h["path"] for h in hits})


def test_archive_dry_run_run_restore_and_restore_of_the_restore(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    old = [daily(root, n) for n in (40, 35, 31)]
    young = [daily(root, n) for n in (30, 3, 0)]
    (root / "memory/MEMORY.md").write_text("## 设备\n- KX-200 needs RTS/CTS\n", encoding="utf-8")
    (root / "memory/notes-2020-01-01.md").write_text("not a daily file\n")
    before = tree(root)

    dry = run(daemon, ws, "archive", dry_run=True)
    assert dry["dry_run"] and not dry["recorded"] and dry["days"] == {"archive_after_days": 30}
    moved = [f"memory/{p.name}" for p in old]
    expected = sorted(
        [(m, p.stat().st_size, "delete") for m, p in zip(moved, old, strict=True)]
        + [
            (m.replace("memory/", "memory/archive/"), p.stat().st_size, "create")
            for m, p in zip(moved, old, strict=True)
        ]
    )
    assert sorted((f["path"], f["bytes"], f["action"]) for f in dry["files"]) == expected
    assert dry["bytes"] == 2 * sum(p.stat().st_size for p in old)
    assert tree(root, bookkeeping=True) == {**before}  # nothing touched: no history, backups or journal either
    assert rows(root)[-1] == {**rows(root)[-1], "run_id": dry["run_id"], "action": "archive", "dry_run": True}

    wait_for(lambda: found(daemon, ws, "KQZDAY40") == ["memory/" + old[0].name])
    done = run(daemon, ws, "archive")
    assert done["recorded"] and not done["dry_run"]
    assert sorted((f["path"], f["bytes"], f["action"]) for f in done["files"]) == expected
    assert not any(p.exists() for p in old) and all(p.exists() for p in young)
    for path in old:
        assert (root / "memory/archive" / path.name).read_bytes().decode("utf-8").startswith(f"## {path.stem}")
    entry = history(root)[-1]
    assert entry["run_id"] == done["run_id"] and entry["kind"] == "archive" and entry["op"] == "lifecycle.archive"
    assert len(entry["changes"]) == 6
    last = rows(root)[-1]
    assert last["run_id"] == done["run_id"] and not last["dry_run"] and last["files"] == 6
    assert last["bytes"] == done["bytes"] and last["ts"].endswith("Z")

    # Archived: indexed, read with get, searched only when asked.
    assert found(daemon, ws, "KQZDAY40") == []
    assert found(daemon, ws, "KQZDAY40", include_archive=True) == [f"memory/archive/{old[0].name}"]
    assert found(daemon, ws, "KQZDAY3") == [f"memory/{young[1].name}"]
    got = daemon.call("get", {"workspace": ws, "path": f"memory/archive/{old[0].name}"})
    assert "串口" in got["text"]
    archived = tree(root)

    undo = daemon.call("restore", {"workspace": ws, "run_id": done["run_id"]})
    assert undo["restored"] == done["run_id"]
    assert tree(root) == before  # every file back byte for byte, the archived copies gone
    assert not (root / "memory/archive").exists() or not any((root / "memory/archive").iterdir())
    assert found(daemon, ws, "KQZDAY40") == [f"memory/{old[0].name}"]
    assert history(root)[-1]["op"] == "restore" and history(root)[-1]["restores"] == done["run_id"]

    redo = daemon.call("restore", {"workspace": ws, "run_id": undo["run_id"]})
    assert tree(root) == archived
    assert found(daemon, ws, "KQZDAY40") == []
    daemon.call("restore", {"workspace": ws, "run_id": redo["run_id"]})
    assert tree(root) == before

    again = run(daemon, ws, "archive", older_than_days=0)  # everything before today
    assert {f["path"] for f in again["files"] if f["action"] == "delete"} == {
        f"memory/{p.name}" for p in [*old, *young[:2]]
    }
    assert young[2].exists()


def test_nothing_to_archive_records_nothing(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    daily(root, 1)
    result = run(daemon, ws, "archive")
    assert result["files"] == [] and not result["recorded"]
    assert history(root) == [] and rows(root)[-1]["files"] == 0
    with pytest.raises(RemoteError) as missing:
        daemon.call("restore", {"workspace": ws, "run_id": result["run_id"]})
    assert missing.value.name == "MEMORY_RUN_NOT_FOUND"


INSIGHTS = (
    "# Insights\n"
    "<!-- kept by memoryd -->\n"
    "\r\n"
    "## 调试\r\n"
    "- 串口超时是流控问题 <!-- seen: {old} -->\r\n"
    "  continued on a second line\r\n"
    "- recent lesson <!-- seen: {new} -->\n"
    "- a bullet without a mark never expires\n"
    "\n"
    "```\n"
    "- inside a fence <!-- seen: {old} -->\n"
    "```\n"
    "## Tools\n"
    "* old star bullet <!-- seen: {old} -->\n"
    "- bad date <!-- seen: 2026-02-31 -->\n"
    "- last line, no newline <!-- seen: {old} -->"
)


def test_ttl_expires_archived_days_and_insights_bullets_and_restore_brings_them_back(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    expired = [daily(root, n, archived=True) for n in (400, 366)]
    kept = [daily(root, n, archived=True) for n in (365, 100)]
    live = daily(root, 400)  # not archived: TTL is for archived days only
    insights = root / "memory/INSIGHTS.md"
    insights.write_bytes(INSIGHTS.format(old=day(61), new=day(60)).encode())
    before = tree(root)

    dry = run(daemon, ws, "ttl", dry_run=True)
    assert dry["days"] == {"archive_ttl_days": 365, "insights_ttl_days": 60}
    assert tree(root, bookkeeping=True) == before
    result = run(daemon, ws, "ttl")
    assert result["files"] == dry["files"]
    by_path = {f["path"]: f for f in result["files"]}
    assert set(by_path) == {f"memory/archive/{p.name}" for p in expired} | {"memory/INSIGHTS.md"}
    assert by_path["memory/INSIGHTS.md"]["action"] == "update" and by_path["memory/INSIGHTS.md"]["bullets"] == 3
    assert not any(p.exists() for p in expired) and all(p.exists() for p in kept) and live.exists()
    expected = (
        "# Insights\n<!-- kept by memoryd -->\n\r\n## 调试\r\n"
        f"- recent lesson <!-- seen: {day(60)} -->\n"
        "- a bullet without a mark never expires\n\n"
        f"```\n- inside a fence <!-- seen: {day(61)} -->\n```\n"
        "## Tools\n- bad date <!-- seen: 2026-02-31 -->\n"
    )
    assert insights.read_bytes().decode("utf-8") == expected
    assert by_path["memory/INSIGHTS.md"]["bytes"] == len(INSIGHTS.format(old=day(61), new=day(60)).encode()) - len(
        expected.encode()
    )
    assert history(root)[-1]["kind"] == "ttl"

    daemon.call("restore", {"workspace": ws, "run_id": result["run_id"]})
    assert tree(root) == before

    shorter = run(daemon, ws, "ttl", older_than_days=59, dry_run=True)  # both TTLs for this run
    assert {f["path"] for f in shorter["files"]} == {
        *(f"memory/archive/{p.name}" for p in [*expired, *kept]),
        "memory/INSIGHTS.md",
    }
    assert [f["bullets"] for f in shorter["files"] if f["path"] == "memory/INSIGHTS.md"] == [4]


def test_hostile_files_are_skipped_and_left_as_they_are(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    outside = short_tmp("out") / "secret.md"
    outside.write_text("outside the workspace\n")
    memory = root / "memory"
    (memory / f"{day(50)}.md").symlink_to(outside)
    os.mkfifo(memory / f"{day(51)}.md")
    (memory / f"{day(52)}.md").write_bytes(b"## bad\n\xff\xfe not utf-8\n")
    clash = daily(root, 53)
    (memory / "archive").mkdir()
    (memory / "archive" / clash.name).write_text("another text\n")
    (memory / f"{day(54)}.md").mkdir()
    (memory / "2026-02-31.md").write_text("named like a day, not one\n")
    fine = daily(root, 55)
    before = tree(root)

    result = run(daemon, ws, "archive")
    assert [f["path"] for f in result["files"]] == [f"memory/{fine.name}", f"memory/archive/{fine.name}"]
    reasons = {s["path"]: s["reason"] for s in result["skipped"]}
    assert "symlink" in reasons[f"memory/{day(50)}.md"]
    assert "not a regular file" in reasons[f"memory/{day(51)}.md"]
    assert "UTF-8" in reasons[f"memory/{day(52)}.md"]
    assert "other content" in reasons[f"memory/{clash.name}"]
    assert "directory" in reasons[f"memory/{day(54)}.md"]
    assert outside.read_text() == "outside the workspace\n"
    after = tree(root)
    del before[f"memory/{fine.name}"]
    del after[f"memory/archive/{fine.name}"]
    assert after == before

    outside.write_text(f"- a stale bullet <!-- seen: {day(400)} -->\n")
    (memory / "INSIGHTS.md").symlink_to(outside)  # never followed, never rewritten
    (memory / "archive" / f"{day(500)}.md").symlink_to(outside)
    expired = run(daemon, ws, "ttl")
    assert expired["files"] == [] and not expired["recorded"]
    reasons = {s["path"]: s["reason"] for s in expired["skipped"]}
    assert "symlink" in reasons[f"memory/archive/{day(500)}.md"] and "memory/INSIGHTS.md" in reasons
    assert outside.read_text() == f"- a stale bullet <!-- seen: {day(400)} -->\n"
    (memory / "INSIGHTS.md").unlink()
    (memory / "INSIGHTS.md").write_bytes(b"- \xff stale <!-- seen: 2020-01-01 -->\n")
    assert "UTF-8" in {s["path"]: s["reason"] for s in run(daemon, ws, "ttl")["skipped"]}["memory/INSIGHTS.md"]


def test_a_run_is_bounded_and_the_rest_waits(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(False)
    d.env["MEMORYD_LIFECYCLE_MAX_FILES"] = "4"
    d.start()
    root = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    for n in range(40, 45):
        daily(root, n)
    first = run(d, ws, "archive")
    assert len(first["files"]) == 4 and first["remaining"] == 3
    second = run(d, ws, "archive")
    assert len(second["files"]) == 4 and second["remaining"] == 1
    assert run(d, ws, "archive")["remaining"] == 0
    assert len(list((root / "memory/archive").iterdir())) == 5


@pytest.mark.parametrize("step", ["backups", "journal", "write", "history", "done"])
def test_a_crash_in_the_middle_of_an_archive_is_repaired_on_restart(daemon_factory: Any, step: str) -> None:
    d: Daemon = daemon_factory()
    root = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    for n in range(31, 41):
        daily(root, n, f"- 第{n}天 KQZCRASH{n}\n")
    before = tree(root)
    d.stop()
    d.env["MEMORYD_CRASH_AT"] = step
    d.start()
    with pytest.raises((ClientError, RemoteError)):
        run(d, ws, "archive")
    assert d.proc is not None and d.proc.wait(10) == 86
    d.stop()
    del d.env["MEMORYD_CRASH_AT"]
    d.start()
    d.call("status", {"workspace": ws})
    assert not list((root / "data/memory/journal").glob("*.json"))
    if step == "backups":  # before the commit point: as if never run
        assert tree(root) == before and history(root) == []
        result = run(d, ws, "archive")
        assert len(result["files"]) == 20
    else:  # after it: finished, recorded once
        assert len(history(root)) == 1 and history(root)[0]["kind"] == "archive"
        assert sorted(p.name for p in (root / "memory/archive").iterdir()) == sorted(
            Path(p).name for p in before if p.startswith("memory/")
        )
        assert not any((root / "memory").glob("2*.md"))
    run_id = history(root)[-1]["run_id"]
    d.call("restore", {"workspace": ws, "run_id": run_id})
    assert tree(root) == before
    wait_for(lambda: found(d, ws, "KQZCRASH35") == [f"memory/{day(35)}.md"])


def test_lifecycle_refuses_bad_params(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    for params in ({"older_than_days": -1}, {"now": "2026-02-31"}, {"dry_run": "yes"}, {"extra": 1}):
        with pytest.raises(RemoteError) as bad:
            daemon.call("lifecycle.archive", {"workspace": ws, **params})
        assert bad.value.name == "INVALID_PARAMS"


def test_automatic_runs_are_dry_unless_applied(daemon_factory: Any) -> None:
    for apply in (False, True):
        d: Daemon = daemon_factory(False)
        d.env["MEMORYD_LIFECYCLE_AUTO"] = "true"
        d.env["MEMORYD_LIFECYCLE_AUTO_APPLY"] = "true" if apply else "false"
        d.env["MEMORYD_LIFECYCLE_AUTO_INTERVAL_HOURS"] = "0.0003"  # about a second
        d.start()
        root = short_tmp("ws")
        # the automatic runs count from the real today: archived, not expired
        old = daily(root, (TODAY - date.today()).days + 100)
        d.call("workspace.add", {"path": str(root)})
        wait_for(lambda: (root / ROWS).exists() and len(rows(root)) >= 2, timeout=20)  # noqa: B023
        first = rows(root)[:2]
        assert [r["action"] for r in first] == ["archive", "ttl"]
        assert all(r["dry_run"] is (not apply) for r in first)
        assert old.exists() is (not apply)
        assert (root / "memory/archive" / old.name).exists() is apply
        d.stop()


def test_memoryctl_archive_ttl_restore_and_search_archive(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ws = workspace
    real = date.today()
    old = root / "memory" / f"{real - timedelta(days=45)}.md"
    old.write_text(f"## {old.stem}\n\n## {old.stem} 10:00 — note\n- 归档 KQZCLI note\n", encoding="utf-8")
    dry = daemon.memoryctl("archive", "--dry-run", "--older-than", "40", cwd=root)
    assert dry.returncode == 0, dry.stderr
    assert "dry run (archive_after_days 40): would touch 2 files" in dry.stdout
    assert f"delete  memory/{old.name}" in dry.stdout and "run it: memoryctl archive --older-than 40" in dry.stdout
    assert old.exists()
    done = daemon.memoryctl("archive", "--json", cwd=root)
    data = json.loads(done.stdout)["data"]
    assert data["recorded"] and {f["action"] for f in data["files"]} == {"delete", "create"}
    assert not old.exists()
    assert "KQZCLI" not in daemon.memoryctl("search", "KQZCLI", cwd=root).stdout
    assert f"memory/archive/{old.name}" in daemon.memoryctl("search", "KQZCLI", "--archive", cwd=root).stdout
    nothing = daemon.memoryctl("ttl", cwd=root)
    assert nothing.returncode == 0 and "nothing to ttl (archive_ttl_days 365, insights_ttl_days 60)" in nothing.stdout
    back = daemon.memoryctl("restore", data["run_id"], cwd=root)
    assert back.returncode == 0 and f"delete    memory/archive/{old.name}" in back.stdout
    assert old.exists()
    bad = daemon.memoryctl("archive", "--older-than", "-3", cwd=root)
    assert bad.returncode == 2 and "--older-than" in bad.stderr


def test_status_shows_a_long_change_as_it_is_written(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """What memoryctl's progress bar draws: status's rules.change while a run of 1,500 files is written."""
    import threading

    root, ws = workspace
    for n in range(31, 1531):
        daily(root, n)
    seen: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: seen.append(run(daemon, ws, "archive")))
    worker.start()
    changes = []
    while worker.is_alive():
        change = daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"].get("change")
        if change is not None:
            changes.append(change)
    worker.join()
    assert seen and len(seen[0]["files"]) == 3000
    assert changes and all(c["op"] == "lifecycle.archive" and 0 <= c["done"] <= c["total"] == 6000 for c in changes)
    assert daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"].get("change") is None


def test_the_progress_bar_of_a_long_restore(
    daemon: Daemon, workspace: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from memoryctl.progress import change_with_progress
    from memoryctl.rpc import Connection

    root, ws = workspace
    for n in range(31, 1531):
        daily(root, n)
    before = tree(root)
    done = run(daemon, ws, "archive")
    with Connection(str(daemon.socket), 60.0) as conn:
        result = change_with_progress(conn, "restore", {"workspace": ws, "run_id": done["run_id"]})
    assert result["restored"] == done["run_id"] and tree(root) == before
    drawn = capsys.readouterr().err
    assert "restore [" in drawn and "/6000 files" in drawn


def test_an_identical_archived_copy_and_backups_as_links(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """A day whose identical copy is already archived only loses its daily file; a backup of a file of one name is
    a second name of its bytes (no copy written), one of a file with other names a copy (its other name may be
    written in place)."""
    root, ws = workspace
    twin = daily(root, 40)
    (root / "memory/archive").mkdir()
    (root / "memory/archive" / twin.name).write_bytes(twin.read_bytes())
    linked = daily(root, 41)
    other_name = root / "memory/elsewhere.md"
    os.link(linked, other_name)
    single = daily(root, 42)
    inode = single.stat().st_ino
    before = tree(root)
    done = run(daemon, ws, "archive")
    actions = {f["path"]: f["action"] for f in done["files"]}
    assert actions[f"memory/{twin.name}"] == "delete" and f"memory/archive/{twin.name}" not in actions
    backups = root / "data/memory/backups" / done["run_id"] / "memory"
    assert (backups / single.name).stat().st_ino == inode  # the bytes kept under a second name
    assert (backups / linked.name).stat().st_ino != other_name.stat().st_ino  # a copy
    other_name.write_text("written in place through the other name\n")
    assert (backups / linked.name).read_bytes().startswith(f"## {linked.stem}".encode())
    daemon.call("restore", {"workspace": ws, "run_id": done["run_id"]})
    after = tree(root)
    assert after.pop("memory/elsewhere.md") != before.pop("memory/elsewhere.md")
    assert after == before  # the twin's archived copy stays, as it was before the run
