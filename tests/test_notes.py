"""Markdown memory through the real daemon: remember, search, get, index, validate, isolation, recovery."""

from __future__ import annotations

import os
import re
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memoryctl.rpc import RemoteError

from tests.conftest import Daemon, daily_logs, short_tmp, wait_for


def today_file(ws_path: Path) -> Path:
    return ws_path / "memory" / f"{datetime.now().astimezone().strftime('%Y-%m-%d')}.md"


def search(daemon: Daemon, ws: str, query: str, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = daemon.call("search", {"workspace": ws, "query": query, **extra})
    return result


def test_remember_writes_the_seed_format(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    first = daemon.call(
        "remember",
        {
            "workspace": ws,
            "text": "jobs store 放到 ~/.config/msgcode/cron/jobs.json",
            "type": "decision",
            "reason": "daemon 可恢复",
            "followup": "实现 job status",
        },
    )
    second = daemon.call(
        "remember",
        {"workspace": str(path / "memory"), "text": "imsg rpc send 临时不可用\n## not a heading", "type": "event"},
    )
    text = today_file(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    day = datetime.now().astimezone().strftime("%Y-%m-%d")
    assert lines[0] == f"## {day}"
    assert text.count(f"## {day}\n") == 1
    assert re.fullmatch(rf"## {day} \d\d:\d\d — decision", lines[first["start_line"] - 1])
    assert lines[first["start_line"]] == "- jobs store 放到 ~/.config/msgcode/cron/jobs.json"
    assert "- Reason: daemon 可恢复" in lines and "- Follow-up: 实现 job status" in lines
    assert first["lines"] == 4 and first["path"] == f"memory/{day}.md"
    assert re.fullmatch(rf"## {day} \d\d:\d\d — event", lines[second["start_line"] - 1])
    assert "  \\## not a heading" in lines  # indented and escaped: never a heading (tests/test_remember.py)
    assert first["id"] < second["id"] and first["id"].startswith("ent_")
    got = daemon.call(
        "get", {"workspace": ws, "path": second["path"], "from_line": second["start_line"], "lines": second["lines"]}
    )
    assert got["text"].startswith(f"## {day}") and "imsg rpc send" in got["text"]


def test_dry_run_writes_nothing(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    planned = daemon.call("remember", {"workspace": ws, "text": "maybe", "dry_run": True})
    assert planned["dry_run"] is True and "— note" in planned["text"] and planned["start_line"] == 3
    assert not today_file(path).exists()


def test_private_spans_are_stripped(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    daemon.call("remember", {"workspace": ws, "text": "token is <private>hunter2</private> rotated; <PRIVATE>x"})
    text = today_file(path).read_text()
    assert "hunter2" not in text and "rotated" in text and "x" not in text.split("rotated")[1]
    with pytest.raises(RemoteError) as info:
        daemon.call("remember", {"workspace": ws, "text": "<private>only secret</private>"})
    assert info.value.name == "MEMORY_EMPTY"


def test_too_large_is_refused(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _, ws = workspace
    with pytest.raises(RemoteError) as info:
        daemon.call("remember", {"workspace": ws, "text": "x" * (64 * 1024 + 1)})
    assert info.value.name == "MEMORY_TOO_LARGE"


def test_scope_all_writes_are_forbidden(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _, ws = workspace
    with pytest.raises(RemoteError) as info:
        daemon.call("remember", {"workspace": ws, "scope": "all", "text": "x", "owner_token": daemon.owner_token()})
    assert info.value.name == "MEMORY_FORBIDDEN"


def test_concurrent_remembers_never_interleave(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(10):
                daemon.call("remember", {"workspace": ws, "text": f"writer {n} entry {i}\nsecond line {n}-{i}"})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = today_file(path).read_text()
    for n in range(6):
        for i in range(10):
            assert f"- writer {n} entry {i}\n  second line {n}-{i}\n" in text
    assert text.count("— note") == 60


def test_search_finds_chinese_identifiers_and_questions(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    (path / "memory" / "MEMORY.md").write_text(
        "## 设备\n- 今天调试发现串口超时问题，固件版本升级后恢复\n\n"
        "## Errors\n- ERR_UART_TIMEOUT_0x3F means the UART FIFO overflowed; see src/drivers/uart.c\n\n"
        "## Config\n- facts.transport.baud is 115200 on KX-200\n\n"
        "## Misc\n- the uart timeout was discussed, and errors in general\n",
        encoding="utf-8",
    )
    daemon.call("index", {"workspace": ws})
    for query, expected in [
        ("串口超时", "## 设备"),
        ("串口", "## 设备"),
        ("固件版本", "## 设备"),
        ("ERR_UART_TIMEOUT_0x3F", "## Errors"),
        ("facts.transport.baud", "## Config"),
        ("src/drivers/uart.c", "## Errors"),
        ("what does ERR_UART_TIMEOUT_0x3F mean?", "## Errors"),
        ("which baud rate does the KX-200 use", "## Config"),
    ]:
        hits = search(daemon, ws, query)["hits"]
        assert hits and hits[0]["heading"] == expected, (query, hits[:2])
        assert hits[0]["workspace_id"] == ws and hits[0]["path"] == "memory/MEMORY.md"
        hit = hits[0]
        section = daemon.call(
            "get",
            {
                "workspace": ws,
                "path": hit["path"],
                "from_line": hit["section_start_line"],
                "lines": hit["section_lines"],
            },
        )["text"].splitlines()
        assert section[0] == expected  # the section the passage is in, from its heading
        passage = daemon.call(
            "get", {"workspace": ws, "path": hit["path"], "from_line": hit["start_line"], "lines": hit["lines"]}
        )["text"].splitlines()
        assert passage == section[hit["start_line"] - hit["section_start_line"] :][: hit["lines"]]
        assert passage[0].startswith("- ")  # the bullet that answers, not the heading


def assert_well_formed(result: dict[str, Any]) -> None:
    """A search answer whose every hit names lines inside its section, ranked best first."""
    assert isinstance(result["stale"], bool) and isinstance(result["pending"], list)
    scores = [h["score"] for h in result["hits"]]
    assert scores == sorted(scores, reverse=True)
    for hit in result["hits"]:
        assert hit["path"].endswith((".md", ".yaml", ".yml")) and hit["lines"] >= 1
        assert hit["section_start_line"] <= hit["start_line"]
        assert hit["start_line"] + hit["lines"] <= hit["section_start_line"] + hit["section_lines"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_any_typed_text_searches_without_error(daemon: Daemon, query: str) -> None:
    ws = _shared_ws(daemon)
    result = search(daemon, ws, query)
    assert_well_formed(result)


_WS_CACHE: dict[int, str] = {}


def _shared_ws(daemon: Daemon) -> str:
    key = id(daemon)
    if key not in _WS_CACHE:
        path = short_tmp("ws")
        (path / "memory").mkdir()
        (path / "memory" / "MEMORY.md").write_text('## Notes\n- hello world 你好 "quoted" AND NEAR(x) -y*\n')
        _WS_CACHE[key] = daemon.call("workspace.add", {"path": str(path)})["workspace_id"]
        daemon.call("index", {"workspace": _WS_CACHE[key]})
    return _WS_CACHE[key]


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        "(",
        ")",
        "AND",
        "OR NOT",
        "NEAR(a b)",
        "*",
        "-",
        ":",
        "^x",
        "col:val",
        "🙂🚀",
        "x" * 10_000,
        "a AND (b OR",
        "\x00",
        "   ",
        "'",
        "\\",
    ],
)
def test_hostile_queries(daemon: Daemon, workspace: tuple[Path, str], query: str) -> None:
    path, ws = workspace
    result = search(daemon, ws, query)
    assert_well_formed(result)
    files = {p.relative_to(path).as_posix() for p in path.rglob("*.md")}
    assert {h["path"] for h in result["hits"]} <= files


def test_isolation_both_ways(daemon: Daemon) -> None:
    a, b = short_tmp("wsa"), short_tmp("wsb")
    ws_a = daemon.call("workspace.add", {"path": str(a)})["workspace_id"]
    ws_b = daemon.call("workspace.add", {"path": str(b)})["workspace_id"]
    daemon.call("remember", {"workspace": ws_a, "text": "shared words alpha secret-a 串口"})
    daemon.call("remember", {"workspace": ws_b, "text": "shared words beta secret-b 串口"})
    hits_a = search(daemon, ws_a, "shared words 串口")["hits"]
    hits_b = search(daemon, ws_b, "shared words 串口")["hits"]
    assert hits_a and all(h["workspace_id"] == ws_a and "secret-b" not in h["snippet"] for h in hits_a)
    assert hits_b and all(h["workspace_id"] == ws_b and "secret-a" not in h["snippet"] for h in hits_b)
    b_file = next((b / "memory").glob("*.md"))
    with pytest.raises(RemoteError) as info:
        daemon.call("get", {"workspace": ws_a, "path": str(b_file)})
    assert info.value.name == "MEMORY_PATH_TRAVERSAL"
    with pytest.raises(RemoteError):
        daemon.call("get", {"workspace": ws_a, "path": f"../{b.name}/memory/{b_file.name}"})
    # the owner view sees both, marks each hit's workspace, and needs the token
    with pytest.raises(RemoteError) as info:
        daemon.call("search", {"scope": "all", "query": "shared"})
    assert info.value.name == "MEMORY_FORBIDDEN"
    both = daemon.call("search", {"scope": "all", "query": "shared words", "owner_token": daemon.owner_token()})
    assert {h["workspace_id"] for h in both["hits"]} == {ws_a, ws_b}
    assert both["scope"] == "all"
    # separate index files
    state = daemon.home / "state" / "workspaces"
    assert (state / ws_a / "index.sqlite").exists() and (state / ws_b / "index.sqlite").exists()


def test_get_is_confined(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    outside = short_tmp("out")
    (outside / "secret.md").write_text("secret\n")
    (path / "memory" / "link.md").symlink_to(outside / "secret.md")
    (path / "memory" / "linkdir").symlink_to(outside)
    (path / "memory" / "notes.txt").write_text("text\n")
    (path / "memory" / "dir.md").mkdir()
    (path / "memory" / "ok.md").write_text("one\ntwo\nthree\n")
    (path / "README.md").write_text("readme\n")
    cases = {
        "../../etc/passwd": "MEMORY_PATH_TRAVERSAL",
        "/etc/passwd": "MEMORY_PATH_TRAVERSAL",
        str(outside / "secret.md"): "MEMORY_PATH_TRAVERSAL",
        "memory/link.md": "MEMORY_PATH_TRAVERSAL",
        "memory/linkdir/secret.md": "MEMORY_PATH_TRAVERSAL",
        "memory/notes.txt": "MEMORY_PATH_TRAVERSAL",
        "memory/ok.md\x00.txt": "MEMORY_PATH_TRAVERSAL",
        "memory": "MEMORY_PATH_TRAVERSAL",
        "README.md": "MEMORY_PATH_TRAVERSAL",
        "memory/dir.md": "MEMORY_FILE_NOT_FOUND",
        "memory/missing.md": "MEMORY_FILE_NOT_FOUND",
    }
    for bad, name in cases.items():
        with pytest.raises(RemoteError) as info:
            daemon.call("get", {"workspace": ws, "path": bad})
        assert info.value.name == name, bad
    got = daemon.call("get", {"workspace": ws, "path": "memory/ok.md", "from_line": 2, "lines": 5})
    assert got == {"path": "memory/ok.md", "from_line": 2, "lines": 2, "total_lines": 3, "text": "two\nthree\n"}
    with pytest.raises(RemoteError) as info:
        daemon.call("get", {"workspace": ws, "path": "memory/ok.md", "lines": 201})
    assert info.value.name == "INVALID_PARAMS"


def test_unknown_workspace(daemon: Daemon) -> None:
    for ref in ("ws_000000000000", "/nonexistent/place", "relative"):
        with pytest.raises(RemoteError) as info:
            daemon.call("search", {"workspace": ref, "query": "x"})
        assert info.value.name == "MEMORY_WORKSPACE_NOT_FOUND"


def test_deleted_index_is_rebuilt_and_loses_nothing(daemon_factory: Any) -> None:
    d = daemon_factory()
    path = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(path)})["workspace_id"]
    d.call("remember", {"workspace": ws, "text": "ERR_FLASH_WRITE_0x12 seen on bench 3"})
    assert d.stop() == 0
    index = d.home / "state" / "workspaces" / ws / "index.sqlite"
    index.unlink()
    d2 = daemon_factory()
    hits = wait_for(lambda: search(d2, ws, "ERR_FLASH_WRITE_0x12")["hits"])
    assert hits[0]["snippet"] == "- **ERR_FLASH_WRITE_0x12** seen on bench 3"
    status = d2.call("status", {"workspace": ws})["workspaces"][0]
    assert status["rebuilt"] == "missing" and status["files"] == 1
    assert d2.stop() == 0
    index.write_bytes(b"this is not a database" * 100)
    d3 = daemon_factory()
    assert wait_for(lambda: search(d3, ws, "ERR_FLASH_WRITE_0x12")["hits"])
    assert d3.call("status", {"workspace": ws})["workspaces"][0]["rebuilt"] == "corrupt"


def test_index_full_and_incremental(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    for i in range(5):
        (path / "memory" / f"2026-01-0{i + 1}.md").write_text(
            f"## 2026-01-0{i + 1}\n\n## 2026-01-0{i + 1} 10:00 — note\n- item {i}\n"
        )
    first = daemon.call("index", {"workspace": ws})["workspaces"][0]
    assert first["files"] == 5
    again = daemon.call("index", {"workspace": ws})["workspaces"][0]
    assert again["files_indexed"] == 0 and again["files_unchanged"] == 5
    full = daemon.call("index", {"workspace": ws, "full": True})["workspaces"][0]
    assert full["rebuilt"] is True and full["files"] == 5 and full["chunks"] >= 5
    with pytest.raises(RemoteError):
        daemon.call("index", {"scope": "all"})
    everything = daemon.call("index", {"scope": "all", "owner_token": daemon.owner_token()})
    assert [r["workspace_id"] for r in everything["workspaces"]] == [ws]


def test_validate_reports_layout_headings_and_links(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    memory = path / "memory"
    (memory / "2026-01-02.md").write_text(
        "## 2026-01-03\n\n## 2026-01-02 25:61 — decision\n- x\n## random heading\n"
        "## 2026-01-02 10:00 — musing\n- see [spec](../nowhere.md) and [out](../../../etc/passwd)\n"
    )
    (memory / "stray.md").write_text("# stray\n")
    (memory / "image.png").write_bytes(b"\x89PNG")
    report = daemon.call("validate", {"workspace": ws})
    problems = report["reports"][0]["problems"]
    messages = " | ".join(f"{p['path']}:{p.get('line')}:{p['message']}" for p in problems)
    assert report["ok"] is False
    for expected in (
        "day header says 2026-01-03",
        "25:61",
        "random heading",
        "unknown entry type 'musing'",
        "broken link: ../nowhere.md",
        "link leaves the workspace",
        "stray.md",
        "image.png",
    ):
        assert expected in messages, expected
    fine = short_tmp("ws")
    ws2 = daemon.call("workspace.add", {"path": str(fine)})["workspace_id"]
    daemon.call("remember", {"workspace": ws2, "text": "all good"})
    assert daemon.call("validate", {"workspace": ws2})["ok"] is True


def test_status_per_workspace(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    daemon.call("remember", {"workspace": ws, "text": "status check"})
    status = daemon.call("status", {"workspace": ws})
    assert status["probes"]["rjieba"] is True
    info = status["workspaces"][0]
    assert info["files"] == 1 and info["chunks"] >= 1 and info["watching"] is True
    assert info["last_indexed"] and info.get("recommended") is None
    os.rename(path / "memory", path / "memory-moved")
    gone = daemon.call("status", {"workspace": ws})["workspaces"][0]
    assert gone["recommended"] == "memoryctl init"


def test_a_full_index_answers_at_once_and_is_merged_into_one_segment_once_idle(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    path, ws = workspace
    daily_logs(path, 20)  # prepared in a worker thread, inserted in several statements
    daemon.call("index", {"workspace": ws, "full": True})
    hits = search(daemon, ws, "ERR_D7_33")["hits"]
    first = hits[0]
    assert (first["path"], first["section_start_line"], first["start_line"]) == ("memory/2026-03-07.md", 100, 101)
    wait_for(lambda: daemon.call("status", {"workspace": ws})["workspaces"][0]["segments"] == 1)
    assert search(daemon, ws, "ERR_D7_33")["hits"] == hits


def test_a_broken_index_never_blocks_a_write(daemon: Daemon) -> None:
    import hashlib

    path = short_tmp("ws")
    ws_id = "ws_" + hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()[:12]
    blocker = daemon.home / "state" / "workspaces" / ws_id
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")  # the index cannot be created here
    assert daemon.call("workspace.add", {"path": str(path)})["workspace_id"] == ws_id
    written = daemon.call("remember", {"workspace": ws_id, "text": "still written KQZSAFE"})
    assert "KQZSAFE" in (path / written["path"]).read_text()
    with pytest.raises(RemoteError) as info:
        daemon.call("search", {"workspace": ws_id, "query": "KQZSAFE"})
    assert info.value.name == "MEMORY_INDEX_FAILED"
    status = daemon.call("status", {"workspace": ws_id})["workspaces"][0]
    assert status["error"] and status["recommended"] == "memoryctl index --full"
    with pytest.raises(RemoteError) as info:  # still broken: the recommended command says so, no crash
        daemon.call("index", {"workspace": ws_id, "full": True})
    assert info.value.name == "MEMORY_INDEX_FAILED"
    blocker.unlink()  # the owner fixes the state directory; the recommended command now recovers
    report = daemon.call("index", {"workspace": ws_id, "full": True})["workspaces"][0]
    assert report["files"] == 1
    assert daemon.call("search", {"workspace": ws_id, "query": "KQZSAFE"})["hits"]
    assert "error" not in daemon.call("status", {"workspace": ws_id})["workspaces"][0]


def test_validate_reads_fences_and_headings_as_the_index_does(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """A "## " line inside a fence the index treats as code (indented, or inside a longer fence that a shorter one
    does not close) is code for validate too; a real heading after the fence is still checked."""
    path, ws = workspace
    day = "2026-03-04"
    (path / "memory" / f"{day}.md").write_text(
        f"## {day}\n\n## {day} 10:00 — note\n"
        "   ```sh\n## shell comment, not a heading\n   ```\n"
        "````md\n```\n## inside the outer fence\n```\n````\n"
        "## not a proper entry heading\n",
        encoding="utf-8",
    )
    daemon.call("index", {"workspace": ws})
    problems = [p for r in daemon.call("validate", {"workspace": ws})["reports"] for p in r["problems"]]
    mine = [(p["line"], p["message"].split("'")[1]) for p in problems if p["path"] == f"memory/{day}.md"]
    assert mine == [(12, "## not a proper entry heading")]
    chunks = search(daemon, ws, "shell comment")["hits"]
    assert chunks and chunks[0]["heading"] == f"## {day} 10:00 — note"  # the index agrees: code, not a heading


def test_a_pasted_question_of_thousands_of_words_ranks_passages_on_a_bounded_number(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    """Passage ranking and snippet marking use at most MAX_TERMS of the query's words (as the index query does),
    so a pasted 10 kB question costs bounded work per section."""
    from memoryd.text.textindex import MAX_TERMS

    path, ws = workspace
    bullets = "\n".join("- " + " ".join(f"zq{i * 100 + j}" for j in range(100)) for i in range(30))
    (path / "memory" / "MEMORY.md").write_text(f"## Words\n{bullets}\n", encoding="utf-8")
    daemon.call("index", {"workspace": ws})
    query = " ".join(f"zq{i}" for i in range(3000))
    hits = daemon.call("search", {"workspace": ws, "query": query, "limit": 5, "snippet_max_chars": 4000})["hits"]
    assert hits
    for hit in hits:
        marked = set(re.findall(r"\*\*(zq\d+)\*\*", hit["snippet"]))
        assert 0 < len(marked) <= MAX_TERMS
