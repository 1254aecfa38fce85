"""Keyless end-to-end runs of the real OpenCode (opencode-ai, from the npm registry) with memoryd's plugin
(.opencode/plugin/memoryd.ts) against a small fake OpenAI-compatible chat API on 127.0.0.1 that records every request:
the stable block goes into the system prompt, the recall into the user's turn, and with the daemon killed a turn
still completes."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Daemon, short_tmp
from tests.fake_api import FakeAPI, sse
from tests.hostcli import OPENCODE, npx

pytestmark = pytest.mark.registry  # the host comes from the npm registry (tests/hostcli.py)

MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")


class FakeChat(FakeAPI):
    """POST /v1/chat/completions: "ok", or a call of the tool in ``call`` (name, arguments) when it is offered."""

    def __init__(self) -> None:
        super().__init__("/v1")
        self.call: tuple[str, dict[str, Any]] | None = None

    def answer(self, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
        self.bodies.append(body)
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        tools = {t["function"]["name"] for t in body.get("tools", [])}
        answered = any(m.get("role") == "tool" for m in body.get("messages", []))
        delta: dict[str, Any] = {"role": "assistant", "content": "ok"}
        finish = "stop"
        name, args = self.call or ("", {})
        if name in tools and not answered:
            call = {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            delta, finish = {"role": "assistant", "tool_calls": [call]}, "tool_calls"
        if not body.get("stream"):
            message = {"role": "assistant", "content": "ok"}
            done = {
                **chunk,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
            return "application/json", json.dumps(done).encode()
        chunks = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
        ]
        kind, data = sse([(None, c) for c in chunks])
        return kind, data + b"data: [DONE]\n\n"


@pytest.fixture
def fake() -> Iterator[FakeChat]:
    server = FakeChat()
    yield server
    server.close()


@pytest.fixture
def project(daemon: Daemon, fake: FakeChat) -> tuple[Path, str]:
    root = short_tmp("oc")
    (root / ".git").mkdir()
    ws = daemon.call("workspace.add", {"path": str(root)})["workspace_id"]
    (root / ".opencode" / "plugin").mkdir(parents=True)
    shutil.copy(ROOT / ".opencode" / "plugin" / "memoryd.ts", root / ".opencode" / "plugin" / "memoryd.ts")
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "fake",
        "options": {"baseURL": fake.url, "apiKey": "not-a-key"},
        "models": {"m": {"name": "m"}},
    }
    config = {"provider": {"fake": provider}, "model": "fake/m", "permission": {"bash": "allow"}}
    (root / "opencode.json").write_text(json.dumps(config))
    env = {**daemon.env, "HOME": str(daemon.home / "opencode-home")}
    done = subprocess.run(
        [MEMORYCTL, "install", "opencode"], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr  # the MCP server, merged into the provider settings
    return root, ws


def opencode(d: Daemon, cwd: Path, prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
    home = d.home / "opencode-home"
    env = {**d.env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "MEMORYCTL": MEMORYCTL}
    return npx(OPENCODE, "run", *extra, prompt, cwd=cwd, env=env)


def test_stable_in_the_system_prompt_and_recall_in_the_turn(
    daemon: Daemon, project: tuple[Path, str], fake: FakeChat
) -> None:
    root, ws = project
    (root / "memory" / "MEMORY.md").write_text("## Devices\n- KX-200 bench 3 KQZSTABLE\n", encoding="utf-8")
    daemon.call("remember", {"workspace": ws, "type": "decision", "text": "UART needs RTS/CTS above 115200 KQZRECALL"})
    done = opencode(daemon, root, "what about the UART RTS/CTS?")
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]
    turns = [b for b in fake.bodies if "what about the UART" in json.dumps(b, ensure_ascii=False)]
    assert turns, [json.dumps(b)[:300] for b in fake.bodies]
    messages = turns[-1]["messages"]
    system = " ".join(json.dumps(m, ensure_ascii=False) for m in messages if m["role"] == "system")
    user = " ".join(json.dumps(m, ensure_ascii=False) for m in messages if m["role"] == "user")
    assert "KQZSTABLE" in system and system.count("KQZSTABLE") == 1
    assert "KQZRECALL" in user

    # memory changes; the session continues in a new process: the same stable bytes (the daemon's snapshot)
    (root / "memory" / "MEMORY.md").write_text("## Devices\n- changed since KQZNEWER\n", encoding="utf-8")
    again = opencode(daemon, root, "and the BOOT0 pin?", "--continue")
    assert again.returncode == 0, again.stderr[-2000:]
    turns = [b for b in fake.bodies if "BOOT0" in json.dumps(b, ensure_ascii=False)]
    system = " ".join(json.dumps(m, ensure_ascii=False) for m in turns[-1]["messages"] if m["role"] == "system")
    assert system.count("KQZSTABLE") == 1 and "KQZNEWER" not in system


def test_a_killed_daemon_never_breaks_a_turn(daemon: Daemon, project: tuple[Path, str], fake: FakeChat) -> None:
    root, _ = project
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(30)
    done = opencode(daemon, root, "still there?")
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]
    assert "KQZ" not in json.dumps(fake.bodies)


def test_a_tool_call_is_observed(daemon: Daemon, project: tuple[Path, str], fake: FakeChat) -> None:
    root, ws = project
    fake.call = ("bash", {"command": "echo KQZTOOLRAN", "description": "run it"})
    done = opencode(daemon, root, "run a command")
    assert done.returncode == 0 and "KQZTOOLRAN" in done.stdout + done.stderr, done.stderr[-2000:]  # the tool ran
    assert "KQZTOOLRAN" in json.dumps(daemon.call("timeline", {"workspace": ws}), ensure_ascii=False)


def test_a_decision_stored_through_mcp_is_recalled_next_session(
    daemon: Daemon, project: tuple[Path, str], fake: FakeChat
) -> None:
    root, _ = project
    fake.call = ("memoryd_memory_remember", {"text": "we chose ninja over make KQZDECIDED", "type": "decision"})
    kept = opencode(daemon, root, "remember our build decision")
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert any("KQZDECIDED" in p.read_text(encoding="utf-8") for p in (root / "memory").glob("20*.md"))
    fake.call, fake.bodies = None, []
    recalled = opencode(daemon, root, "which build tool did we pick, ninja or make?")
    assert recalled.returncode == 0, recalled.stderr[-2000:]
    turns = [b for b in fake.bodies if "which build tool" in json.dumps(b)]
    assert turns and "KQZDECIDED" in json.dumps(turns[-1], ensure_ascii=False)
