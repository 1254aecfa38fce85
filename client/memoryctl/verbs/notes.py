"""memoryctl's Markdown memory verbs: status, init, remember, search, get, index, validate, context, forget,
answer (restore, which undoes a forget too, is a lifecycle verb). Each is one call; ``exchange`` adds what a verb needs around it (status outside a workspace, search's
"more", the index progress bar)."""

from __future__ import annotations

import os
import sys

from memoryctl.common import (
    EXIT_APP,
    EXIT_OK,
    Args,
    PastEnd,
    Usage,
    init_root,
    json_object_arg,
    read_capped,
    scoped,
    workspace_given,
    workspace_of,
)
from memoryctl.quick import Spec, choice, iso_day
from memoryctl.rpc import RemoteError, owner_token

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    from memoryctl.rpc import Connection

SEARCH_MODES = ("bm25", "vector", "hybrid")
# `memoryctl search` is run by people and scripts many times a minute: its plain command lines skip argparse.
QUICK = {
    "search": Spec(
        positionals=("query",),
        flags={"--all": "all", "--archive": "archive"},
        values={
            "--limit": ("limit", int),
            "-n": ("limit", int),
            "--mode": ("mode", choice(*SEARCH_MODES)),
            "--snippet-max-chars": ("snippet_max_chars", int),
            "--since": ("since", iso_day),
            "--until": ("until", iso_day),
        },
        # --also repeats: a line with it is read by argparse
        defaults={
            "limit": 8,
            "mode": None,
            "snippet_max_chars": None,
            "all": False,
            "since": None,
            "until": None,
            "also": None,
            "archive": False,
        },
    )
}


def configure(verb: str, p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    if verb in ("status", "index", "validate"):
        if verb == "index":
            p.add_argument("--full", action="store_true", help="rebuild from the files")
            p.add_argument(
                "--rebuild-vectors",
                action="store_true",
                help="embed everything again with the current model (after a model or dimension change)",
            )
        p.add_argument("--all", action="store_true", help="every workspace (owner)")
    elif verb == "init":
        p.add_argument(
            "path", nargs="?", help="the project directory (default: the nearest parent with .git, memory/ or spec/)"
        )
        p.add_argument("--name", help="a name for the workspace (default: the directory's name)")
        p.add_argument(
            "--git",
            action="store_true",
            help="also make git merge the memory files by section (.gitattributes and a merge driver; idempotent)",
        )
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
        p.add_argument(
            "--keywords",
            action="append",
            metavar="WORDS",
            help="words it should also be found by, comma-separated, best in English and Chinese "
            "('uart timeout, 串口, 超时'): kept as a 'Keywords:' line under the text (repeatable)",
        )
        p.add_argument("--confidence", type=float, metavar="0..1", help="how sure it is (its item's confidence)")
        p.add_argument(
            "--evidence", action="append", metavar="ID", help="what it rests on: obs_…, ent_…, a run id (repeatable)"
        )
        p.add_argument("--metadata", metavar="JSON_OBJECT", help="any small JSON object kept with its item")
        p.add_argument("--dry-run", action="store_true", help="show where and what would be written; write nothing")
    elif verb == "search":  # keep QUICK["search"] in step (tests/test_client.py compares the two)
        p.add_argument("query", help="words to look for (any language; exact identifiers rank first)")
        p.add_argument("--limit", "-n", type=int, default=8, help="at most this many hits, 1-100 (default: 8)")
        p.add_argument(
            "--mode",
            choices=list(SEARCH_MODES),
            help="words only, meaning only, or both fused (default: hybrid when the workspace has vectors)",
        )
        p.add_argument(
            "--snippet-max-chars", type=int, metavar="N", help="snippet length, 20-4000 (default: the setting, 700)"
        )
        p.add_argument(
            "--also",
            action="append",
            metavar="WORDS",
            help="the same question in other words or the other language ('串口超时' for 'uart timeout'), fused "
            "into one ranking (repeatable)",
        )
        p.add_argument("--since", type=iso_day, metavar="YYYY-MM-DD", help="prefer entries dated on or after this day")
        p.add_argument("--until", type=iso_day, metavar="YYYY-MM-DD", help="prefer entries dated on or before this day")
        p.add_argument("--all", action="store_true", help="every workspace, read-only (owner)")
        p.add_argument(
            "--archive", action="store_true", help="archived daily files too (memory/archive/; left out by default)"
        )
    elif verb == "get":
        p.add_argument(
            "path",
            help="memory/2026-01-01.md as search prints it (relative to the workspace root), or a path from the "
            "current directory",
        )
        p.add_argument("--from", dest="from_line", type=int, default=1, metavar="LINE", help="first line (default: 1)")
        p.add_argument("--lines", type=int, default=40, metavar="N", help="how many lines, at most 200 (default: 40)")
    elif verb == "forget":
        p.add_argument("ref", metavar="ID", help="the entry's id, as remember printed it (ent_…)")
        p.add_argument("--reason", help="why: recorded in history")
    elif verb == "answer":
        p.add_argument("question_id", metavar="QUESTION_ID", help="the question's id, as context shows it (q_…)")
        p.add_argument(
            "answer",
            choices=["old", "new", "both"],
            help="old: keep what memory holds; new: the proposed value replaces it; both: keep both, marked",
        )
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


def local(args: Args, path: str, timeout: float) -> int | None:
    """Every verb here is a call; `init --git` first registers the merge driver (no daemon needed for that)."""
    if args.verb == "init" and args.git:
        from memoryctl import gitmerge

        try:
            vars(args)["git_report"] = gitmerge.setup(init_root(args))
        except gitmerge.GitError as exc:
            raise Usage(str(exc), exc.hint) from None
    return None


# --- calls ------------------------------------------------------------------------------------------------------


def call(args: Args) -> tuple[str, dict[str, Any]]:  # noqa: C901, PLR0912 - one branch per verb of the group
    verb: str = args.verb
    if verb == "status":
        params: dict[str, Any] = {}
        if args.all:
            params["owner_token"] = owner_token()
            params["scope"] = "all"
        else:
            params["workspace"] = workspace_of(args)
        return "status", params
    if verb == "init":
        params = {"path": init_root(args)}
        if args.name:
            params["name"] = args.name
        return "workspace.add", params
    if verb == "remember":
        text = read_capped("-", "standard input") if args.text == "-" else args.text
        params = {"workspace": workspace_of(args), "text": text, "type": args.type}
        for key in ("reason", "followup"):
            if getattr(args, key):
                params[key] = getattr(args, key)
        if args.keywords:
            params["keywords"] = args.keywords
        if args.confidence is not None:
            params["confidence"] = args.confidence
        if args.evidence:
            params["evidence"] = args.evidence
        if args.metadata is not None:
            params["metadata"] = json_object_arg(args.metadata, "--metadata")
        if args.dry_run:
            params["dry_run"] = True
        return "remember", params
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
        for name in ("also", "since", "until"):
            if getattr(args, name):
                params[name] = getattr(args, name)
        if args.archive:
            params["include_archive"] = True
        return "search", scoped(args, params)
    if verb == "get":
        params = {"workspace": workspace_of(args), "path": _get_path(args.path)}
        return "get", {**params, "from_line": args.from_line, "lines": args.lines}
    if verb == "index":
        params = {"full": bool(args.full)}
        if args.rebuild_vectors:
            params["rebuild_vectors"] = True
        return "index", scoped(args, params)
    if verb == "validate":
        return "validate", scoped(args, {})
    if verb == "context":
        return "context", _context_params(args)
    if verb == "answer":
        return "answer", {"workspace": workspace_of(args), "question_id": args.question_id, "answer": args.answer}
    if verb == "forget":
        params = {"workspace": workspace_of(args), "id": args.ref}
        if args.reason:
            params["reason"] = args.reason
        if verb == "restore" and getattr(args, "dry_run", False):
            params["dry_run"] = True
        return verb, params
    raise Usage(f"unknown verb {verb}")


def _context_params(args: Args) -> dict[str, Any]:
    params: dict[str, Any] = {"workspace": workspace_of(args)}
    query = read_capped("-", "standard input") if args.query == "-" else args.query
    if query:
        params["query_text"] = query
    for key in ("model_id", "fw_version", "instance_id", "session_id", "budget_chars"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    return params


def _get_path(path: str) -> str:
    """A path as the user typed it: relative to the current directory when it names a file there (as a shell
    would resolve it, e.g. `cd memory; memoryctl get 2026-11-23.md`), else relative to the workspace root (as
    search prints it)."""
    if os.path.isabs(path):
        return path
    here = os.path.abspath(path)
    return here if os.path.isfile(here) else path


def exchange(conn: Connection, args: Args, method: str, params: dict[str, Any]) -> Any:
    if method == "index" and not args.json and sys.stderr.isatty():
        from memoryctl.progress import index_with_progress

        return index_with_progress(conn, params)
    try:
        result = conn.call(method, params)
    except RemoteError as exc:
        if not (method == "status" and exc.name == "MEMORY_WORKSPACE_NOT_FOUND" and not workspace_given(args)):
            raise
        params.pop("workspace", None)  # not inside a workspace: the daemon's status alone
        result = conn.call(method, params)
        result["recommended"] = "memoryctl init  (this directory is not in a registered workspace)"
    if method == "workspace.add" and args.verb == "init" and args.git:
        result["git"] = args.git_report
    if method == "search":
        limit = args.limit
        result["more"] = len(result["hits"]) > limit
        result["hits"] = result["hits"][:limit]
        if args.all and not args.json:
            result["workspace_names"] = _workspace_names(conn)
    return result


def _workspace_names(conn: Connection) -> dict[str, str]:
    """workspace id → name, for labelling `search --all` hits; ids alone when the registry cannot be listed."""
    try:
        listed = conn.call("workspace.list", {"owner_token": owner_token()})
    except RemoteError:
        return {}
    return {w["workspace_id"]: w["name"] for w in listed.get("workspaces", [])}


def exit_code(args: Args, result: Any) -> int:
    """validate found a problem of severity error (warnings alone exit 0)."""
    if args.verb == "validate" and any(
        p.get("severity") == "error" for r in result.get("reports", []) for p in r.get("problems", [])
    ):
        return EXIT_APP
    return EXIT_OK


# --- renderers --------------------------------------------------------------------------------------------------


def render(args: Args, result: Any) -> str:
    if args.verb == "context":
        return _render_context(result, args.part)
    if args.verb in ("status", "index", "validate"):  # the index's state: its own module, not on search's path
        from memoryctl.verbs import notes_status

        return notes_status.RENDER[args.verb](result)
    return RENDER[args.verb](result)


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


def _render_init(r: dict[str, Any]) -> str:
    text = (
        f"{'registered' if r.get('created') else 'already registered'} {r['workspace_id']}  {r['path']}\n"
        f"memory lives in {os.path.join(r['path'], 'memory')}"
    )
    if r.get("git"):
        from memoryctl import gitmerge

        text += "\n" + gitmerge.render(r["git"])
    return text


def _render_forget(result: dict[str, Any]) -> str:
    item = result["item"]
    return (
        f"forgot {item['id']}  {item['path']}  ## {item['heading']}\n"
        f"run {result['run_id']} (undo: memoryctl restore {result['run_id']})"
    )


def _render_answer(result: dict[str, Any]) -> str:
    said = f"answered {result['question_id']}: {result['answer']}"
    if result.get("run_id"):
        return (
            f"{said}\n"
            + "\n".join(f"  {w['action']:<9} {w['path']}" for w in result.get("writes", []))
            + (f"\nrun {result['run_id']} (undo: memoryctl restore {result['run_id']})")
        )
    if not result.get("applied"):
        return f"{said} (the file no longer holds the old bullet: nothing changed)"
    return said


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


def _render_remember(r: dict[str, Any]) -> str:
    where = f"{r['path']}:{r['start_line']} ({r['lines']} lines, id {r['id']})"
    if not r.get("dry_run"):
        return f"remembered {where}"
    text = str(r.get("text", "")).rstrip("\n")
    return f"would write {where}; nothing written:\n" + "\n".join(f"    {line}" for line in text.splitlines())


def _render_get(r: dict[str, Any]) -> str:
    if not r["lines"] and r["from_line"] > r["total_lines"]:
        raise PastEnd(f"{r['path']} has {r['total_lines']} lines; --from {r['from_line']} is past the end")
    return str(r["text"])


RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "init": _render_init,
    "remember": _render_remember,
    "search": _render_hits,
    "get": _render_get,
    "forget": _render_forget,
    "answer": _render_answer,
}
