"""Keyless end-to-end runs of the real Codex (@openai/codex, from the npm registry) configured by `memoryctl install
codex` against a small fake Responses API on 127.0.0.1 that records every request: the stable block and the recall
reach the model, and with the daemon killed a turn still completes. (Codex runs hooks only once they are trusted —
`/hooks` in the CLI; automation passes --dangerously-bypass-hook-trust, as here.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, short_tmp
from tests.fake_api import FakeAPI, sse
from tests.hostcli import CODEX, npx

pytestmark = pytest.mark.registry  # the host comes from the npm registry (tests/hostcli.py)

MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")


class FakeResponses(FakeAPI):
    """POST /v1/responses: a message "ok", or a call of the tool in ``call``: {name, arguments, namespace?}."""

    def __init__(self) -> None:
        super().__init__("/v1")
        self.call: dict[str, Any] | None = None

    def answer(self, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
        self.bodies.append(body)
        answered = any(i.get("type") == "function_call_output" for i in body.get("input", []))
        text = {"type": "output_text", "text": "ok", "annotations": []}
        item: dict[str, Any] = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [text],
        }
        if self.call and not answered:
            item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "status": "completed"}
            item.update({**self.call, "arguments": json.dumps(self.call["arguments"])})
        usage = {
            "input_tokens": 5,
            "output_tokens": 1,
            "total_tokens": 6,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        response = {"id": "resp_1", "object": "response", "output": []}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**response, "status": "in_progress"}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": [item], "usage": usage},
            },
        ]
        return sse([(e["type"], e) for e in events])


@pytest.fixture
def fake() -> Iterator[FakeResponses]:
    server = FakeResponses()
    yield server
    server.close()


@pytest.fixture
def project(daemon: Daemon, fake: FakeResponses) -> tuple[Path, str, Path]:
    root = short_tmp("cx")
    (root / ".git").mkdir()
    ws = daemon.call("workspace.add", {"path": str(root)})["workspace_id"]
    home = daemon.home / "codex-home"
    (home / ".codex").mkdir(parents=True)
    provider = f'[model_providers.fake]\nname = "fake"\nbase_url = "{fake.url}"\nwire_api = "responses"\nenv_key = "FAKE_KEY"\n'
    (home / ".codex" / "config.toml").write_text(f'model_provider = "fake"\nmodel = "m"\n\n{provider}')
    env = {**daemon.env, "HOME": str(home)}
    done = subprocess.run(
        [MEMORYCTL, "install", "codex", "--scope", "user"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return root, ws, home


def codex(d: Daemon, cwd: Path, home: Path, prompt: str, *, resume: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**d.env, "HOME": str(home), "FAKE_KEY": "not-a-key"}
    args = [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-hook-trust",
        *(["resume", "--last"] if resume else []),
    ]
    return npx(CODEX, *args, prompt, cwd=cwd, env=env)


def test_stable_and_recall_reach_the_model(
    daemon: Daemon, project: tuple[Path, str, Path], fake: FakeResponses
) -> None:
    root, ws, home = project
    (root / "memory" / "MEMORY.md").write_text("## Devices\n- KX-200 bench 3 KQZSTABLE\n", encoding="utf-8")
    daemon.call("remember", {"workspace": ws, "type": "decision", "text": "UART needs RTS/CTS above 115200 KQZRECALL"})
    done = codex(daemon, root, home, "what about the UART RTS/CTS?")
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]
    body = json.dumps(fake.bodies[-1], ensure_ascii=False)
    assert body.count("KQZSTABLE") == 1 and "KQZRECALL" in body

    # memory changes; the session resumes: its block once (Codex replays it), the same bytes
    (root / "memory" / "MEMORY.md").write_text("## Devices\n- changed since KQZNEWER\n", encoding="utf-8")
    again = codex(daemon, root, home, "and the BOOT0 pin?", resume=True)
    assert again.returncode == 0, again.stderr[-2000:]
    body = json.dumps(fake.bodies[-1], ensure_ascii=False)
    assert body.count("KQZSTABLE") == 1 and "KQZNEWER" not in body and "BOOT0" in body


def test_a_killed_daemon_never_breaks_a_turn(
    daemon: Daemon, project: tuple[Path, str, Path], fake: FakeResponses
) -> None:
    root, _, home = project
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(30)
    done = codex(daemon, root, home, "still there?")
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]
    assert "KQZ" not in json.dumps(fake.bodies)


def test_a_command_the_model_runs_is_observed(
    daemon: Daemon, project: tuple[Path, str, Path], fake: FakeResponses
) -> None:
    root, ws, home = project
    fake.call = {"name": "exec_command", "arguments": {"cmd": "echo KQZTOOLRAN"}}
    done = codex(daemon, root, home, "run a command")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "KQZTOOLRAN" in json.dumps(daemon.call("timeline", {"workspace": ws}), ensure_ascii=False)


def test_a_decision_stored_through_mcp_is_recalled_next_session(
    daemon: Daemon, project: tuple[Path, str, Path], fake: FakeResponses
) -> None:
    root, _, home = project
    # Codex names an MCP server's tools inside a namespace; its MCP server gets the daemon's socket through the
    # env_vars `memoryctl install codex` writes (Codex hands servers a trimmed environment)
    remember = {"text": "we chose ninja over make KQZDECIDED", "type": "decision"}
    fake.call = {"namespace": "mcp__memoryd", "name": "memory_remember", "arguments": remember}
    kept = codex(daemon, root, home, "remember our build decision")
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert any("KQZDECIDED" in p.read_text(encoding="utf-8") for p in (root / "memory").glob("20*.md"))
    fake.call = None
    recalled = codex(daemon, root, home, "which build tool did we pick, ninja or make?")
    assert recalled.returncode == 0, recalled.stderr[-2000:]
    assert "KQZDECIDED" in json.dumps(fake.bodies[-1], ensure_ascii=False)
