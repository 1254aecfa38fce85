"""The one table of error names and codes.

Protocol faults use the JSON-RPC 2.0 codes. Application errors carry a stable symbolic name in
``error.data.name``, a code that is never reused (retired names stay in the table with ``retired`` saying why and
what answers instead; nothing raises them), and a hint. ``docs/reference/errors.md`` is generated from this table
and a test fails when they differ; another fails when a name that is not retired is raised nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memoryd.names import ErrorName


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    name: str
    code: int
    message: str
    hint: str
    exit_code: int = 1  # memoryctl's exit status for this error
    retired: str = ""  # why nothing raises it any more, and what answers instead ("" = in use)


PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

_SPECS = [
    # JSON-RPC protocol errors: data.name is set for them too, so clients can switch on names only.
    ErrorSpec("PARSE_ERROR", PARSE_ERROR, "Parse error", "Send one JSON value per line, UTF-8 encoded.", 5),
    ErrorSpec(
        "INVALID_REQUEST",
        INVALID_REQUEST,
        "Invalid Request",
        'A request is an object with "jsonrpc": "2.0", a string "method" and optional "params"/"id".',
        5,
    ),
    ErrorSpec(
        "REQUEST_TOO_LARGE",
        INVALID_REQUEST,
        "Request line too long",
        "Keep each request under the max_line_bytes setting; split batches.",
        5,
    ),
    ErrorSpec(
        "METHOD_NOT_FOUND",
        METHOD_NOT_FOUND,
        "Method not found",
        "See docs/reference/methods.md for the method names.",
        5,
    ),
    ErrorSpec(
        "INVALID_PARAMS",
        INVALID_PARAMS,
        "Invalid params",
        "error.data.errors lists each problem with its location; see docs/reference/methods.md.",
        2,
    ),
    ErrorSpec(
        "INTERNAL_ERROR",
        INTERNAL_ERROR,
        "Internal error",
        "The daemon logged the details; run `memoryctl status` and check the daemon log.",
        1,
    ),
    # Application errors: codes from -32000 down, never reused.
    ErrorSpec(
        "MEMORY_WORKSPACE_NOT_FOUND",
        -32001,
        "Workspace not found",
        "Register the project with `memoryctl init` (or workspace.add), or pass --workspace PATH|ID.",
        1,
    ),
    ErrorSpec(
        "MEMORY_FILE_NOT_FOUND",
        -32002,
        "Memory file not found",
        "Use a path returned by search, relative to the workspace (e.g. memory/2026-01-01.md); a memory file named "
        "without memory/ (MEMORY.md) is answered with the path that was meant.",
        1,
    ),
    ErrorSpec(
        "MEMORY_PATH_TRAVERSAL",
        -32003,
        "Path is outside the workspace memory tree",
        "Paths must stay inside the workspace's memory/ tree and name a Markdown file.",
        4,
    ),
    ErrorSpec(
        "MEMORY_INDEX_CORRUPTED",
        -32004,
        "Index is corrupted",
        "Run `memoryctl index --full`; the index is rebuilt from the Markdown files.",
        1,
    ),
    ErrorSpec(
        "MEMORY_FTS_DISABLED",
        -32005,
        "SQLite FTS5 is not available",
        "Reinstall memoryd so the APSW wheel (which bundles SQLite with FTS5) is used.",
        1,
        retired="The APSW wheel memoryd depends on bundles SQLite with FTS5, so it cannot be missing from a working "
        "install; `status` reports the probe (`probes.fts5`) and an index that cannot be opened answers "
        "MEMORY_INDEX_FAILED.",
    ),
    ErrorSpec(
        "MEMORY_WRITE_FAILED",
        -32006,
        "Writing a memory file failed",
        "Check the workspace is writable and has free space; nothing was half-written.",
        1,
    ),
    ErrorSpec(
        "MEMORY_INDEX_FAILED",
        -32007,
        "Indexing failed",
        "Run `memoryctl status`; `memoryctl index --full` rebuilds from the files.",
        1,
    ),
    ErrorSpec(
        "MEMORY_SEARCH_FAILED",
        -32008,
        "Search failed",
        "Run `memoryctl status`; `memoryctl index --full` rebuilds the index.",
        1,
    ),
    ErrorSpec(
        "MEMORY_READ_FAILED",
        -32009,
        "Reading a memory file failed",
        "Check the file's permissions and encoding (UTF-8).",
        1,
    ),
    ErrorSpec(
        "MEMORY_STATUS_FAILED",
        -32010,
        "Status could not be computed",
        "Check the daemon log; restart the daemon if it persists.",
        1,
        retired="`status` never fails as a whole: what is wrong with a workspace is in its `error` and "
        "`recommended` fields, and with vectors in `vectors.problem`.",
    ),
    ErrorSpec(
        "MEMORY_FORBIDDEN",
        -32011,
        "Forbidden",
        "This needs the owner token (config/owner.token), sent by memoryctl as owner_token; scope 'all' is read-only.",
        4,
    ),
    ErrorSpec(
        "MEMORY_TOO_LARGE",
        -32012,
        "Too large",
        "Shorten the text or split it into several entries; see the size settings.",
        1,
    ),
    ErrorSpec(
        "MEMORY_COMPILE_INVALID",
        -32013,
        "Compile response is invalid",
        "error.data.violations lists every problem as a JSON pointer and a reason.",
        1,
    ),
    ErrorSpec(
        "MEMORY_PROVENANCE_UNKNOWN",
        -32014,
        "Unknown observation id in provenance",
        "Cite only observation ids returned by observe / listed in the compile request.",
        1,
    ),
    ErrorSpec(
        "MEMORY_CONFLICT",
        -32015,
        "Conflicting change",
        "Someone changed the file meanwhile; re-read it and retry.",
        1,
    ),
    ErrorSpec(
        "MEMORY_SHUTTING_DOWN",
        -32016,
        "The daemon is shutting down",
        "Retry in a moment; start it again with `memoryd serve` or `memoryctl --autostart`.",
        3,
    ),
    ErrorSpec(
        "MEMORY_WORKSPACE_INVALID",
        -32017,
        "Not a usable workspace directory",
        "Pass an existing directory (not a file, not the filesystem root), as an absolute path.",
        1,
    ),
    ErrorSpec(
        "MEMORY_EMPTY",
        -32018,
        "Nothing to store",
        "The text is empty once <private>…</private> spans are removed; private text is never stored.",
        1,
    ),
    ErrorSpec(
        "MEMORY_RULE_NOT_FOUND",
        -32019,
        "No such rule",
        "List rules with `memoryctl rules search` or candidates with `memoryctl candidates list`.",
        1,
    ),
    ErrorSpec(
        "MEMORY_REVISION_NOT_FOUND",
        -32020,
        "No such revision of this rule",
        "`memoryctl rules show RULE_ID` lists its history; revisions are kept as backups by every change.",
        1,
    ),
    ErrorSpec(
        "MEMORY_VERSION_INVALID",
        -32021,
        "Not a firmware version",
        "Use a version like 1.2.3, 1.2, v1.2.3 or 1.3.0-rc.1 (docs/reference/rules.md).",
        1,
    ),
    ErrorSpec(
        "MEMORY_BUSY",
        -32022,
        "The daemon is at its connection limit (or too many replies wait for clients to read them)",
        "Try again in a moment; close idle connections, or raise the setting the error's data names "
        "(max_connections, max_unsent_reply_bytes).",
        3,
    ),
    ErrorSpec(
        "MEMORY_WORKSPACE_LOCKED",
        -32023,
        "Another memoryd holds this workspace's write lock",
        "Stop the other daemon (error.data names its pid and socket) or use it; this one serves the workspace "
        "read-only.",
        1,
    ),
    ErrorSpec(
        "MEMORY_FILE_REFUSED",
        -32024,
        "Not a file the daemon will read",
        "Only regular files within the size limits are read (no FIFOs, devices or symlink loops); "
        "see `memoryctl validate`.",
        1,
    ),
    ErrorSpec(
        "REPLY_TOO_LARGE",
        -32025,
        "Reply too large",
        "Ask for less (a smaller limit or fewer batch members); replies are capped by the max_reply_bytes setting.",
        1,
    ),
    ErrorSpec(
        "MEMORY_ITEM_NOT_FOUND",
        -32026,
        "No such memory item",
        "Item ids are what remember answered (ent_…); they are listed in data/memory/items.jsonl.",
        1,
    ),
    ErrorSpec(
        "MEMORY_RUN_NOT_FOUND",
        -32027,
        "No such recorded change",
        "Run ids are in data/memory/history.jsonl; `memoryctl timeline` lists the changes.",
        1,
    ),
    ErrorSpec(
        "MEMORY_QUESTION_NOT_FOUND",
        -32041,
        "No such open question",
        "Open questions are shown by context (dynamic.questions) and kept in "
        "data/memory/observability/questions.jsonl; an answered one is closed.",
        1,
    ),
    ErrorSpec(
        "BATCH_TOO_LARGE",
        -32030,
        "Batch has too many members",
        "Send at most max_batch_members requests in one batch (error.data.limit); split it into several lines.",
        5,
    ),
]

SPECS: dict[str, ErrorSpec] = {spec.name: spec for spec in _SPECS}
assert len({s.code for s in _SPECS if s.code <= -32000 and s.code > -32100}) == len(
    [s for s in _SPECS if s.code <= -32000 and s.code > -32100]
), "application error codes must be unique"


class AppError(Exception):
    """An error the caller can act on. ``name`` is a key of SPECS, not retired (mypy checks it: ``ErrorName`` is
    generated from the table into memoryd/names.py)."""

    def __init__(self, name: ErrorName, message: str | None = None, *, hint: str | None = None, **data: Any) -> None:
        spec = SPECS[name]
        if spec.retired:
            raise ValueError(f"{name} is retired: {spec.retired}")
        self.spec = spec
        self.name = name
        self.message = message or spec.message
        self.hint = hint or spec.hint
        self.data = data
        super().__init__(self.message)

    def to_error(self) -> dict[str, Any]:
        return error_object(self.name, self.message, hint=self.hint, **self.data)


def error_object(
    name: ErrorName, message: str | None = None, *, hint: str | None = None, **data: Any
) -> dict[str, Any]:
    """The JSON-RPC error object for the error ``name`` (``SPECS``): ``{code, message, data: {name, hint, …}}``.
    The one place it is built, for protocol faults and application errors alike."""
    spec = SPECS[name]
    payload: dict[str, Any] = {"name": name, "hint": hint or spec.hint}
    payload.update(data)
    return {"code": spec.code, "message": message or spec.message, "data": payload}
