"""memoryctl: verbs mirror the daemon's methods (`memoryctl workspace add` ↔ `workspace.add`).

Standard library only, so a hook or a person gets an answer in tens of milliseconds.
Exit codes: 0 ok, 1 application error, 2 usage, 3 daemon unavailable, 4 forbidden, 5 protocol error,
6 timeout, 130 interrupted (docs/reference/cli.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from memoryctl import __version__
from memoryctl.rpc import ClientError, RemoteError, connect, environ_timeout, owner_token, parse_timeout

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from memoryctl.rpc import Connection

    Render = Callable[[Any], str]

EXIT_OK, EXIT_APP, EXIT_USAGE = 0, 1, 2  # and per error name (EXIT_CODES): 3 unavailable, 4 forbidden, 5 protocol

# The daemon's error names that get an exit code other than 1; a test checks this against memoryd.errors.
EXIT_CODES = {
    "PARSE_ERROR": 5,
    "INVALID_REQUEST": 5,
    "REQUEST_TOO_LARGE": 5,
    "METHOD_NOT_FOUND": 5,
    "INVALID_PARAMS": 2,
    "MEMORY_PATH_TRAVERSAL": 4,
    "MEMORY_FORBIDDEN": 4,
    "MEMORY_SHUTTING_DOWN": 3,
    "MEMORY_BUSY": 3,
    "BATCH_TOO_LARGE": 5,
}


class Usage(Exception):
    def __init__(self, message: str, hint: str = "See memoryctl --help.") -> None:
        super().__init__(message)
        self.hint = hint


# What one request can carry: the daemon's default max_line_bytes. Text read from a file or standard input is
# read up to this and refused beyond it (`compile apply --in /dev/zero` had grown to 8.8 GB).
MAX_INPUT_BYTES = 8 * 1024 * 1024


def read_capped(source: str, what: str, hint: str = "Give a smaller input; nothing was sent.") -> str:
    """UTF-8 text from the file ``source`` (``-``: standard input), at most MAX_INPUT_BYTES."""
    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(source, "rb") as f:
                data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise Usage(f"cannot read {what}: {exc.strerror or exc}", hint) from None
    if len(data) > MAX_INPUT_BYTES:
        raise Usage(f"{what} is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB", hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Usage(f"{what} is not UTF-8 text (byte {exc.start})", "Give UTF-8 text; nothing was sent.") from None


def _not_utf8(args_list: list[str]) -> str | None:
    """The first argument holding bytes that are not UTF-8 (Python keeps them as lone surrogates), escaped."""
    for arg in args_list:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
    return None


def _write(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _human_dict(data: Any, indent: str = "") -> str:
    if not isinstance(data, dict):
        return f"{indent}{data}"
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.append(_human_dict(value, indent + "  "))
        elif isinstance(value, list):
            lines.append(f"{indent}{key}: {len(value)} item(s)")
            for item in value:
                shown = ", ".join(f"{k}={v}" for k, v in item.items()) if isinstance(item, dict) else item
                lines.append(f"{indent}  - {shown}")
        else:
            lines.append(f"{indent}{key}: {value}")
    return "\n".join(lines)


# --- verbs: each returns (method, params, renderer) -------------------------------------------------------


# What names the workspace when --workspace does not, in this order (EMBEDDED_MEMORY_ROOT: seed 000's store root).
WORKSPACE_ENV = ("MEMORYD_WORKSPACE", "EMBEDDED_MEMORY_ROOT")


def workspace_given(args: argparse.Namespace) -> str | None:
    """The workspace named by --workspace, else by MEMORYD_WORKSPACE, else by EMBEDDED_MEMORY_ROOT; None when
    nothing names one (the current directory decides)."""
    if args.workspace:
        return str(args.workspace)
    return next((value for name in WORKSPACE_ENV if (value := os.environ.get(name, "").strip())), None)


def workspace_of(args: argparse.Namespace) -> str:
    """The workspace id as given, a given path made absolute (against the cwd), or the current directory."""
    ref = workspace_given(args)
    if ref is None:
        return os.getcwd()
    return ref if ref.startswith("ws_") else os.path.abspath(ref)


def _scoped(args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    """The workspace the command runs in, or with --all the owner's view of every workspace."""
    if args.all:
        params.update(scope="all", owner_token=owner_token())
    else:
        params["workspace"] = workspace_of(args)
    return params


def _project_root(start: str) -> str:
    """The nearest directory upwards that looks like a project root (.git, memory/, spec/memory), else start."""
    current = os.path.abspath(start)
    while True:
        if any(os.path.exists(os.path.join(current, marker)) for marker in (".git", "memory", "spec/memory")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return os.path.abspath(start)
        current = parent


SNIPPET_LINES = 6  # a hit shows at most this many snippet lines; `get` reads the rest


def _render_hits(result: dict[str, Any]) -> str:
    hits = result.get("hits", [])
    names: dict[str, str] = result.get("workspace_names") or {}
    out = []
    if result.get("stale"):
        pending = result.get("pending", [])
        out.append(f"(index is catching up: {len(pending)} file(s) pending)")
    if result.get("degraded"):
        degraded = result["degraded"]
        out.append(f"(search used {result.get('mode', 'bm25')}: {degraded.get('reason')}; {degraded.get('hint', '')})")
    if not hits:
        out.append("no matches")
    for hit in hits:
        ws = f"[{names.get(hit['workspace_id'], hit['workspace_id'])}] " if result.get("scope") == "all" else ""
        item = f"  [{hit['item_id']}]" if hit.get("item_id") else ""  # `memoryctl forget` takes it
        out.append(f"{ws}{hit['path']}:{hit['start_line']}  {hit.get('heading', '')}".rstrip() + item)
        snippet = str(hit.get("snippet", "")).splitlines()
        for line in snippet[:SNIPPET_LINES]:
            out.append(f"    {line}")
        if len(snippet) > SNIPPET_LINES:
            out.append(f"    … ({hit['lines']} lines: memoryctl get {hit['path']} --from {hit['start_line']})")
        out.append("")
    if result.get("more"):
        out.append(f"(more matches than the {len(hits)} shown: memoryctl search --limit {2 * len(hits)} …)")
    return "\n".join(out).rstrip()


def verb_call(args: argparse.Namespace) -> tuple[str, dict[str, Any], Render]:
    verb = args.verb
    if verb in RULE_VERBS:
        from memoryctl import rules_cli

        return rules_cli.call(args)
    if verb == "ping":
        return "ping", {}, lambda r: f"pong (memoryd {r['version']})"
    if verb == "status":
        params: dict[str, Any] = {}
        if args.all:
            params["owner_token"] = owner_token()
            params["scope"] = "all"
        else:
            params["workspace"] = workspace_of(args)
        return "status", params, _render_status
    if verb == "workspace":
        if args.ws_verb == "add":
            params = {"path": os.path.abspath(args.path)}
            if args.name:
                params["name"] = args.name
            return (
                "workspace.add",
                params,
                lambda r: f"{r['workspace_id']}  {r['path']}" + ("" if r.get("created") else "  (already registered)"),
            )
        if args.ws_verb == "list":
            return (
                "workspace.list",
                {"owner_token": owner_token()},
                lambda r: (
                    "\n".join(f"{w['workspace_id']}  {w['name']}  {w['path']}" for w in r["workspaces"])
                    or "no workspaces"
                ),
            )
        ref = args.ref if args.ref.startswith("ws_") else os.path.abspath(args.ref)
        return (
            "workspace.remove",
            {"workspace": ref, "owner_token": owner_token()},
            lambda r: f"unregistered {r['workspace_id']} (files left untouched)",
        )
    if verb == "init":
        named = None if args.path else workspace_given(args)
        if args.path or (named and not named.startswith("ws_")):
            root = os.path.abspath(args.path or str(named))
        else:
            root = _project_root(os.getcwd())
        params = {"path": root}
        if args.name:
            params["name"] = args.name
        return (
            "workspace.add",
            params,
            lambda r: (
                f"{'registered' if r.get('created') else 'already registered'} {r['workspace_id']}  {r['path']}\n"
                f"memory lives in {os.path.join(r['path'], 'memory')}"
            ),
        )
    if verb == "remember":
        text = read_capped("-", "standard input") if args.text == "-" else args.text
        params = {"workspace": workspace_of(args), "text": text, "type": args.type}
        for key in ("reason", "followup"):
            if getattr(args, key):
                params[key] = getattr(args, key)
        if args.dry_run:
            params["dry_run"] = True
        return (
            "remember",
            params,
            _render_remember,
        )
    if verb == "search":
        if not args.query.strip():
            raise Usage("search needs words to look for", 'e.g. memoryctl search "flow control"')
        if not 1 <= args.limit <= 100:
            raise Usage(f"--limit must be between 1 and 100, got {args.limit}")
        # one more than asked, so the answer can say that more exist (the extra hit is not shown)
        params = {"query": args.query, "limit": min(args.limit + 1, 100)}
        if args.mode:
            params["mode"] = args.mode
        if args.snippet_max_chars:
            params["snippet_max_chars"] = args.snippet_max_chars
        return "search", _scoped(args, params), _render_hits
    if verb == "get":
        params = {
            "workspace": workspace_of(args),
            "path": _get_path(args.path),
            "from_line": args.from_line,
            "lines": args.lines,
        }
        return "get", params, _render_get
    if verb == "index":
        params = {"full": bool(args.full)}
        if args.rebuild_vectors:
            params["rebuild_vectors"] = True
        return "index", _scoped(args, params), _render_index
    if verb == "validate":
        return "validate", _scoped(args, {}), _render_validate
    if verb == "context":
        return "context", _context_params(args), lambda r: _render_context(r, args.part)
    if verb in ("forget", "restore"):
        params = {"workspace": workspace_of(args), "id" if verb == "forget" else "run_id": args.ref}
        if args.reason:
            params["reason"] = args.reason
        return verb, params, _render_forget if verb == "forget" else _render_restore
    raise Usage(f"unknown verb {verb}")


def _install(args: argparse.Namespace) -> int:
    from pathlib import Path  # not at the top: the other verbs start without it

    from memoryctl import install

    try:
        changes = install.install(args.host, args.scope, Path(_project_root(os.getcwd())), dry_run=args.print)
    except install.InstallError as exc:
        raise Usage(str(exc), exc.hint) from None
    if args.json:
        _write(json.dumps({"ok": True, "data": {"files": [{"path": str(p), "content": c} for p, c in changes]}}))
    elif args.print:
        _write("\n".join(f"# {path}\n{content}" for path, content in changes))
    else:
        _write("\n".join(f"wrote {path}" for path, _ in changes))
    return 0


def _render_forget(result: dict[str, Any]) -> str:
    item = result["item"]
    return (
        f"forgot {item['id']}  {item['path']}  ## {item['heading']}\n"
        f"run {result['run_id']} (undo: memoryctl restore {result['run_id']})"
    )


def _render_restore(result: dict[str, Any]) -> str:
    lines = [f"restored {result['restored']} as run {result['run_id']}"]
    lines += [f"  {w['action']:<9} {w['path']}" for w in result.get("writes", [])]
    return "\n".join(lines)


def _context_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"workspace": workspace_of(args)}
    query = read_capped("-", "standard input") if args.query == "-" else args.query
    if query:
        params["query_text"] = query
    for key in ("model_id", "fw_version", "instance_id", "session_id", "budget_chars"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    return params


CONTEXT_SEPARATOR = "----- dynamic -----"


def _render_context(result: dict[str, Any], part: str) -> str:
    """Both parts, stable first, with a separator line; or one part's text alone, exactly (for a hook)."""
    stable, dynamic = str(result["stable"]["text"]), str(result["dynamic"]["text"])
    if part == "stable":
        return stable
    if part == "dynamic":
        return dynamic
    notes = []
    if result["dynamic"].get("degraded"):
        notes.append(f"(degraded: {result['dynamic']['degraded']['reason']})")
    return "\n".join([stable or "(no stable context)", "", CONTEXT_SEPARATOR, *notes, dynamic or "(nothing recalled)"])


def _get_path(path: str) -> str:
    """A path as the user typed it: relative to the current directory when it names a file there (as a shell
    would resolve it, e.g. `cd memory; memoryctl get 2026-11-23.md`), else relative to the workspace root (as
    search prints it)."""
    if os.path.isabs(path):
        return path
    here = os.path.abspath(path)
    return here if os.path.isfile(here) else path


def _render_remember(r: dict[str, Any]) -> str:
    where = f"{r['path']}:{r['start_line']} ({r['lines']} lines, id {r['id']})"
    if not r.get("dry_run"):
        return f"remembered {where}"
    text = str(r.get("text", "")).rstrip("\n")
    return f"would write {where}; nothing written:\n" + "\n".join(f"    {line}" for line in text.splitlines())


class PastEnd(Exception):
    """get asked for lines after the file's last one."""


def _render_get(r: dict[str, Any]) -> str:
    if not r["lines"] and r["from_line"] > r["total_lines"]:
        raise PastEnd(f"{r['path']} has {r['total_lines']} lines; --from {r['from_line']} is past the end")
    return str(r["text"])


def _render_index(result: dict[str, Any]) -> str:
    return (
        "\n".join(
            f"{r['workspace_id']}: {r['files']} files, {r['chunks']} chunks "
            f"({r['files_indexed']} indexed, {r['files_removed']} removed, {r['files_unchanged']} unchanged"
            f"{', rebuilt' if r['rebuilt'] else ''}) in {r['ms']:.0f} ms"
            for r in result.get("workspaces", [])
        )
        or "no workspaces"
    )


def _render_status(result: dict[str, Any]) -> str:
    workspaces = result.pop("workspaces", [])
    out = [_human_dict(result)]
    for ws in workspaces:
        out.append(f"\nworkspace {ws['workspace_id']}  {ws['path']}")
        out.append(
            f"  files {ws['files']}, chunks {ws['chunks']}, segments {ws.get('segments', '?')}, dirty {ws['dirty_count']}, "
            f"pending {len(ws['pending'])}, watching {'yes' if ws['watching'] else 'no'}"
        )
        out.append(f"  last indexed {ws.get('last_indexed') or 'never'}" + _rebuilt(ws.get("rebuilt")))
        refused = ws.get("refused") or []
        out.extend(f"  not read: {r.get('path')} ({r.get('reason')})" for r in refused)
        if ws.get("refused_count", 0) > len(refused):
            out.append(f"  not read: {ws['refused_count'] - len(refused)} more (`memoryctl validate` lists them)")
        rules = ws.get("rules")
        if rules:
            out.append(
                f"  rules: {rules['profiles']} profile, {rules['overrides']} override, {rules['candidates']} candidate; "
                f"{rules['observations']} observations, {rules['outstanding_requests']} compile request(s) outstanding"
            )
            out.extend(f"  problem: {problem}" for problem in rules.get("errors", []))
            if rules.get("recovered"):
                out.append(f"  recovered after a crash: {', '.join(rules['recovered'])}")
        vectors = ws.get("vectors")
        if vectors:
            out.append("  " + _vectors_line(vectors))
        if ws.get("recommended"):
            out.append(f"  recommended: {ws['recommended']}")
    return "\n".join(out)


def _vectors_line(v: dict[str, Any]) -> str:
    problem = v.get("problem")
    if problem:
        return f"vectors: not used ({problem.get('reason')}): {problem.get('hint', '')}"
    rate = f", {v['texts_per_s']:.0f} texts/s" if v.get("texts_per_s") else ""
    refused = f"; {v['refused']:,} refused by the provider (BM25 only)" if v.get("refused") else ""
    return (
        f"vectors: {v.get('provider')} ({v.get('dimension')} dims), {v['embedded']:,} of {v['total']:,} passages "
        f"embedded ({v.get('progress', 0):.0%}){rate}{refused}"
    )


REBUILT = {
    "missing": "",  # a new workspace, or an index file deleted while the daemon was stopped: nothing to say
    "corrupt": " (index rebuilt: the old one was corrupt)",
    "version_changed": " (index rebuilt for this version of memoryd)",
    "requested": " (index rebuilt on request)",
}


def _rebuilt(reason: str | None) -> str:
    return "" if not reason else REBUILT.get(reason, f" (index rebuilt: {reason})")


def _validate_failed(result: dict[str, Any]) -> bool:
    """validate found a problem of severity error (warnings alone exit 0)."""
    return any(p.get("severity") == "error" for r in result.get("reports", []) for p in r.get("problems", []))


def _render_validate(result: dict[str, Any]) -> str:
    out = []
    for report in result.get("reports", []):
        out.append(f"{report['workspace_id']}  {'ok' if report['ok'] else 'problems found'}")
        for problem in report.get("problems", []):
            where = f"{problem['path']}:{problem['line']}" if problem.get("line") else problem.get("path", "")
            out.append(f"  {problem['severity']}: {where}  {problem['message']}")
    return "\n".join(out) or "nothing to validate"


def _common(top: bool) -> argparse.ArgumentParser:
    """Global options, accepted before or after the verb. Below the top level their defaults are
    SUPPRESS, so a subparser never overwrites what was given before the verb."""
    common = argparse.ArgumentParser(add_help=False)
    extra: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}

    def say(text: str) -> str:  # shown once, in `memoryctl --help`; each verb's help points there
        return text if top else argparse.SUPPRESS

    common.add_argument("--json", action="store_true", help=say('machine output: {"ok": true, "data": …}'), **extra)
    common.add_argument(
        "--socket", help=say("daemon socket (default: MEMORYD_SOCKET or the standard location)"), **extra
    )
    common.add_argument(
        "--timeout",
        type=_timeout_arg,
        metavar="SECONDS",
        help=say("seconds to wait for an answer (default: MEMORYCTL_TIMEOUT, else 30)"),
        **extra,
    )
    common.add_argument(
        "--autostart", action="store_true", help=say("start memoryd in the background if needed"), **extra
    )
    common.add_argument(
        "--workspace",
        "-w",
        help=say(
            "workspace id or path (default: MEMORYD_WORKSPACE, else EMBEDDED_MEMORY_ROOT, else the one containing cwd)"
        ),
        **extra,
    )
    return common


def _timeout_arg(text: str) -> float:
    try:
        return parse_timeout(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


VERBS = {
    "ping": "is the daemon alive?",
    "status": "daemon and workspace status",
    "workspace": "the workspace registry",
    "init": "register the project containing the cwd",
    "remember": "append an entry to today's daily file",
    "search": "search memory (words and meaning; Chinese works)",
    "get": "read lines of a memory file",
    "index": "bring the index up to date",
    "validate": "check layout, headings and paths",
    "context": "what a host injects: stable rules and memory, then recall for a prompt",
    "mcp": "serve this project's memory to an agent over MCP (stdio)",
    "install": "configure Claude Code, Codex or OpenCode to use memoryd (hooks and MCP server)",
    "forget": "hide a remembered entry from search and context (kept for audit; restore undoes it)",
    "restore": "undo a recorded change by its run id (forget, compile apply, promote, restore)",
    "observe": "record one observation (evidence)",
    "compile": "evidence to rules: prepare a request for the LLM, apply its response",
    "resolve": "merged facts for a model and firmware version, and why",
    "rules": "search, show and diff rules",
    "timeline": "observations, remembered entries and changes, newest first",
    "candidates": "review low-confidence rules: list, promote, reject",
    "hook": "answer a coding agent host's hook (its JSON on stdin); fails open, never blocks",
}
RULE_VERBS = ("observe", "compile", "resolve", "rules", "timeline", "candidates")
_VALUE_OPTIONS = {"--socket", "--timeout", "--workspace", "-w"}


def _first_word(argv: Sequence[str]) -> str | None:
    """The first word of the command line that is not an option or an option's value, found without building any
    parser: the verb, or a typo of one (`serch`)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _verb_in(argv: Sequence[str]) -> str | None:
    """The verb the command line names."""
    word = _first_word(argv)
    return word if word in VERBS else None


def _configure(verb: str, p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    if verb in ("status", "index", "validate"):
        if verb == "index":
            p.add_argument("--full", action="store_true", help="rebuild from the files")
            p.add_argument(
                "--rebuild-vectors",
                action="store_true",
                help="embed everything again with the current model (after a model or dimension change)",
            )
        p.add_argument("--all", action="store_true", help="every workspace (owner)")
    elif verb == "workspace":
        ws_sub = p.add_subparsers(dest="ws_verb", required=True, metavar="ACTION")
        add = ws_sub.add_parser("add", parents=[common], help="register a project directory")
        add.add_argument("path", help="the project directory")
        add.add_argument("--name", help="a name for the workspace (default: the directory's name)")
        ws_sub.add_parser("list", parents=[common], help="list workspaces (owner)")
        remove = ws_sub.add_parser("remove", parents=[common], help="unregister (files are kept; owner)")
        remove.add_argument("ref", metavar="PATH|ID", help="the project directory or its workspace id (ws_…)")
    elif verb == "init":
        p.add_argument(
            "path", nargs="?", help="the project directory (default: the nearest parent with .git, memory/ or spec/)"
        )
        p.add_argument("--name", help="a name for the workspace (default: the directory's name)")
    elif verb == "remember":
        p.add_argument("text", help="the text, or - to read standard input")
        p.add_argument(
            "--type",
            default="note",
            choices=["decision", "event", "summary", "note"],
            help="the kind of entry, shown in its heading (default: note)",
        )
        p.add_argument("--reason", help="why: written as a '- Reason:' line under the text")
        p.add_argument("--followup", help="what to do next: written as a '- Follow-up:' line")
        p.add_argument("--dry-run", action="store_true", help="show where and what would be written; write nothing")
    elif verb == "search":
        p.add_argument("query", help="words to look for (any language; exact identifiers rank first)")
        p.add_argument("--limit", "-n", type=int, default=8, help="at most this many hits, 1-100 (default: 8)")
        p.add_argument(
            "--mode",
            choices=["bm25", "vector", "hybrid"],
            help="words only, meaning only, or both fused (default: hybrid when the workspace has vectors)",
        )
        p.add_argument(
            "--snippet-max-chars", type=int, metavar="N", help="snippet length, 20-4000 (default: the setting, 700)"
        )
        p.add_argument("--all", action="store_true", help="every workspace, read-only (owner)")
    elif verb == "get":
        p.add_argument(
            "path",
            help="memory/2026-01-01.md as search prints it (relative to the workspace root), or a path from the "
            "current directory",
        )
        p.add_argument("--from", dest="from_line", type=int, default=1, metavar="LINE", help="first line (default: 1)")
        p.add_argument("--lines", type=int, default=40, metavar="N", help="how many lines, at most 200 (default: 40)")
    elif verb == "install":
        p.add_argument("host", choices=["claude", "codex", "opencode"], help="the agent to configure")
        p.add_argument(
            "--scope",
            choices=["project", "user"],
            default="project",
            help="this project's files (default) or your user-wide configuration",
        )
        p.add_argument("--print", action="store_true", help="show the files as they would be; write nothing")
    elif verb in ("forget", "restore"):
        if verb == "forget":
            p.add_argument("ref", metavar="ID", help="the entry's id, as remember printed it (ent_…)")
        else:
            p.add_argument("ref", metavar="RUN_ID", help="the change's run id (forget and timeline print it)")
        p.add_argument("--reason", help="why: recorded in history")
    elif verb == "context":
        p.add_argument("--query", "-q", metavar="TEXT", help="the prompt to recall for, or - to read standard input")
        p.add_argument("--model-id", help="with --fw-version: include the rules resolved for this device")
        p.add_argument("--fw-version", help="the device's firmware version")
        p.add_argument("--instance-id", help="include this instance's overrides")
        p.add_argument("--session-id", help="the host's session: the stable part stays the same bytes all session")
        p.add_argument(
            "--budget-chars", type=int, metavar="N", help="lower the stable part's ceiling (default: the setting, 9000)"
        )
        p.add_argument(
            "--part",
            choices=["both", "stable", "dynamic"],
            default="both",
            help="print both parts (default) or one part's text alone",
        )
    elif verb == "hook":  # parsed here only for --help: memoryctl.hooks reads its own few words
        p.add_argument("host", choices=["claude", "codex", "opencode"], help="the host sending the hook JSON")
        p.add_argument("event", help="SessionStart, UserPromptSubmit, PostToolUse, PostToolUseFailure, Stop, …")
    elif verb in RULE_VERBS:  # only these verbs pay for importing rules_cli
        from memoryctl import rules_cli

        rules_cli.configure(verb, p, common)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``only``) just the named verb's: building all of them costs ~10 ms, which a
    hook pays on every call."""
    common = _common(top=False)
    parser = argparse.ArgumentParser(
        prog="memoryctl", parents=[_common(top=True)], description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--version", action="version", version=f"memoryctl {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, help_text in VERBS.items():
        if only is None or verb == only:
            p = sub.add_parser(verb, parents=[common], help=help_text, description=help_text, epilog=GLOBAL_EPILOG)
            _configure(verb, p, common)
    return parser


GLOBAL_EPILOG = "Global options (--json, --socket, --timeout, --autostart, --workspace): see memoryctl --help."


def _unknown_verb(argv: Sequence[str]) -> str | None:
    """The first word of the command line when it is no verb, e.g. a typo (`serch`)."""
    word = _first_word(argv)
    return None if word in VERBS else word


def _emit_error(
    args: argparse.Namespace | None, name: str, message: str, hint: str, extra: dict[str, Any] | None = None
) -> None:
    if args is not None and getattr(args, "json", False):
        error: dict[str, Any] = {"name": name, "message": message, "hint": hint}
        if extra:
            error.update({k: v for k, v in extra.items() if k not in ("name", "hint")})
        _write(json.dumps({"ok": False, "error": error}, ensure_ascii=False))
    else:
        sys.stderr.write(f"memoryctl: {name}: {message}\n")
        if extra and extra.get("errors"):
            for problem in extra["errors"]:
                sys.stderr.write(f"  - {problem.get('loc')}: {problem.get('msg')}\n")
        if extra and extra.get("violations"):
            for violation in extra["violations"]:
                sys.stderr.write(f"  - {violation.get('pointer') or '(root)'}: {violation.get('reason')}\n")
        if hint:
            sys.stderr.write(f"hint: {hint}\n")


def _with_progress(conn: Connection, params: dict[str, Any], path: str, timeout: float) -> Any:
    """Run the index call in a thread; meanwhile poll status on a second connection and draw a bar."""
    import threading

    from memoryctl.rpc import Connection as Conn

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = conn.call("index", params)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    shown = False
    status_params = {k: v for k, v in params.items() if k in ("workspace", "scope", "owner_token")}
    try:
        with Conn(path, timeout) as watcher:
            while worker.is_alive():
                worker.join(0.2)
                if not worker.is_alive():
                    break
                for ws in watcher.call("status", status_params).get("workspaces", []):
                    progress = ws.get("indexing")
                    if progress and progress["total"]:
                        done, total = progress["done"], progress["total"]
                        filled = int(30 * done / total)
                        sys.stderr.write(
                            f"\rindexing {ws['workspace_id']} [{'#' * filled}{'.' * (30 - filled)}] "
                            f"{done}/{total} files"
                        )
                        sys.stderr.flush()
                        shown = True
    except (ClientError, RemoteError):
        worker.join()
    if shown:
        sys.stderr.write("\n")
    if "error" in outcome:
        raise outcome["error"]
    _embedding_progress(path, status_params, timeout)
    return outcome["result"]


def _embedding_progress(path: str, status_params: dict[str, Any], timeout: float) -> None:
    """Draw the embedding backlog's bar until it is empty (Ctrl-C stops watching, not embedding)."""
    from memoryctl.rpc import Connection as Conn

    shown = False
    try:
        with Conn(path, timeout) as watcher:
            while True:
                backlog = [
                    (ws["workspace_id"], v["embedded"], v["total"])
                    for ws in watcher.call("status", status_params).get("workspaces", [])
                    if (v := ws.get("vectors")) and not v.get("problem") and v["embedded"] < v["total"]
                ]
                if not backlog:
                    break
                ws_id, done, total = backlog[0]
                filled = int(30 * done / total)
                sys.stderr.write(
                    f"\rembedding {ws_id} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} passages "
                    "(Ctrl-C stops watching; the daemon goes on)"
                )
                sys.stderr.flush()
                shown = True
                time.sleep(0.5)
    except (ClientError, RemoteError, KeyboardInterrupt):
        pass
    if shown:
        sys.stderr.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else list(argv)
    if _first_word(args_list) == "hook" and not {"-h", "--help"} & set(args_list):
        from memoryctl.hooks import main as hook  # fail-open, deadlines, no argparse: it runs on every prompt

        return hook(args_list)
    bad = _not_utf8(args_list)
    if bad is not None:
        as_json = argparse.Namespace(json="--json" in args_list)
        _emit_error(as_json, "USAGE", f"an argument is not UTF-8 text: {bad}", "Pass text and paths as UTF-8.")
        return EXIT_USAGE
    if args_list[:1] == ["help"]:  # `memoryctl help [VERB …]` is `memoryctl [VERB …] --help`
        args_list = [*args_list[1:], "--help"]
    unknown = _unknown_verb(args_list)
    if unknown is not None:
        import difflib

        close = difflib.get_close_matches(unknown, list(VERBS), n=1, cutoff=0.6)
        _emit_error(
            None,
            "USAGE",
            f"unknown command {unknown!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
            "memoryctl --help lists the commands.",
        )
        return EXIT_USAGE
    parser = build_parser(_verb_in(args_list))
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    from memoryctl.paths import socket_path

    path = str(socket_path(args.socket))
    try:
        timeout = args.timeout if args.timeout else environ_timeout(30.0)
        if args.verb == "install":  # files, not a call
            return _install(args)
        if args.verb == "mcp":  # a server, not a call: the SDK is imported only here (about a second)
            try:
                from memoryctl import mcp_server
            except ImportError as exc:
                raise Usage(f"memoryctl mcp needs the MCP SDK ({exc})", "pip install 'memoryd[mcp]'") from exc
            return mcp_server.run(path, workspace_of(args), timeout)
        method, params, render = verb_call(args)
        conn: Connection = connect(path, timeout, args.autostart)
        with conn:
            try:
                if method == "index" and not args.json and sys.stderr.isatty():
                    result = _with_progress(conn, params, path, timeout)
                else:
                    result = conn.call(method, params)
            except RemoteError as exc:
                if not (method == "status" and exc.name == "MEMORY_WORKSPACE_NOT_FOUND" and not workspace_given(args)):
                    raise
                params.pop("workspace", None)  # not inside a workspace: the daemon's status alone
                result = conn.call(method, params)
                result["recommended"] = "memoryctl init  (this directory is not in a registered workspace)"
            if method == "search":
                limit = args.limit
                result["more"] = len(result["hits"]) > limit
                result["hits"] = result["hits"][:limit]
                if args.all and not args.json:
                    result["workspace_names"] = _workspace_names(conn)
        if getattr(args, "out", None):  # compile prepare --out
            from memoryctl.rules_cli import save_request

            save_request(args.out, result)
        if args.json:
            _write(json.dumps({"ok": True, "data": result}, ensure_ascii=False))
        else:
            _write(render(result))
    except Usage as exc:
        _emit_error(args, "USAGE", str(exc), exc.hint)
        return EXIT_USAGE
    except ClientError as exc:
        _emit_error(args, exc.name, exc.message, exc.hint)
        return exc.exit_code
    except RemoteError as exc:
        _emit_error(args, exc.name, exc.message, exc.hint, exc.data)
        return EXIT_CODES.get(exc.name, EXIT_APP)
    except PastEnd as exc:
        _emit_error(args, "PAST_END", str(exc), "Start lower: --from 1 reads from the top.")
        return EXIT_APP
    except KeyboardInterrupt:
        return 130
    if method == "validate" and _validate_failed(result):
        return EXIT_APP
    return EXIT_OK


def _workspace_names(conn: Connection) -> dict[str, str]:
    """workspace id → name, for labelling `search --all` hits; ids alone when the registry cannot be listed."""
    try:
        listed = conn.call("workspace.list", {"owner_token": owner_token()})
    except RemoteError:
        return {}
    return {w["workspace_id"]: w["name"] for w in listed.get("workspaces", [])}


def entry() -> None:
    sys.exit(main())
