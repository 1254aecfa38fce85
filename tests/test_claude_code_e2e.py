"""Keyless end-to-end runs of the real Claude Code (from the npm registry) against a small fake Messages API on
127.0.0.1 that records every request body, with memoryd configured by `memoryctl install claude`:

- the stable block (MEMORY.md) arrives in the first request, once, and a resumed session's request carries the same
  bytes once, although MEMORY.md changed in between (the session's snapshot);
- recall arrives with each prompt;
- a tool the model uses is recorded as an observation (PostToolUse);
- a decision the model stores through the MCP tool in session one is recalled in session two;
- with the daemon killed, a turn still completes.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Daemon, short_tmp
from tests.fake_api import FakeAPI, sse
from tests.hostcli import CLAUDE_CODE, npx

pytestmark = pytest.mark.registry  # the host comes from the npm registry (tests/hostcli.py)

MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")

Script = Callable[[dict[str, Any]], list[dict[str, Any]]]  # a request body → the assistant's content blocks


class FakeMessages(FakeAPI):
    """POST /v1/messages: answers with the content blocks ``script`` gives for the request (streamed or not)."""

    def __init__(self) -> None:
        super().__init__()
        self.script: Script = lambda body: [{"type": "text", "text": "ok"}]

    def answer(self, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
        if "count_tokens" in path or not path.startswith("/v1/messages"):
            return "application/json", json.dumps({"input_tokens": 10}).encode()
        self.bodies.append(body)
        blocks = self.script(body)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        message = {
            "id": f"msg_{len(self.bodies)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        if not body.get("stream"):
            return "application/json", json.dumps({**message, "content": blocks, "stop_reason": stop}).encode()
        events: list[tuple[str | None, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": message})
        ]
        for n, block in enumerate(blocks):
            if block["type"] == "text":
                start: dict[str, Any] = {"type": "text", "text": ""}
                delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
            else:
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": n, "content_block": start}),
                ("content_block_delta", {"type": "content_block_delta", "index": n, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": n}),
            ]
        done = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 1},
        }
        return sse([*events, ("message_delta", done), ("message_stop", {"type": "message_stop"})])


@pytest.fixture
def fake() -> Iterator[FakeMessages]:
    server = FakeMessages()
    yield server
    server.close()


@pytest.fixture
def project(daemon: Daemon) -> tuple[Path, str]:
    root = short_tmp("cc")
    (root / ".git").mkdir()
    ws = daemon.call("workspace.add", {"path": str(root)})["workspace_id"]
    env = {**daemon.env, "HOME": str(daemon.home)}
    done = subprocess.run(
        [MEMORYCTL, "install", "claude"], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return root, ws


def claude(d: Daemon, fake: FakeMessages, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **d.env,
        "HOME": str(d.home),
        "MEMORYCTL": MEMORYCTL,  # for the plugin's launchers (a user's memoryctl is on PATH or in ~/.local/bin)
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return npx(CLAUDE_CODE, "-p", *args, cwd=cwd, env=env, timeout=300)


def test_stable_once_and_identical_after_resume_recall_per_prompt(
    daemon: Daemon, project: tuple[Path, str], fake: FakeMessages
) -> None:
    root, ws = project
    (root / "memory" / "MEMORY.md").write_text(
        "## Devices\n- KX-200 bench 3: USB hub on port 2 KQZSTABLE\n", encoding="utf-8"
    )
    daemon.call(
        "remember", {"workspace": ws, "type": "decision", "text": "KX-200 UART needs RTS/CTS above 115200 KQZRECALL"}
    )
    session = str(uuid.uuid4())
    first = claude(daemon, fake, root, "--session-id", session, "what about the UART RTS/CTS?")
    assert first.returncode == 0 and "ok" in first.stdout, first.stderr[-2000:]
    stable = daemon.call("context", {"workspace": ws, "session_id": session})["stable"]["text"]
    assert "KQZSTABLE" in stable
    body = fake.text(0)
    assert json.dumps(stable, ensure_ascii=False)[1:-1] in body  # the stable block, byte for byte
    assert body.count("KQZSTABLE") == 1 and "KQZRECALL" in body

    # memory changes; the same session resumes: the same stable bytes, once; a new prompt, its own recall
    (root / "memory" / "MEMORY.md").write_text("## Devices\n- changed since KQZNEWER\n", encoding="utf-8")
    daemon.call("remember", {"workspace": ws, "type": "note", "text": "flash tool needs BOOT0 high KQZSECOND"})
    again = claude(daemon, fake, root, "--resume", session, "how do we flash, BOOT0?")
    assert again.returncode == 0, again.stderr[-2000:]
    body = fake.text(len(fake.bodies) - 1)
    assert body.count("KQZSTABLE") == 1 and "KQZNEWER" not in body
    assert "KQZSECOND" in body

    # a new session gets the new memory
    fresh = claude(daemon, fake, root, "anything new?")
    assert fresh.returncode == 0 and "KQZNEWER" in fake.text(len(fake.bodies) - 1)


def test_tool_use_is_observed_and_a_decision_is_recalled_next_session(
    daemon: Daemon, project: tuple[Path, str], fake: FakeMessages
) -> None:
    root, ws = project

    def script(body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["messages"][-1]
        done = isinstance(last.get("content"), list) and any(b.get("type") == "tool_result" for b in last["content"])
        if done:
            return [{"type": "text", "text": "done"}]
        names = {t["name"] for t in body.get("tools", [])}
        if "mcp__memoryd__memory_remember" in names and "REMEMBER" in json.dumps(body["messages"]):
            args = {"text": "we chose ninja over make for firmware builds KQZDECIDED", "type": "decision"}
            return [{"type": "tool_use", "id": "toolu_1", "name": "mcp__memoryd__memory_remember", "input": args}]
        return [{"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "echo KQZTOOLRAN"}}]

    fake.script = script
    # (--dangerously-skip-permissions is refused to root, as CI may be: the two tools are allowed by name instead)
    mcp = ["--mcp-config", str(root / ".mcp.json"), "--allowedTools", "Bash", "mcp__memoryd__memory_remember"]
    ran = claude(daemon, fake, root, *mcp, "--", "run a command")
    assert ran.returncode == 0, ran.stderr[-2000:]
    observed = daemon.call("timeline", {"workspace": ws})
    assert "KQZTOOLRAN" in json.dumps(observed, ensure_ascii=False)

    kept = claude(daemon, fake, root, *mcp, "--", "REMEMBER our build decision")
    assert kept.returncode == 0, kept.stderr[-2000:]
    tools = {t["name"] for b in fake.bodies for t in b.get("tools", [])}
    assert any("KQZDECIDED" in p.read_text(encoding="utf-8") for p in (root / "memory").glob("20*.md")), (
        sorted(t for t in tools if t.startswith("mcp")),
        json.dumps(fake.bodies[-1]["messages"][-1], ensure_ascii=False)[:1500],
        kept.stderr[-1500:],
    )

    fake.script = lambda body: [{"type": "text", "text": "ok"}]
    recalled = claude(daemon, fake, root, "which build tool did we pick, ninja or make?")
    assert recalled.returncode == 0 and "KQZDECIDED" in fake.text(len(fake.bodies) - 1)


def test_a_killed_daemon_never_breaks_a_turn(daemon: Daemon, project: tuple[Path, str], fake: FakeMessages) -> None:
    root, _ = project
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(30)  # its socket file stays behind: a connect is refused, as after a crash
    turn = claude(daemon, fake, root, "still there?")
    assert turn.returncode == 0 and "ok" in turn.stdout, turn.stderr[-2000:]
    assert "KQZ" not in fake.text(0)  # nothing injected, nothing broken


def test_the_plugin_installed_from_the_marketplace_gives_memory(daemon: Daemon, fake: FakeMessages) -> None:
    root = short_tmp("cp")
    (root / ".git").mkdir()
    ws = daemon.call("workspace.add", {"path": str(root)})["workspace_id"]
    (root / "memory" / "MEMORY.md").write_text("## Devices\n- KX-200 bench 3 KQZSTABLE\n", encoding="utf-8")
    daemon.call("remember", {"workspace": ws, "type": "decision", "text": "UART needs RTS/CTS above 115200 KQZRECALL"})
    for step in (["plugin", "marketplace", "add", str(ROOT)], ["plugin", "install", "memoryd@memoryd"]):
        done = _claude_cli(daemon, root, *step)
        assert done.returncode == 0, done.stdout + done.stderr
    done = claude(daemon, fake, root, "what about the UART RTS/CTS?")
    assert done.returncode == 0, done.stderr[-2000:]
    body = fake.text(len(fake.bodies) - 1)
    assert body.count("KQZSTABLE") == 1 and "KQZRECALL" in body  # the plugin's hooks, through its launcher
    tools = {t["name"] for t in fake.bodies[-1].get("tools", [])}
    assert "mcp__plugin_memoryd_memoryd__memory_search" in tools  # and its MCP server, started in time


def _claude_cli(d: Daemon, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Claude Code's own subcommands (plugin …), in the test's home."""
    return npx(CLAUDE_CODE, *args, cwd=cwd, env={**d.env, "HOME": str(d.home)}, timeout=300)


def test_the_stop_nudge_consolidates_into_memory_md_and_the_next_session_holds_it(
    daemon: Daemon, project: tuple[Path, str], fake: FakeMessages
) -> None:
    """Issue 22 item 11: notes from earlier sessions wait; at the end of a turn the Stop hook asks for a
    consolidation; the model prepares and applies one through the MCP tools with a memory_update; MEMORY.md is
    merged (the section the answer left out is kept), and the next session's stable context holds the merged
    bullet."""
    root, ws = project
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").write_text(
        "# Memory\n\n## Devices\n- KX-200 boots from QSPI KQZKEPT\n\n## Team\n- Mei owns the bench KQZTEAM\n",
        encoding="utf-8",
    )
    for text in ("KX-200 needs RTS/CTS above 115200 baud", "bench-3 串口超时改成 500 ms"):
        daemon.call("remember", {"workspace": ws, "type": "decision", "text": text})
    daemon.env["MEMORYD_CONSOLIDATE_AFTER"] = "2"  # the hooks read it (two notes wait)

    def results(body: dict[str, Any]) -> dict[str, str]:
        out = {}
        for message in body["messages"]:
            for block in message.get("content") if isinstance(message.get("content"), list) else []:
                if block.get("type") == "tool_result":
                    content = block.get("content")
                    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
                    out[block["tool_use_id"]] = text
        return out

    def script(body: dict[str, Any]) -> list[dict[str, Any]]:
        done = results(body)
        if "toolu_apply" in done:
            return [{"type": "text", "text": "consolidated"}]
        if "toolu_prepare" in done:
            found = re.search(r'request_id\\*"\s*:\s*\\*"(cr_[A-Za-z0-9_]+)', done["toolu_prepare"])
            assert found, done["toolu_prepare"][:2000]
            response: dict[str, Any] = {
                "request_id": found.group(1),
                "provenance_summary": {"observation_ids_used": []},
                "memory_update": "## Devices\n- KX-200 needs RTS/CTS above 115200 baud KQZMERGED\n",
                "daily_sections": {"Decisions": ["RTS/CTS on KX-200", "串口超时 500 ms"]},
                "history_entry": "KX-200 serial settings consolidated",
            }
            return [
                {
                    "type": "tool_use",
                    "id": "toolu_apply",
                    "name": "mcp__memoryd__compile_apply",
                    "input": {"response": response},
                }
            ]
        if "waiting to be consolidated" in json.dumps(body["messages"], ensure_ascii=False):
            return [{"type": "tool_use", "id": "toolu_prepare", "name": "mcp__memoryd__compile_prepare", "input": {}}]
        return [{"type": "text", "text": "done"}]

    fake.script = script
    tools = ["--allowedTools", "mcp__memoryd__compile_prepare", "mcp__memoryd__compile_apply"]
    ran = claude(daemon, fake, root, "--mcp-config", str(root / ".mcp.json"), *tools, "--", "wrap up for today")
    assert ran.returncode == 0, ran.stderr[-2000:]
    memory = (root / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert "KQZMERGED" in memory and "KQZKEPT" in memory and "KQZTEAM" in memory, (
        memory,
        [json.dumps(b["messages"][-1], ensure_ascii=False)[:600] for b in fake.bodies],
    )
    assert memory.index("KQZKEPT") < memory.index("KQZMERGED") < memory.index("## Team")  # merged into its section
    assert "consolidated" in (root / "memory" / "HISTORY.md").read_text(encoding="utf-8")
    rules = daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]
    assert rules["unconsolidated_notes"] == 0

    fake.bodies.clear()
    fake.script = lambda body: [{"type": "text", "text": "ok"}]
    again = claude(daemon, fake, root, "--", "what do we know about the KX-200 UART?")
    assert again.returncode == 0, again.stderr[-2000:]
    first = json.dumps(fake.bodies[0], ensure_ascii=False)
    assert "KQZMERGED" in first and "KQZKEPT" in first
