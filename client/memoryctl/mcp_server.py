"""``memoryctl mcp``: a stdio MCP server that gives an agent its project's memory.

Bound to one workspace — the project containing its working directory, or ``--workspace`` — for its whole life: no
tool takes a workspace and none offers the owner's ``scope: "all"`` view, so an agent reaches only the project it was
started in (docs/reference/mcp.md has the threat model). Every tool proxies one daemon method over the Unix
socket; the daemon is started if it is not running. A daemon error comes back as a tool error carrying its stable
name and hint, never as a crash of the server.

The official SDK (``mcp``, the ``memoryd[mcp]`` extra) is imported only here: its import takes about a second, and
no other verb may pay for it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator
from typing import Annotated, Any, BinaryIO, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp_types import ToolAnnotations
from pydantic import Field

from memoryctl import __version__
from memoryctl.rpc import ClientError, RemoteError, connect

INSTRUCTIONS = """\
This server is the project's long-term memory (memoryd): decisions, device quirks, error codes and procedures
kept in Markdown under memory/, and device rules under spec/memory/.
- Before answering a question about this project's past, devices or errors: memory_search (words or meaning, any
  language), then memory_get with the path and start_line a hit gave to read around it.
- When the user decides something or you learn a lasting fact: memory_remember (one entry, plain text, with
  keywords in English and Chinese).
- Evidence from tests, logs and measurements: memory_observe; consolidate evidence into rules with compile_prepare,
  your own answer in its response_schema, then compile_apply.
- rules_resolve answers the merged facts for a device model and firmware version.
- memory_forget hides a wrong entry (reversible); memory_context gives what a session should start with."""

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
APPENDS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
CHANGES = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)


class Daemon:
    """Calls to the daemon for one workspace: a connection per call, in a worker thread (the socket blocks)."""

    def __init__(self, socket: str, workspace: str, timeout: float) -> None:
        self.socket = socket
        self.workspace = workspace
        self.timeout = timeout

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"workspace": self.workspace, **{k: v for k, v in params.items() if v is not None}}

        def run() -> dict[str, Any]:
            with connect(self.socket, self.timeout, autostart=True) as conn:
                result: dict[str, Any] = conn.call(method, body)
                return result

        try:
            return await anyio.to_thread.run_sync(run)
        except RemoteError as exc:
            raise ToolError(_describe(exc.name, exc.message, exc.hint, exc.data)) from None
        except ClientError as exc:
            raise ToolError(_describe(exc.name, str(exc), exc.hint, {})) from None


def _describe(name: str, message: str, hint: str, data: dict[str, Any]) -> str:
    details = {k: v for k, v in data.items() if k not in ("name", "hint")}
    text = f"{name}: {message}"
    if details:
        text += f" {details}"
    return f"{text}\nhint: {hint}" if hint else text


def build(daemon: Daemon) -> MCPServer:
    server = MCPServer(
        name="memoryd",
        title="memoryd project memory",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )

    @server.tool(annotations=READ_ONLY)
    async def memory_search(
        query: Annotated[str, Field(description="Any text, any language: words, a question, an error code.")],
        limit: Annotated[int, Field(ge=1, le=50, description="Hits to return.")] = 8,
        mode: Annotated[
            Literal["bm25", "vector", "hybrid"] | None,
            Field(description="bm25: words only; vector: meaning only; default: both, fused."),
        ] = None,
        also: Annotated[
            list[str] | None,
            Field(
                max_length=4,
                description="The same question in other words and in the other language: pass an English and a "
                "Chinese phrasing (the notes are in both). Each is searched and fused into one ranking.",
            ),
        ] = None,
        since: Annotated[
            str | None,
            Field(description="YYYY-MM-DD: prefer entries from this day on (a question's own dates work too)."),
        ] = None,
        until: Annotated[str | None, Field(description="YYYY-MM-DD: prefer entries up to this day.")] = None,
    ) -> dict[str, Any]:
        """Search this project's memory. Ask with `also`: the question again in English and in Chinese (other
        words too), since notes are written in both. Dates in the question ("on 2026-02-24", "last Tuesday",
        "上周") are read as a window on entry dates. Each hit names a passage: `path` (relative to the project) and
        `start_line`/`lines` — pass them to memory_get to read it and what surrounds it; `heading` is its section,
        `snippet` the passage with matched words in **bold**, `via` whether words or meaning found it, `relevance`
        how well it answers (0-1), `item_id` the entry it lies in (ent_…, what memory_forget takes; absent for text
        memory_remember did not write). `degraded` says when meaning could not be used (and why)."""
        params = {"query": query, "limit": limit, "mode": mode, "also": also, "since": since, "until": until}
        return await daemon.call("search", params)

    @server.tool(annotations=READ_ONLY)
    async def memory_get(
        path: Annotated[str, Field(description="A path as memory_search returned it, e.g. memory/2026-01-01.md.")],
        from_line: Annotated[int, Field(ge=1, description="First line to read (a hit's start_line).")] = 1,
        lines: Annotated[int, Field(ge=1, le=200, description="How many lines.")] = 40,
    ) -> dict[str, Any]:
        """Read lines of a memory file of this project (Markdown under memory/, rules under spec/memory/)."""
        return await daemon.call("get", {"path": path, "from_line": from_line, "lines": lines})

    @server.tool(annotations=APPENDS)
    async def memory_remember(
        text: Annotated[str, Field(description="The entry: one decision, fact or procedure, in plain text.")],
        type: Annotated[
            Literal["decision", "event", "summary", "note"], Field(description="What kind of entry it is.")
        ] = "note",
        reason: Annotated[str | None, Field(description="Why (written under the text).")] = None,
        followup: Annotated[str | None, Field(description="What to do next, if anything.")] = None,
        keywords: Annotated[
            list[str] | None,
            Field(
                max_length=32,
                description="Words it should also be found by, in English AND in Chinese: the topic, names, "
                'synonyms and their translations (["uart timeout", "serial port", "串口", "超时"]).',
            ),
        ] = None,
        confidence: Annotated[
            float | None, Field(ge=0, le=1, description="How sure it is, 0-1 (default 1.0): kept with its item.")
        ] = None,
        evidence: Annotated[
            list[str] | None,
            Field(max_length=100, description="What it rests on: observation ids (obs_…), entry ids (ent_…)."),
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Any small JSON object kept with the entry's item.")
        ] = None,
    ) -> dict[str, Any]:
        """Append an entry to today's memory file (memory/YYYY-MM-DD.md); it is searchable at once. Pass
        `keywords` in English and in Chinese (whichever language the text is in): they are kept visibly as a
        `Keywords:` line of the entry and make it findable by a question in either language. Returns its `id`
        (memory_forget takes it) and where it was written. <private>…</private> spans are never stored."""
        params = {
            "text": text,
            "type": type,
            "reason": reason,
            "followup": followup,
            "keywords": keywords,
            "confidence": confidence,
            "evidence": evidence,
            "metadata": metadata,
        }
        return await daemon.call("remember", params)

    @server.tool(annotations=APPENDS)
    async def memory_observe(
        text: Annotated[str, Field(description="The evidence: what was seen, measured or reported.")],
        kind: Annotated[
            str, Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$", description="test_result, log, measurement, report, …")
        ],
        source: Annotated[str, Field(description="Who produced it: pytest, a log file, the user, …")] = "agent",
        model_id: Annotated[str | None, Field(description="The device model it is about, if any.")] = None,
        fw_version: Annotated[str | None, Field(description="The firmware version it is about, if any.")] = None,
        tags: Annotated[list[str] | None, Field(description="Free labels.")] = None,
    ) -> dict[str, Any]:
        """Record one observation (evidence) for later consolidation into device rules (compile_prepare)."""
        return await daemon.call(
            "observe",
            {
                "text": text,
                "kind": kind,
                "source": source,
                "model_id": model_id,
                "fw_version": fw_version,
                "tags": tags,
            },
        )

    @server.tool(annotations=CHANGES)
    async def memory_forget(
        id: Annotated[
            str, Field(description="The entry's id (ent_…), as memory_remember returned it or a hit's item_id.")
        ],
        reason: Annotated[str | None, Field(description="Why: recorded in the history.")] = None,
    ) -> dict[str, Any]:
        """Hide a wrong or obsolete entry from search and context. It stays in its file for audit; the answer's
        `run_id` undoes it (`memoryctl restore RUN_ID`)."""
        return await daemon.call("forget", {"id": id, "reason": reason})

    @server.tool(annotations=READ_ONLY)
    async def rules_resolve(
        model_id: Annotated[str, Field(description="The device model, e.g. KX-200.")],
        fw_version: Annotated[str, Field(description="Its firmware version, e.g. 1.2.3.")],
        instance_id: Annotated[str | None, Field(description="One bench or unit, for its overrides.")] = None,
    ) -> dict[str, Any]:
        """The merged facts (baud rates, timeouts, required sequences…) for a device model and firmware version,
        and for each fact which rule won and why (`trace`)."""
        return await daemon.call(
            "resolve", {"model_id": model_id, "fw_version": fw_version, "instance_id": instance_id}
        )

    @server.tool(annotations=READ_ONLY)
    async def memory_context(
        query_text: Annotated[
            str | None, Field(description="The user's prompt, for recall; none: stable part only.")
        ] = None,
        session_id: Annotated[
            str | None, Field(description="Keeps the stable part byte-identical all session.")
        ] = None,
        model_id: Annotated[str | None, Field(description="With fw_version: include that device's rules.")] = None,
        fw_version: Annotated[str | None, Field(description="The device's firmware version.")] = None,
    ) -> dict[str, Any]:
        """What a session should know: `stable` (resolved rules and the long-term memory, MEMORY.md) and `dynamic`
        (passages recalled for query_text, recent notes when it asks about the past)."""
        return await daemon.call(
            "context",
            {"query_text": query_text, "session_id": session_id, "model_id": model_id, "fw_version": fw_version},
        )

    @server.tool(annotations=APPENDS)
    async def compile_prepare(
        model_id: Annotated[str | None, Field(description="Only observations of this model.")] = None,
    ) -> dict[str, Any]:
        """Start a consolidation: returns a `request` with the daily notes not yet folded into MEMORY.md, MEMORY.md
        and INSIGHTS.md as they are, the open questions, the observations and the current rules, `instructions`
        and a `response_schema`. Answer it yourself in that schema (memory_update, daily_sections, history_entry;
        rules where the evidence supports them), then call compile_apply with your answer. Nothing to consolidate:
        `request_id` is null."""
        return await daemon.call("compile.prepare", {"model_id": model_id})

    @server.tool(annotations=CHANGES)
    async def compile_apply(
        response: Annotated[
            dict[str, Any], Field(description="Your answer to compile_prepare's request, in its schema.")
        ],
        dry_run: Annotated[bool, Field(description="Check and show what would change; write nothing.")] = False,
    ) -> dict[str, Any]:
        """Apply your answer to a compile request as one recorded change (`memoryctl restore RUN_ID` undoes it):
        memory_update is merged into MEMORY.md section by section (a section you leave out is kept), the daily
        sections and history line written, every rule checked (provenance must cite the request's observations;
        low confidence goes to candidates for review). Problems come back as an error listing each one; fix them
        and call again."""
        return await daemon.call("compile.apply", {"response": response, "dry_run": dry_run})

    return server


# --- stdio, bounded (issue 19, 2.10: a 200 MB line took 974 MB; a message nested ~200 deep got no answer) -------

MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # one JSON-RPC message (a line); a compile response is at most 8 MiB
MAX_DEPTH = 100  # arrays and objects inside each other; tool arguments need a handful
_TOKENS = re.compile(rb'[\[\]{}"\\]')


def too_deep(line: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``line`` nests arrays and objects more than ``limit`` deep (a linear scan: no parse,
    no recursion; brackets inside strings do not count)."""
    if line.count(b"[") + line.count(b"{") <= limit:
        return False
    depth, in_string, skip = 0, False, -1
    for match in _TOKENS.finditer(line):
        at, token = match.start(), match.group()
        if at == skip:  # the character after a backslash
            continue
        if in_string:
            if token == b"\\":
                skip = at + 1
            elif token == b'"':
                in_string = False
        elif token == b'"':
            in_string = True
        elif token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


def _error_line(code: int, message: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}) + "\n"


class _Stdout:
    """Standard output for the SDK's writer and for our own error answers: whole lines, one writer at a time."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._lock = anyio.Lock()

    async def write(self, text: str) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self._raw.write, text.encode("utf-8"))

    async def flush(self) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self._raw.flush)


class _Stdin:
    """Standard input as the SDK reads it (``async for line``), with every line bounded: a line over
    MAX_MESSAGE_BYTES is skipped to its end and one nested over MAX_DEPTH is dropped, each answered with a
    JSON-RPC error (id null: it cannot be read) instead of silence or unbounded memory."""

    def __init__(self, raw: BinaryIO, out: _Stdout) -> None:
        self._raw = raw
        self._out = out

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await anyio.to_thread.run_sync(self._raw.readline, MAX_MESSAGE_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_MESSAGE_BYTES and not line.endswith(b"\n"):
                del line
                while (rest := await anyio.to_thread.run_sync(self._raw.readline, 1 << 20)) and not rest.endswith(
                    b"\n"
                ):
                    pass
                await self._refuse(-32600, f"Invalid Request: a message longer than {MAX_MESSAGE_BYTES} bytes")
                continue
            if too_deep(line):
                await self._refuse(-32600, f"Invalid Request: nested more than {MAX_DEPTH} levels deep")
                continue
            yield line.decode("utf-8", "replace")

    async def _refuse(self, code: int, message: str) -> None:
        await self._out.write(_error_line(code, message))
        await self._out.flush()


async def _serve(server: MCPServer) -> None:
    out = _Stdout(sys.stdout.buffer)
    stdin: Any = _Stdin(sys.stdin.buffer, out)
    stdout: Any = out
    lowlevel = server._lowlevel_server
    async with stdio_server(stdin, stdout) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def run(socket: str, workspace: str, timeout: float) -> int:
    server = build(
        Daemon(socket, os.path.abspath(workspace) if not workspace.startswith("ws_") else workspace, timeout)
    )
    anyio.run(_serve, server)
    return 0
