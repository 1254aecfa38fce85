"""memoryctl's daemon and wiring verbs: ping, the workspace registry (owner), and the verbs that are not one
call — install (writes a host's configuration), mcp (serves MCP on stdio) and merge-file (git's merge driver, no
daemon) — plus `hook`'s help (a hook itself is answered by memoryctl.hooks before any parser is built)."""

from __future__ import annotations

import os

from memoryctl.common import EXIT_OK, Args, Usage, project_root, to_json, workspace_of, write
from memoryctl.quick import Spec
from memoryctl.rpc import RemoteError, owner_token

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from memoryctl.rpc import Connection

# git runs `memoryctl merge-file %O %A %B` once per memory file of a merge: read without argparse.
QUICK: dict[str, Spec] = {
    "merge-file": Spec(positionals=("base", "ours", "theirs"), flags={}, values={}, defaults={"path": None})
}
HOSTS = ["claude", "codex", "opencode"]


def configure(verb: str, p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    if verb == "workspace":
        ws_sub = p.add_subparsers(dest="ws_verb", required=True, metavar="ACTION")
        add = ws_sub.add_parser("add", parents=[common], help="register a project directory")
        add.add_argument("path", help="the project directory")
        add.add_argument("--name", help="a name for the workspace (default: the directory's name)")
        ws_sub.add_parser("list", parents=[common], help="list workspaces (owner)")
        remove = ws_sub.add_parser("remove", parents=[common], help="unregister (files are kept; owner)")
        remove.add_argument("ref", metavar="PATH|ID", help="the project directory or its workspace id (ws_…)")
    elif verb == "install":
        p.add_argument("host", choices=HOSTS, help="the agent to configure")
        p.add_argument(
            "--scope",
            choices=["project", "user"],
            default="project",
            help="this project's files (default) or your user-wide configuration",
        )
        p.add_argument("--print", action="store_true", help="show the files as they would be; write nothing")
    elif verb == "merge-file":
        p.add_argument("base", metavar="BASE", help="the common ancestor's version (git's %%O)")
        p.add_argument("ours", metavar="OURS", help="our version: the merge is written over it (git's %%A)")
        p.add_argument("theirs", metavar="THEIRS", help="their version (git's %%B)")
        p.add_argument("path", metavar="PATH", nargs="?", help="the file's path in the repository (git's %%P; unused)")
    elif verb == "ui":
        p.add_argument("--no-browser", action="store_true", help="print the URL only; open no browser")
        p.add_argument("--read-only", action="store_true", help="offer no writes (promote, reject, forget, restore)")
        p.add_argument("--all", action="store_true", help="every workspace, read-only (owner)")
        p.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    elif verb == "hook":  # parsed here only for --help: memoryctl.hooks reads its own few words
        p.add_argument("host", choices=HOSTS, help="the host sending the hook JSON")
        p.add_argument("event", help="SessionStart, UserPromptSubmit, PostToolUse, PostToolUseFailure, Stop, …")


def local(args: Args, path: str, timeout: float) -> int | None:
    if args.verb == "install":  # files, not a call
        return _install(args)
    if args.verb == "merge-file":  # files, not a call: git runs it, the daemon need not be up
        from memoryctl import gitmerge

        try:
            return gitmerge.merge_file(args.base, args.ours, args.theirs)
        except OSError as exc:
            raise Usage(
                f"merge-file: {exc.strerror or exc}: {exc.filename}", "git passes three readable files."
            ) from None
    if args.verb == "mcp":  # a server, not a call: the SDK is imported only here (about a second)
        try:
            from memoryctl import mcp_server
        except ImportError as exc:
            raise Usage(f"memoryctl mcp needs the MCP SDK ({exc})", "pip install 'memoryd[mcp]'") from exc
        return mcp_server.run(path, workspace_of(args), timeout)
    if args.verb == "ui":  # a server too: Starlette, Jinja2 and uvicorn are imported only here
        return _ui(args, path, timeout)
    return None


def _ui(args: Args, path: str, timeout: float) -> int:
    try:
        from memoryctl.ui import server
    except ImportError as exc:
        raise Usage(f"memoryctl ui needs the review page's packages ({exc})", "pip install 'memoryd[ui]'") from exc
    if not 0 <= args.port <= 65535:
        raise Usage(f"--port must be 0-65535, got {args.port}")
    try:
        return server.run(
            path,
            None if args.all else workspace_of(args),
            timeout,
            port=args.port,
            owner=args.all,
            read_only=args.read_only,
            browser=not args.no_browser,
        )
    except server.DaemonError as exc:
        raise RemoteError({"message": exc.message, "data": {"name": exc.name, "hint": exc.hint}}) from None
    except OSError as exc:
        raise Usage(f"cannot listen on 127.0.0.1:{args.port} ({exc.strerror})", "Pass another --port, or 0.") from None


def _install(args: Args) -> int:
    from pathlib import Path  # not at the top: the other verbs start without it

    from memoryctl import install

    try:
        changes = install.install(args.host, args.scope, Path(project_root(os.getcwd())), dry_run=args.print)
    except install.InstallError as exc:
        raise Usage(str(exc), exc.hint) from None
    if args.json:
        write(
            to_json({"ok": True, "data": {"files": [{"path": str(p), "content": c} for p, c in changes]}}, ascii=True)
        )
    elif args.print:
        write("\n".join(f"# {path}\n{content}" for path, content in changes))
    else:
        write("\n".join(f"wrote {path}" for path, _ in changes))
    return EXIT_OK


def call(args: Args) -> tuple[str, dict[str, Any]]:
    if args.verb == "ping":
        return "ping", {}
    if args.verb != "workspace":
        raise Usage(f"unknown verb {args.verb}")
    if args.ws_verb == "add":
        params = {"path": os.path.abspath(args.path)}
        if args.name:
            params["name"] = args.name
        return "workspace.add", params
    if args.ws_verb == "list":
        return "workspace.list", {"owner_token": owner_token()}
    ref = args.ref if args.ref.startswith("ws_") else os.path.abspath(args.ref)
    return "workspace.remove", {"workspace": ref, "owner_token": owner_token()}


def exchange(conn: Connection, args: Args, method: str, params: dict[str, Any]) -> Any:
    return conn.call(method, params)


def render(args: Args, r: Any) -> str:
    if args.verb == "ping":
        return f"pong (memoryd {r['version']})"
    if args.ws_verb == "add":
        return f"{r['workspace_id']}  {r['path']}" + ("" if r.get("created") else "  (already registered)")
    if args.ws_verb == "list":
        return "\n".join(f"{w['workspace_id']}  {w['name']}  {w['path']}" for w in r["workspaces"]) or "no workspaces"
    return f"unregistered {r['workspace_id']} (files left untouched)"


def exit_code(args: Args, result: Any) -> int:
    return EXIT_OK
