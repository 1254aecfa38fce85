"""Keyless end-to-end runs of the real Codex (@openai/codex, from the npm registry) configured by `memoryctl install
codex` against a small fake Responses API on 127.0.0.1 that records every request: the stable block and the recall
reach the model, and with the daemon killed a turn still completes. (Codex runs hooks only once they are trusted —
`/hooks` in the CLI; automation passes --dangerously-bypass-hook-trust, as here.)"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, short_tmp
from tests.fake_api import FakeAPI, sse
from tests.hostcli import CODEX, npx

pytestmark = pytest.mark.registry  # the host comes from the npm registry (tests/hostcli.py)

MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")
# Codex starts MCP servers beside the session and, under load, may send the first model request before memoryd's
# tools are listed; a `required` server is waited for at session start (a failure to start ends the run): for the
# tests that need the tools. (`memoryctl install codex` leaves it optional: memoryd must never stop a session.)
WAIT_FOR_MEMORYD = ("-c", "mcp_servers.memoryd.required=true")


Script = Callable[[dict[str, Any]], dict[str, Any] | str]  # a request body → a tool call, or the reply's text


class FakeResponses(FakeAPI):
    """POST /v1/responses: what ``script`` gives for the request body — a call of a tool ({name, arguments,
    namespace?, call_id?}) or a message with that text. By default: a call of the tool in ``call`` until its output
    came back, else "ok"."""

    def __init__(self) -> None:
        super().__init__("/v1")
        self.call: dict[str, Any] | None = None
        self.script: Script = self._call_once

    def _call_once(self, body: dict[str, Any]) -> dict[str, Any] | str:
        answered = any(i.get("type") == "function_call_output" for i in body.get("input", []))
        return self.call if self.call and not answered else "ok"

    def answer(self, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
        self.bodies.append(body)
        reply = self.script(body)
        item: dict[str, Any]
        if isinstance(reply, str):
            text = {"type": "output_text", "text": reply, "annotations": []}
            item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [text]}
        else:
            item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "status": "completed"}
            item.update({**reply, "arguments": json.dumps(reply["arguments"], ensure_ascii=False)})
        usage = {
            "input_tokens": 5,
            "output_tokens": 1,
            "total_tokens": 6,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        response = {"id": f"resp_{len(self.bodies)}", "object": "response", "output": []}
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


def codex(
    d: Daemon, cwd: Path, home: Path, prompt: str, *options: str, resume: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {**d.env, "HOME": str(home), "FAKE_KEY": "not-a-key"}
    args = [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-hook-trust",
        *options,
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
    kept = codex(daemon, root, home, "remember our build decision", *WAIT_FOR_MEMORYD)
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert any("KQZDECIDED" in p.read_text(encoding="utf-8") for p in (root / "memory").glob("20*.md"))
    fake.call = None
    recalled = codex(daemon, root, home, "which build tool did we pick, ninja or make?")
    assert recalled.returncode == 0, recalled.stderr[-2000:]
    assert "KQZDECIDED" in json.dumps(fake.bodies[-1], ensure_ascii=False)


def test_the_stop_nudge_consolidates_into_memory_md_and_the_next_session_holds_it(
    daemon: Daemon, project: tuple[Path, str, Path], fake: FakeResponses
) -> None:
    """Issue 22 item 11, for Codex: notes from earlier sessions wait; at the end of the turn the Stop hook asks for
    a consolidation (Codex continues the turn with its reason); the model prepares and applies one through the MCP
    tools with a memory_update; MEMORY.md is merged (the section the answer left out is kept), and the next
    session's stable context holds the merged bullet."""
    root, ws, home = project
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").write_text(
        "# Memory\n\n## Devices\n- KX-200 boots from QSPI KQZKEPT\n\n## Team\n- Mei owns the bench KQZTEAM\n",
        encoding="utf-8",
    )
    for text in ("KX-200 needs RTS/CTS above 115200 baud", "bench-3 串口超时改成 500 ms"):
        daemon.call("remember", {"workspace": ws, "type": "decision", "text": text})
    daemon.env["MEMORYD_CONSOLIDATE_AFTER"] = "2"  # the hooks read it (two notes wait)

    def outputs(body: dict[str, Any]) -> dict[str, str]:
        return {
            str(i.get("call_id")): json.dumps(i.get("output"), ensure_ascii=False)
            for i in body.get("input", [])
            if i.get("type") == "function_call_output"
        }

    def script(body: dict[str, Any]) -> dict[str, Any] | str:
        done = outputs(body)
        if "call_apply" in done:
            return "consolidated"
        if "call_prepare" in done:
            found = re.search(r'request_id\\*"\s*:\s*\\*"(cr_[A-Za-z0-9_]+)', done["call_prepare"])
            assert found, done["call_prepare"][:2000]
            response: dict[str, Any] = {
                "request_id": found.group(1),
                "provenance_summary": {"observation_ids_used": []},
                "memory_update": "## Devices\n- KX-200 needs RTS/CTS above 115200 baud KQZMERGED\n",
                "daily_sections": {"Decisions": ["RTS/CTS on KX-200", "串口超时 500 ms"]},
                "history_entry": "KX-200 serial settings consolidated",
            }
            return {
                "namespace": "mcp__memoryd",
                "name": "compile_apply",
                "call_id": "call_apply",
                "arguments": {"response": response},
            }
        if "waiting to be consolidated" in json.dumps(body.get("input"), ensure_ascii=False):
            return {"namespace": "mcp__memoryd", "name": "compile_prepare", "call_id": "call_prepare", "arguments": {}}
        return "done"

    fake.script = script
    # compile_apply asks first (memoryctl install codex) and `codex exec` runs with approval policy "never", where a
    # tool that asks is refused (below): a script approves it for its run; the interactive CLI asks the person
    approve = ("-c", 'mcp_servers.memoryd.tools.compile_apply.approval_mode="approve"')
    ran = codex(daemon, root, home, "wrap up for today", *WAIT_FOR_MEMORYD, *approve)
    assert ran.returncode == 0 and "consolidated" in ran.stdout, ran.stderr[-2000:]
    assert any(t.get("name") == "mcp__memoryd" for t in fake.bodies[0].get("tools", []))  # waited for (required)
    assert "Stop Blocked" in ran.stderr  # Codex ran the hook and continued the turn with its reason …
    nudged = [i for i in fake.bodies[-1]["input"] if "waiting to be consolidated" in json.dumps(i, ensure_ascii=False)]
    assert len(nudged) == 1 and "<hook_prompt" in json.dumps(nudged[0]), nudged  # … once (stop_hook_active)
    memory = (root / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert "KQZMERGED" in memory and "KQZKEPT" in memory and "KQZTEAM" in memory, (
        memory,
        [json.dumps(b["input"][-1], ensure_ascii=False)[:600] for b in fake.bodies],
        ran.stderr[-1500:],
    )
    assert memory.index("KQZKEPT") < memory.index("KQZMERGED") < memory.index("## Team")  # merged into its section
    assert "consolidated" in (root / "memory" / "HISTORY.md").read_text(encoding="utf-8")
    rules = daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]
    assert rules["unconsolidated_notes"] == 0

    fake.bodies.clear()
    fake.script = lambda body: "ok"
    again = codex(daemon, root, home, "what do we know about the KX-200 UART?")
    assert again.returncode == 0, again.stderr[-2000:]
    first = json.dumps(fake.bodies[0], ensure_ascii=False)
    assert "KQZMERGED" in first and "KQZKEPT" in first

    # new notes wait; without the approval the nudge still leads to compile_apply, which Codex refuses (the model is
    # told why) and nothing is written: the product's default is not weakened
    for text in ("flash KX-200 with BOOT0 high", "bench-3 的电源是 5 V"):
        daemon.call("remember", {"workspace": ws, "type": "decision", "text": text})
    fake.script = script
    before = (root / "memory" / "MEMORY.md").read_bytes()
    refused = codex(daemon, root, home, "wrap up for today", *WAIT_FOR_MEMORYD)
    assert refused.returncode == 0 and "Stop Blocked" in refused.stderr, refused.stderr[-2000:]
    told = outputs(fake.bodies[-1])["call_apply"]
    assert "requires approval, but approval policy is never" in told, told
    assert (root / "memory" / "MEMORY.md").read_bytes() == before
