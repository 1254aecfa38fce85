"""audit and the recall trace through the real daemon: recall for prompts (context, the prompt hook) writes
recall.jsonl and replay.jsonl in the workspace; `audit` and `memoryctl audit` summarize them; the replay check holds
a would-be MEMORY.md that loses an answer the daemon injected."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson

from memoryd.curate import observe
from memoryd.curate.replay import replay_check
from tests.conftest import Daemon, daemon_env, short_tmp
from tests.test_hooks import hook

NOTES = [
    ("串口超时 ERR_QZX42 原因是流控没开，改成 rts_cts 后恢复", "event"),
    ("The deploy script lives in tools/deploy.sh and needs the VPN", "note"),
]


def rows(root: Path, rel: str) -> list[dict[str, Any]]:
    path = root / rel
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def remember_notes(daemon: Daemon, ws: str) -> None:
    for text, kind in NOTES:
        daemon.call("remember", {"workspace": ws, "text": text, "type": kind})
    daemon.call("index", {"workspace": ws})


def metric(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in result["metrics"] if m["name"] == name)


def test_recall_for_prompts_is_traced_and_audited(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").write_text("# Memory\n\n## 约定\n- 波特率固定为 921600，必须开 RTS/CTS 流控\n")
    remember_notes(daemon, ws)
    prompts = ["ERR_QZX42 串口超时怎么处理？", "write a haiku about cats", "where does the deploy script live?", "   "]
    prompts.append("波特率 921600 RTS/CTS 流控")  # found in MEMORY.md, which the stable part already shows
    prompts.append("plan the office holiday party menu, music, decorations, budget and the VPN raffle")  # one word
    injected = [
        len(daemon.call("context", {"workspace": ws, "query_text": q, "session_id": "sess-1"})["dynamic"]["items"])
        for q in prompts
    ]
    assert injected[0] and injected[2] and not injected[1] and not injected[3] and not injected[4] and not injected[5]
    # SessionStart's call (no query_text) is not a recall: no row
    daemon.call("context", {"workspace": ws, "session_id": "sess-1"})
    result = daemon.call("audit", {"workspace": ws})  # waits for the queued rows, then reads them
    recall = metric(result, "recall")
    assert recall["total"]["rows"] == 6
    assert (
        recall["total"]["counts"]["trigger"]["injected"] == 2
        and recall["total"]["counts"]["trigger"]["empty_query"] == 1
    )
    assert recall["total"]["rates"]["injected"]["numerator"] == 2
    traced = rows(root, observe.RECALL)
    assert [r["trigger"] for r in traced] == [
        "injected",
        "no_hits",
        "injected",
        "empty_query",
        "filtered",
        "below_floor",
    ] and all(r["session"] == "sess-1" for r in traced)
    assert traced[0]["item_ids"] and traced[0]["item_ids"][0].startswith("ent_")
    raw = (root / observe.RECALL).read_text(encoding="utf-8")
    assert "串口" not in raw and "deploy" not in raw and "haiku" not in raw  # no text: neither prompt nor memory
    kept = rows(root, observe.REPLAY)
    assert [r["query"] for r in kept] == [prompts[0], prompts[2]]  # only recalls whose hits were injected
    assert kept[0]["answers"][0]["path"].startswith("memory/20") and kept[0]["answers"][0]["digests"]
    log = (daemon.home / "daemon.log").read_text(encoding="utf-8", errors="replace")
    assert "ERR_QZX42" not in log and "haiku" not in log  # never in the log


def test_the_prompt_hook_is_traced(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    remember_notes(daemon, ws)
    payload = {"session_id": "hook-sess", "cwd": str(root), "prompt": "ERR_QZX42 串口超时怎么处理？"}
    out = hook(daemon.env, "claude", "UserPromptSubmit", payload)
    assert out.returncode == 0 and b"ERR_QZX42" in out.stdout
    daemon.call("audit", {"workspace": ws})
    [row] = rows(root, observe.RECALL)
    assert row["session"] == "hook-sess" and row["trigger"] == "injected" and row["injected"] >= 1
    assert rows(root, observe.REPLAY)[0]["query"] == payload["prompt"]


def test_audit_through_memoryctl(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    remember_notes(daemon, ws)
    daemon.call("context", {"workspace": ws, "query_text": "where does the deploy script live?"})
    (root / observe.OBSERVABILITY_DIR).mkdir(parents=True, exist_ok=True)
    with (root / observe.ROUTING).open("ab") as f:  # written by consolidation (another slice): the shape it writes
        for n in range(3):
            f.write(
                orjson.dumps(
                    {"ts": observe.ts(), "run_id": f"r{n}", "mode": "compatible", "result": "routed", "sections": 4}
                )
                + b"\n"
            )
        f.write(b'{"ts": "torn')
    table = daemon.memoryctl("audit", "--workspace", str(root))
    assert table.returncode == 0, table.stderr
    assert "compatible → preferred: not yet (3/50 runs in 7 days)" in table.stdout
    assert "recall" in table.stdout and "routing" in table.stdout and "1 torn" in table.stdout
    as_json = json.loads(daemon.memoryctl("audit", "--json", cwd=root).stdout)
    assert as_json["ok"] and metric(as_json["data"], "routing")["total"]["rows"] == 3
    assert as_json["data"]["gates"]["current_mode"] == "compatible"
    md = daemon.memoryctl("audit", "--markdown", "--since", "1h", cwd=root)
    assert md.returncode == 0 and md.stdout.startswith("# Memory audit — " + ws)
    assert "## Routing phase gates" in md.stdout and "## Recall for prompts" in md.stdout
    future = json.loads(daemon.memoryctl("audit", "--json", "--since", "2999-01-01", cwd=root).stdout)
    assert metric(future["data"], "recall")["total"]["rows"] == 0
    bad = daemon.memoryctl("audit", "--json", "--since", "last tuesday", cwd=root)
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"]["name"] == "INVALID_PARAMS"


def test_replay_check_on_answers_the_daemon_injected(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    filler = "".join(
        f"## Convention {n}\n- keep the build reproducible, rule {n} of the house style\n\n" for n in range(30)
    )
    memory = f"# Memory\n\n{filler}## Hardware\n- The KX-200 UART needs rts_cts flow control at 921600 baud\n"
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").write_text(memory, encoding="utf-8")
    daemon.call("index", {"workspace": ws})
    # the stable part's budget cuts the late section off, so recall injects it for the prompt
    got = daemon.call("context", {"workspace": ws, "query_text": "KX-200 UART flow control?", "budget_chars": 1000})
    assert any(i["path"] == "memory/MEMORY.md" for i in got["dynamic"]["items"])
    daemon.call("audit", {"workspace": ws})  # the queued rows are written
    dropped = memory.replace("- The KX-200 UART needs rts_cts flow control at 921600 baud\n", "- (moved)\n")
    verdict = replay_check(root, {"memory/MEMORY.md": dropped})
    assert verdict.held and [(x.query, x.path) for x in verdict.lost] == [
        ("KX-200 UART flow control?", "memory/MEMORY.md")
    ]
    grown = memory + "\n## Tooling\n- tools/deploy.sh needs the VPN\n"
    assert not replay_check(root, {"memory/MEMORY.md": grown}).held


def test_the_settings_turn_the_trace_and_the_replay_store_off() -> None:
    home = short_tmp()
    env = {**daemon_env(home), "MEMORYD_OBSERVABILITY_REPLAY": "false", "MEMORYD_OBSERVABILITY_TRACE": "false"}
    d = Daemon(home, env).start()
    try:
        root = short_tmp("ws")
        ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
        remember_notes(d, ws)
        assert d.call("context", {"workspace": ws, "query_text": "ERR_QZX42 串口超时"})["dynamic"]["items"]
        result = d.call("audit", {"workspace": ws})
        assert metric(result, "recall")["total"]["rows"] == 0
        assert not (root / observe.OBSERVABILITY_DIR).exists()
    finally:
        d.stop()


def test_replay_keep_bounds_the_store_through_the_daemon() -> None:
    home = short_tmp()
    d = Daemon(home, {**daemon_env(home), "MEMORYD_OBSERVABILITY_REPLAY_KEEP": "2"}).start()
    try:
        root = short_tmp("ws")
        ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
        remember_notes(d, ws)
        for n in range(7):
            d.call("context", {"workspace": ws, "query_text": f"ERR_QZX42 串口超时 第{n}次"})
            d.call("audit", {"workspace": ws})
        kept = rows(root, observe.REPLAY)
        assert 2 <= len(kept) <= 4 and kept[-1]["query"] == "ERR_QZX42 串口超时 第6次"
        assert len(rows(root, observe.RECALL)) == 7  # the trace itself is append-only
    finally:
        d.stop()


def test_recall_trace_rotates_at_its_size_and_audit_reads_both_generations() -> None:
    """recall.jsonl grows by a row per prompt: past observability.recall_max_bytes it becomes recall.1.jsonl, so the
    two stay bounded for ever; audit counts the rows of both. A FIFO planted as the older generation is refused,
    never waited on."""
    home = short_tmp()
    d = Daemon(home, {**daemon_env(home), "MEMORYD_OBSERVABILITY_RECALL_MAX_BYTES": "4096"}).start()
    try:
        root = short_tmp("ws")
        ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
        remember_notes(d, ws)
        for batch in range(8):
            for n in range(8):
                d.call("context", {"workspace": ws, "query_text": f"ERR_QZX42 串口超时 第{batch}批 {n}"})
            d.call("audit", {"workspace": ws})  # waits for the batch's rows
        current, older = root / observe.RECALL, root / observe.older(observe.RECALL)
        assert older.name == "recall.1.jsonl" and older.exists()
        assert current.stat().st_size <= 4096 and older.stat().st_size <= 4096
        kept = rows(root, observe.older(observe.RECALL)) + rows(root, observe.RECALL)
        assert 8 <= len(kept) < 64  # the oldest rows went with the generation before; the newest are all here
        result = d.call("audit", {"workspace": ws})
        assert metric(result, "recall")["total"]["rows"] == len(kept)

        older.unlink()
        os.mkfifo(older)
        refused = metric(d.call("audit", {"workspace": ws}), "recall")
        assert refused["refused"] and refused["total"]["rows"] == len(rows(root, observe.RECALL))
    finally:
        d.stop()
