"""`memoryctl mcp` driven by the official SDK's client over stdio, in both handshake eras (2025's initialize, and
2026-07-28's server/discover): the tools, their annotations and schemas, a round trip through the daemon, errors as
tool errors, and the binding to one workspace."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent

from tests.conftest import Daemon, short_tmp

pytestmark = pytest.mark.anyio

TOOLS = {
    "memory_search",
    "memory_get",
    "memory_remember",
    "memory_observe",
    "memory_forget",
    "rules_resolve",
    "memory_context",
    "compile_prepare",
    "compile_apply",
}


def server(d: Daemon, cwd: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "memoryctl", "mcp", *extra], env=d.env, cwd=cwd)


def text_of(result: CallToolResult) -> str:
    """The text of a tool result's first block (a tool error's message)."""
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    return data


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_tools_and_a_round_trip(daemon: Daemon, workspace: tuple[Path, str], mode: str) -> None:
    root, ws = workspace
    async with Client(server(daemon, root), mode=mode) as client:
        era = client.session.discover_result if mode == "auto" else client.session.initialize_result
        assert era is not None  # the handshake this era uses
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for name, tool in tools.items():
            properties = tool.input_schema.get("properties", {})
            assert "workspace" not in properties and "scope" not in properties, name  # bound to one project
            assert tool.description and tool.annotations is not None and tool.output_schema is not None, name
        search, forget = tools["memory_search"].annotations, tools["memory_forget"].annotations
        assert search is not None and search.read_only_hint is True
        assert forget is not None and forget.destructive_hint is True
        assert "memory_get" in (tools["memory_search"].description or "")
        # keywords in both languages, asked for by the tool, kept visibly with the entry (issue 21 item 4)
        assert "keywords" in tools["memory_remember"].input_schema["properties"]
        assert "Chinese" in (tools["memory_remember"].description or "")

        entry = structured(
            await client.call_tool(
                "memory_remember",
                {
                    "text": "串口 ERR_UART_TIMEOUT_0x3F：开启硬件流控后消失",
                    "type": "decision",
                    "keywords": ["flow control", "串口"],
                },
            )
        )
        assert entry["path"].startswith("memory/") and entry["id"].startswith("ent_")
        assert "  Keywords: flow control, 串口" in (root / entry["path"]).read_text()
        hits = structured(await client.call_tool("memory_search", {"query": "ERR_UART_TIMEOUT_0x3F"}))["hits"]
        assert hits[0]["path"] == entry["path"] and hits[0]["workspace_id"] == ws
        assert hits[0]["item_id"] == entry["id"]  # what memory_forget takes, below
        # the agent's own other phrasing: the tool asks for English and Chinese, and fuses them into one ranking
        assert {"also", "since", "until"} <= set(tools["memory_search"].input_schema["properties"])
        assert "Chinese" in (tools["memory_search"].description or "")
        also = {"query": "why did the serial line time out", "also": ["串口 超时 流控"], "mode": "bm25"}
        assert structured(await client.call_tool("memory_search", also))["hits"][0]["item_id"] == entry["id"]
        text = structured(
            await client.call_tool(
                "memory_get", {"path": hits[0]["path"], "from_line": hits[0]["start_line"], "lines": 1}
            )
        )["text"]
        assert "ERR_UART_TIMEOUT_0x3F" in text

        # a daemon error is a tool error with its stable name and hint, and the server goes on
        failed = await client.call_tool("memory_get", {"path": "../outside.md"})
        assert failed.is_error and "MEMORY_PATH_TRAVERSAL" in text_of(failed) and "hint:" in text_of(failed)
        failed = await client.call_tool("memory_forget", {"id": "ent_0000000000000000"})
        assert failed.is_error and "MEMORY_ITEM_NOT_FOUND" in text_of(failed)
        gone = structured(await client.call_tool("memory_forget", {"id": hits[0]["item_id"]}))
        assert (
            gone["run_id"]
            and not structured(await client.call_tool("memory_search", {"query": "ERR_UART_TIMEOUT_0x3F"}))["hits"]
        )
        assert structured(await client.call_tool("memory_context", {"query_text": "what about the UART?"}))["stable"]


async def test_the_server_reaches_only_its_own_workspace(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ = workspace
    other = short_tmp("ws")
    other_ws = daemon.call("workspace.add", {"path": str(other)})["workspace_id"]
    daemon.call("remember", {"workspace": other_ws, "type": "note", "text": "the other project's secret KQZSECRET"})
    async with Client(server(daemon, root), mode="legacy") as client:
        found = structured(await client.call_tool("memory_search", {"query": "KQZSECRET"}))
        assert found["hits"] == []
        # extra arguments are not a way out: the tool's schema has no workspace, and a stray one is ignored
        found = structured(await client.call_tool("memory_search", {"query": "KQZSECRET", "workspace": other_ws}))
        assert found["hits"] == []


async def test_a_daemon_that_is_down_is_a_tool_error(home: Path) -> None:
    from tests.conftest import daemon_env

    env = daemon_env(home)
    env["MEMORYD_SOCKET"] = "/dev/null/memoryd.sock"  # no daemon there, and none can be started there
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memoryctl", "mcp", "--timeout", "2"], env=env, cwd=home
    )
    async with Client(params, mode="legacy") as client:
        assert len((await client.list_tools()).tools) == len(TOOLS)
        result = await client.call_tool("memory_search", {"query": "anything"})
        assert result.is_error and "DAEMON_UNAVAILABLE" in text_of(result)


def _inspector(d: Daemon, cwd: Path, *method: str) -> Any:
    """`npx @modelcontextprotocol/inspector --cli` against `memoryctl mcp`; its JSON answer."""
    import json

    from tests.hostcli import INSPECTOR, npx

    keys = ("MEMORYD_HOME", "PYTHONPATH", "MEMORYD_EMBEDDING_PROVIDER")
    env_args = [arg for key in keys for arg in ("-e", f"{key}={d.env[key]}")]
    server = ["--", sys.executable, "-m", "memoryctl", "mcp", "--method", *method]
    done = npx(INSPECTOR, "--cli", *env_args, *server, cwd=cwd, env=d.env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.registry
def test_the_mcp_inspector_lists_and_calls_tools(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    daemon.call("remember", {"workspace": ws, "type": "note", "text": "inspector sees KQZINSPECT"})
    listed = _inspector(daemon, root, "tools/list")
    assert {t["name"] for t in listed["tools"]} == TOOLS
    called = _inspector(daemon, root, "tools/call", "--tool-name", "memory_search", "--tool-arg", "query=KQZINSPECT")
    assert not called.get("isError") and "KQZINSPECT" in called["structuredContent"]["hits"][0]["snippet"]
    unknown = _inspector(daemon, root, "tools/call", "--tool-name", "no_such_tool")  # still exits 0
    assert unknown.get("isError") is True


def _answers(proc: subprocess.Popen[bytes], count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The next ``count`` lines the server writes (fails when they do not come within ``timeout``)."""
    assert proc.stdout is not None
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"no answer within {timeout} s (got {out})"
        out.append(json.loads(proc.stdout.readline()))
    return out


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
def test_a_line_too_long_or_too_deep_is_answered_and_skipped(
    daemon: Daemon, workspace: tuple[Path, str], anyio_backend: str
) -> None:
    """Issue 19, 2.10: a message nested ~200 deep got no answer at all; a 200 MB line took 974 MB."""
    root, _ws = workspace
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryctl", "mcp"],
        cwd=root,
        env=daemon.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None
    try:
        deep = (
            '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "memory_observe", "arguments": {"text": "x", "data": '
            + '{"a": [' * 120
            + "1"
            + "]}" * 120
            + "}}}\n"
        )
        proc.stdin.write(deep.encode())
        proc.stdin.flush()
        (answer,) = _answers(proc, 1)
        assert answer["id"] is None and answer["error"]["code"] == -32600 and "nested" in answer["error"]["message"]
        chunk = b"x" * (1 << 20)
        for _ in range(20):  # 20 MB, one line
            proc.stdin.write(chunk)
        proc.stdin.write(b"\n")
        ping = {"jsonrpc": "2.0", "id": 8, "method": "ping"}
        proc.stdin.write(json.dumps(ping).encode() + b"\n")
        proc.stdin.flush()
        too_long, pong = _answers(proc, 2)
        assert too_long["error"]["code"] == -32600 and "longer than" in too_long["error"]["message"]
        assert pong["id"] == 8 and "result" in pong  # and the server goes on
    finally:
        proc.stdin.close()
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()
