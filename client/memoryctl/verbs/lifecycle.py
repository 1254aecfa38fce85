"""memoryctl's change verbs: archive and ttl, and restore, which undoes them (and any other recorded change: a
forget, a compile apply, a promote). Each is one call; on a terminal a long run draws a progress bar
(docs/howto/lifecycle.md)."""

from __future__ import annotations

import sys

from memoryctl.common import EXIT_OK, Args, Usage, workspace_of

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from memoryctl.quick import Spec
    from memoryctl.rpc import Connection

QUICK: dict[str, Spec] = {}
SHOWN = 50  # files listed for a person; --json lists every one


def configure(verb: str, p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    if verb == "restore":
        p.add_argument("ref", metavar="RUN_ID", help="the change's run id (forget and timeline print it)")
        p.add_argument("--reason", help="why: recorded in history")
        p.add_argument("--dry-run", action="store_true", help="show what it would put back, as diffs; write nothing")
        return
    if verb == "archive":
        what = "move daily files dated more than DAYS days ago (default: the setting, 30)"
    else:
        what = "the TTL of archived days and of INSIGHTS.md bullets for this run (default: the settings, 365 and 60)"
    p.add_argument("--older-than", dest="older_than", type=int, metavar="DAYS", help=what)
    p.add_argument(
        "--dry-run", action="store_true", help="list every file and byte the run would touch; change nothing"
    )


def local(args: Args, path: str, timeout: float) -> int | None:
    return None


def call(args: Args) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"workspace": workspace_of(args)}
    if args.verb == "restore":
        params["run_id"] = args.ref
        if args.reason:
            params["reason"] = args.reason
        if args.dry_run:
            params["dry_run"] = True
        return "restore", params
    if args.verb not in ("archive", "ttl"):
        raise Usage(f"unknown verb {args.verb}")
    params["dry_run"] = bool(args.dry_run)
    if args.older_than is not None:
        if args.older_than < 0:
            raise Usage(f"--older-than must be 0 or more days, got {args.older_than}")
        params["older_than_days"] = args.older_than
    return f"lifecycle.{args.verb}", params


def exchange(conn: Connection, args: Args, method: str, params: dict[str, Any]) -> Any:
    if not args.json and not params.get("dry_run") and sys.stderr.isatty():
        from memoryctl.progress import change_with_progress

        return change_with_progress(conn, method, params)
    return conn.call(method, params)


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 10_000 else f"{n / 1024:,.0f} KiB" if n < 10_000_000 else f"{n / 1048576:,.1f} MiB"


def _render_restore(r: dict[str, Any]) -> str:
    if r.get("dry_run"):
        lines = [f"would restore {r['restored']} (dry run: nothing written)"]
        lines += [f"  {w['action']:<9} {w['path']}" for w in r.get("writes", [])]
        return "\n".join(lines + [d["diff"].rstrip("\n") for d in r.get("diffs", []) if d.get("diff")])
    lines = [f"restored {r['restored']} as run {r['run_id']}"]
    writes = r.get("writes", [])
    lines += [f"  {w['action']:<9} {w['path']}" for w in writes[:SHOWN]]
    if len(writes) > SHOWN:
        lines.append(f"  … and {len(writes) - SHOWN} more files (--json lists every one)")
    return "\n".join(lines)


def render(args: Args, r: Any) -> str:
    if args.verb == "restore":
        return _render_restore(r)
    files = r["files"]
    days = ", ".join(f"{k} {v}" for k, v in r["days"].items())
    if r["dry_run"]:
        head = f"dry run ({days}): would touch {len(files)} files, {_size(r['bytes'])}; nothing changed"
    elif r["recorded"]:
        head = f"{args.verb} run {r['run_id']} ({days}): {len(files)} files, {_size(r['bytes'])}"
    else:
        head = f"nothing to {args.verb} ({days})"
    lines = [head]
    for f in files[:SHOWN]:
        bullets = f"  ({f['bullets']} bullets)" if f.get("bullets") else ""
        lines.append(f"  {f['action']:<7} {f['path']}  {_size(f['bytes'])}{bullets}")
    if len(files) > SHOWN:
        lines.append(f"  … and {len(files) - SHOWN} more (--json lists every one)")
    lines += [f"  skipped {s['path']}: {s['reason']}" for s in r.get("skipped", [])[:SHOWN]]
    if r.get("remaining"):
        lines.append(f"{r['remaining']} more files wait for the next run (one run's limit)")
    if r["recorded"]:
        lines.append(f"undo: memoryctl restore {r['run_id']}")
    elif r["dry_run"] and files:
        again = "" if args.older_than is None else f" --older-than {args.older_than}"
        lines.append(f"run it: memoryctl {args.verb}{again}")
    return "\n".join(lines)


def exit_code(args: Args, result: Any) -> int:
    return EXIT_OK
