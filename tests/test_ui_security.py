"""Who may use the review page, over plain HTTP against a real `memoryctl ui` and daemon (a browser will not send a
forged Host or Origin): no session → 403, a foreign Origin or Host → 403, a forged CSRF token → 403, the token works
once, every answer carries the strict CSP; --read-only and the owner's view offer no writes; a server bound to one
project shows no other; every asset comes from the package."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Daemon, short_tmp
from tests.ui_harness import Server, log_in, request, seed, ui_server

UI_DIR = ROOT / "client" / "memoryctl" / "ui"


@pytest.fixture
def seeded(daemon: Daemon, workspace: tuple[Path, str]) -> dict[str, Any]:
    root, ws = workspace
    return {"root": root, "ws": ws, **seed(daemon, root, ws)}


@pytest.fixture
def server(daemon: Daemon, seeded: dict[str, Any]) -> Iterator[Server]:
    with ui_server(daemon, seeded["root"]) as running:
        yield running


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field in the form"
    return match.group(1)


def forget_form(server: Server, cookie: str, ws: str, entry: dict[str, Any]) -> tuple[str, str]:
    path = f"/w/{ws}/forget/{entry['id']}"
    status, _, page = request(server, "GET", f"{path}?path={entry['path']}", {"Cookie": cookie})
    assert status == 200
    return path, csrf_of(page)


def test_no_session_is_403_and_the_token_works_once(server: Server, seeded: dict[str, Any]) -> None:
    status, _headers, body = request(server, "GET", "/")
    assert status == 403 and "one-time token" in body
    assert request(server, "GET", f"/w/{seeded['ws']}/memory", {"Cookie": "memoryd_ui=guessed"})[0] == 403
    assert request(server, "GET", "/login?token=wrong")[0] == 403
    cookie = log_in(server)
    status, _headers, body = request(server, "GET", "/", {"Cookie": cookie})
    assert status == 200 and seeded["ws"] in body
    again = request(server, "GET", server.url.removeprefix(server.base))
    assert again[0] == 403 and "set-cookie" not in again[1]  # spent: no second session


def test_a_foreign_host_or_origin_is_403(server: Server, seeded: dict[str, Any]) -> None:
    cookie = log_in(server)
    ws = seeded["ws"]
    assert request(server, "GET", f"/w/{ws}/memory", {"Cookie": cookie})[0] == 200
    rebound = request(server, "GET", f"/w/{ws}/memory", {"Cookie": cookie, "Host": f"evil.example:{server.port}"})
    assert rebound[0] == 403 and "DNS rebinding" in rebound[2]
    assert request(server, "GET", "/", {"Host": "evil.example"})[0] == 403
    foreign = {"Cookie": cookie, "Origin": "http://evil.example"}
    assert request(server, "GET", f"/w/{ws}/memory", foreign)[0] == 403
    other_port = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{server.port + 1}"}
    assert request(server, "GET", f"/w/{ws}/memory", other_port)[0] == 403
    cross = {"Cookie": cookie, "Sec-Fetch-Site": "cross-site"}
    assert request(server, "GET", f"/w/{ws}/memory", cross)[0] == 403
    path, csrf = forget_form(server, cookie, ws, seeded["entries"][0])
    status, _, _ = request(server, "POST", path, foreign, f"csrf={csrf}")
    assert status == 403
    assert request(server, "POST", path, {"Cookie": cookie}, f"csrf={csrf}")[0] == 403  # a write without Origin
    assert not (seeded["root"] / "data/memory/forgotten.json").exists()


def test_a_forged_csrf_token_is_403_and_the_real_one_writes(
    server: Server, seeded: dict[str, Any], daemon: Daemon
) -> None:
    cookie = log_in(server)
    ws = seeded["ws"]
    entry = seeded["entries"][0]
    path, csrf = forget_form(server, cookie, ws, entry)
    same = {"Cookie": cookie, "Origin": server.base}
    for body in ("", "csrf=", f"csrf={csrf[:-1]}x", "reason=x", f"csrf={csrf}x"):
        assert request(server, "POST", path, same, body)[0] == 403, body
    assert not (seeded["root"] / "data/memory/forgotten.json").exists()
    status, headers, _ = request(server, "POST", path, same, f"csrf={csrf}&reason=%E9%87%8D%E5%A4%8D")
    assert status == 303 and headers["location"].startswith(f"/w/{ws}/change/forget_")
    recorded = daemon.call("timeline", {"workspace": ws, "limit": 1})["events"][0]
    assert recorded["op"] == "forget" and entry["id"] in recorded["summary"]
    entry_line = (seeded["root"] / "data/memory/history.jsonl").read_text().splitlines()[-1]
    assert '"reason":"重复"' in entry_line  # recorded like the CLI's, reason and all


def test_every_answer_carries_the_strict_policy(server: Server, seeded: dict[str, Any]) -> None:
    cookie = log_in(server)
    for path in ("/", f"/w/{seeded['ws']}/search?q=x", "/static/app.css", "/nowhere", f"/w/{seeded['ws']}/rule/nope"):
        _status, headers, _ = request(server, "GET", path, {"Cookie": cookie})
        csp = headers["content-security-policy"]
        assert "script-src 'none'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, path
        assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    refused = request(server, "GET", "/")
    assert "script-src 'none'" in refused[1]["content-security-policy"]


def test_read_only_offers_no_writes_and_refuses_them(daemon: Daemon, seeded: dict[str, Any]) -> None:
    ws, entry = seeded["ws"], seeded["entries"][0]
    with ui_server(daemon, seeded["root"], "--read-only") as server:
        cookie = log_in(server)
        _, _, page = request(server, "GET", f"/w/{ws}/file?path={entry['path']}", {"Cookie": cookie})
        assert entry["id"] in page and "forget…" not in page and "read-only" in page
        _, _, page = request(server, "GET", f"/w/{ws}/candidates", {"Cookie": cookie})
        assert "promote…" not in page
        _, _, page = request(server, "GET", f"/w/{ws}/forget/{entry['id']}?path={entry['path']}", {"Cookie": cookie})
        assert '<form method="post"' not in page
        _, _, home = request(server, "GET", "/", {"Cookie": cookie})
        csrf = csrf_of(page) if 'name="csrf"' in page else "none"
        same = {"Cookie": cookie, "Origin": server.base}
        status, _, _ = request(server, "POST", f"/w/{ws}/forget/{entry['id']}", same, f"csrf={csrf}")
        assert status == 403 and "csrf" not in home
    assert not (seeded["root"] / "data/memory/forgotten.json").exists()


def test_a_project_server_shows_no_other_workspace_and_the_owner_view_shows_all_read_only(
    daemon: Daemon, seeded: dict[str, Any]
) -> None:
    other_root = short_tmp("ws")
    other = daemon.call("workspace.add", {"path": str(other_root)})["workspace_id"]
    daemon.call("remember", {"workspace": other, "text": "另一个项目 other project secret"})
    try:
        with ui_server(daemon, seeded["root"]) as server:
            cookie = log_in(server)
            assert request(server, "GET", f"/w/{other}/memory", {"Cookie": cookie})[0] == 404
            _, _, home = request(server, "GET", "/", {"Cookie": cookie})
            assert other not in home
            assert request(server, "GET", "/all/search?q=secret", {"Cookie": cookie})[0] == 404
        with ui_server(daemon, other_root, "--all") as owner:
            cookie = log_in(owner)
            _, _, home = request(owner, "GET", "/", {"Cookie": cookie})
            assert seeded["ws"] in home and other in home and "owner view" in home
            status, _, found = request(owner, "GET", "/all/search?q=secret", {"Cookie": cookie})
            assert status == 200 and "other project" in found
            _, _, page = request(owner, "GET", f"/w/{seeded['ws']}/candidates", {"Cookie": cookie})
            assert "reset-hangs" in page and "promote…" not in page
    finally:
        shutil.rmtree(other_root, ignore_errors=True)


def test_the_page_loads_nothing_from_elsewhere_and_has_no_script() -> None:
    for path in sorted(UI_DIR.rglob("*")):
        if path.suffix not in (".html", ".css"):
            continue
        text = path.read_text(encoding="utf-8")
        assert "<script" not in text, path
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), path
        assert "@import" not in text and "url(" not in text, path


def test_a_lifecycle_run_needs_its_dry_run_and_read_only_offers_neither(daemon: Daemon, seeded: dict[str, Any]) -> None:
    root, ws = seeded["root"], seeded["ws"]
    old = root / "memory" / "2025-01-02.md"
    old.write_text("## 2025-01-02\n\n## 2025-01-02 09:00 — note\n- 旧 old entry\n", encoding="utf-8")
    item = {"id": "ent_0000000000aa", "path": "memory/2025-01-02.md", "heading": "2025-01-02 09:00 — note"}
    with (root / "data/memory/items.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({**item, "first_line": "- 旧 old entry", "start_line": 3}) + "\n")
    daemon.call("index", {"workspace": ws})
    with ui_server(daemon, root) as server:
        cookie = log_in(server)
        _, _, page = request(server, "GET", f"/w/{ws}/lifecycle", {"Cookie": cookie})
        csrf = csrf_of(page)
        same = {"Cookie": cookie, "Origin": server.base}
        status, _, _ = request(server, "POST", f"/w/{ws}/lifecycle/run", same, f"csrf={csrf}&dry_run_id=made-up")
        assert status == 409 and old.exists()
        status, _, preview = request(server, "POST", f"/w/{ws}/lifecycle/dry-run", same, f"csrf={csrf}&action=archive")
        assert status == 200 and "memory/archive/2025-01-02.md" in preview and old.exists()
        dry_id = re.search(r'name="dry_run_id" value="([^"]+)"', preview)
        assert dry_id
        status, _headers, _ = request(
            server, "POST", f"/w/{ws}/lifecycle/run", same, f"csrf={csrf}&dry_run_id={dry_id.group(1)}"
        )
        assert status == 303 and not old.exists()
        _, _, archived = request(server, "GET", f"/w/{ws}/file?path=memory/archive/2025-01-02.md", {"Cookie": cookie})
        assert "ent_0000000000aa" in archived and "旧 old entry" in archived  # its id, though items name the old path
        _, _, found = request(server, "GET", f"/w/{ws}/search?q=%E6%97%A7+old+entry&archive=1", {"Cookie": cookie})
        assert "memory/archive/2025-01-02.md" in found
    with ui_server(daemon, root, "--read-only") as server:
        cookie = log_in(server)
        _, _, page = request(server, "GET", f"/w/{ws}/lifecycle", {"Cookie": cookie})
        assert "Dry run" not in page and "read-only" in page


def test_metrics_draw_svg_charts_and_the_audit_panel_when_the_daemon_has_audit(
    server: Server, seeded: dict[str, Any]
) -> None:
    from memoryd.app import build_dispatcher

    cookie = log_in(server)
    status, _, page = request(server, "GET", f"/w/{seeded['ws']}/metrics", {"Cookie": cookie})
    assert status == 200 and page.count("<svg") >= 2 and "<rect" in page
    assert "Changes per day, by kind" in page and "compile.apply" in page  # the seeded apply, charted by kind
    if "audit" in build_dispatcher().methods:
        assert 'id="audit"' in page and page.count("<h3>") >= 3  # one heading per metric the daemon reports
    else:
        assert 'id="audit-missing"' in page


def test_a_path_out_of_the_memory_tree_is_the_daemons_named_error(server: Server, seeded: dict[str, Any]) -> None:
    cookie = log_in(server)
    for path in ("../../etc/passwd", "/etc/passwd", "memory/../../x.md", "data/memory/history.jsonl"):
        status, _, page = request(server, "GET", f"/w/{seeded['ws']}/file?path={path}", {"Cookie": cookie})
        assert status == 400 and "MEMORY_PATH_TRAVERSAL" in page and "root:" not in page, path


def test_memoryctl_ui_outside_a_workspace_says_so(daemon: Daemon) -> None:
    elsewhere = short_tmp("nows")
    out = daemon.memoryctl("ui", "--no-browser", cwd=elsewhere, timeout=60)
    assert out.returncode != 0 and "MEMORY_WORKSPACE_NOT_FOUND" in out.stderr + out.stdout


def test_the_overview_names_the_last_consolidation(server: Server, seeded: dict[str, Any]) -> None:
    now = datetime.now(UTC).isoformat()  # the newest consolidation (the seeded workspace may hold older ones)
    line = {"op": "compile.apply", "kind": "consolidate", "ts": now, "run_id": "apply_consol1"}
    with (seeded["root"] / "data/memory/history.jsonl").open("a") as f:
        f.write(json.dumps({**line, "changes": []}) + "\n")
    cookie = log_in(server)
    _, _, home = request(server, "GET", "/", {"Cookie": cookie})
    assert f"/w/{seeded['ws']}/change/apply_consol1" in home
