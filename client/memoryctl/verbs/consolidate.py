"""memoryctl consolidate: daily notes (and evidence) into MEMORY.md, INSIGHTS.md, HISTORY.md and today's daily file,
through the host's own model (docs/howto/consolidate.md).

- ``memoryctl consolidate`` prepares the next request (compile.prepare: the notes not consolidated yet, MEMORY.md's
  sections, the open questions) and says where it is; ``--out FILE`` also writes the request object there.
- ``memoryctl consolidate --apply FILE [FILE…]`` applies the host model's answers in order, each as its own change
  (``--dry-run``: the planned writes only). More than one file draws a progress line on standard error; the first
  refused answer stops the run (those before it stay applied: each is its own change, ``restore`` undoes one).

cli.py imports this module only when the verb runs.
"""

from __future__ import annotations

import json
import sys

from memoryctl.common import EXIT_OK, Args, Usage, read_capped, workspace_of
from memoryctl.rpc import RemoteError

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from memoryctl.quick import Spec
    from memoryctl.rpc import Connection

QUICK: dict[str, Spec] = {}


def configure(verb: str, p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    if verb == "compact":
        p.add_argument("--older-than-days", type=int, metavar="N", help="archived days older than N days (default 30)")
        p.add_argument("--dry-run", action="store_true", help="list the files and bytes only; hand out no request")
        return
    p.add_argument(
        "--apply", nargs="+", metavar="FILE", help="apply these answers (compile responses) in order; - = stdin"
    )
    p.add_argument("--dry-run", action="store_true", help="with --apply: check and show the planned writes only")
    p.add_argument("--out", metavar="FILE", help="also write the request object to FILE")
    p.add_argument("--since", help="ISO date: offer the notes (and evidence) from then on again, consolidated or not")
    p.add_argument("--restart", action="store_true", help="abandon the requests handed out; prepare afresh")


def local(args: Args, path: str, timeout: float) -> int | None:
    return None


def call(args: Args) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"workspace": workspace_of(args)}
    if args.verb == "compact":
        if args.older_than_days is not None:
            params["older_than_days"] = args.older_than_days
        if args.dry_run:
            params["dry_run"] = True
        return "lifecycle.compact", params
    if args.apply:
        if args.out or args.since or args.restart:
            raise Usage(
                "--apply takes only --dry-run", "Prepare (with --out, --since, --restart) and apply separately."
            )
        if args.apply.count("-") > 1:
            raise Usage("standard input (-) can be read once")
        return "compile.apply", params
    if args.dry_run:
        raise Usage("--dry-run goes with --apply", "memoryctl consolidate --apply answer.json --dry-run")
    for name in ("since", "restart"):
        if getattr(args, name):
            params[name] = getattr(args, name)
    return "compile.prepare", params


def _answer(source: str) -> dict[str, Any]:
    hint = "An answer is one JSON object meeting response_schema in the request; nothing was sent for it."
    what = "standard input" if source == "-" else source
    try:
        value = json.loads(read_capped(source, what, hint))
    except (ValueError, RecursionError) as exc:
        raise Usage(f"{what} is not valid JSON: {exc}", hint) from None
    if not isinstance(value, dict):
        raise Usage(f"{what} must hold a JSON object, not {type(value).__name__}", hint)
    return value


def exchange(conn: Connection, args: Args, method: str, params: dict[str, Any]) -> Any:
    if method == "lifecycle.compact":
        return conn.call(method, params)
    if method == "compile.prepare":
        result = conn.call(method, params)
        if args.out and result.get("request_id"):
            from memoryctl.verbs.rules import save_request

            save_request(args.out, result)
        return result
    answers = [_answer(source) for source in args.apply]  # all read (and checked) before the first is sent
    applied: list[dict[str, Any]] = []
    for n, answer in enumerate(answers, 1):
        if len(answers) > 1:
            _progress(n - 1, len(answers), args.apply[n - 1])
        body = {**params, "response": answer}
        if args.dry_run:
            body["dry_run"] = True
        try:
            applied.append(conn.call(method, body))
        except RemoteError:
            if applied:
                sys.stderr.write(f"\n{len(applied)} of {len(answers)} applied before {args.apply[n - 1]} was refused\n")
            raise
    if len(answers) > 1:
        _progress(len(answers), len(answers), "")
        sys.stderr.write("\n")
    return {"applied": applied}


def _progress(done: int, total: int, name: str) -> None:
    filled = int(30 * done / total)
    sys.stderr.write(f"\rconsolidating [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {name[-40:]:<40}")
    sys.stderr.flush()


def exit_code(args: Args, result: Any) -> int:
    return EXIT_OK


def render(args: Args, result: Any) -> str:
    if args.verb == "compact":
        return _render_compact(result)
    if "applied" in result:
        return "\n\n".join(_render_apply(r) for r in result["applied"])
    return _render_prepare(result, args.out)


def _render_prepare(result: dict[str, Any], out: str | None) -> str:
    if result.get("request_id") is None:
        return "nothing to consolidate (no new daily notes or observations)"
    chunk = result.get("chunk") or {"index": 1, "of": 1}
    lines = [
        f"request {result['request_id']}{'  (handed out again)' if result.get('resumed') else ''}",
        f"  path          {result['path']}",
        f"  daily notes   {result.get('entry_count', 0)}",
        f"  observations  {result['observation_count']}",
        f"  chunk         {chunk['index']}/{chunk['of']}",
    ]
    if out:
        lines.append(f"  written to    {out}")
    retry = ((result.get("request") or {}).get("consolidation") or {}).get("retry")
    if retry:
        lines.append(f"  last answer refused: {retry}")
    lines.append("next: have the host's model answer it (instructions and response_schema are in the request),")
    lines.append("      then `memoryctl consolidate --apply ANSWER.json`; run consolidate again for the next chunk")
    return "\n".join(lines)


def _render_apply(result: dict[str, Any]) -> str:
    if result.get("already_applied"):
        return f"{result['request_id']} was already applied (run {result['run_id']})"
    head = (
        f"dry run of {result['request_id']}: nothing written"
        if result.get("dry_run")
        else f"applied {result['request_id']} (run {result['run_id']}; `memoryctl restore {result['run_id']}` undoes it)"
    )
    lines = [head]
    consolidation = result.get("consolidation") or {}
    for target, row in (consolidation.get("targets") or {}).items():
        counts = row.get("counts") or {}
        lines.append(
            f"  {target:<9} {row['outcome']:<18} +{counts.get('added', 0)} -{counts.get('removed', 0)} "
            f"={counts.get('duplicates', 0)} dup, {counts.get('sanitized', 0)} sanitized"
        )
    routing = consolidation.get("routing")
    if routing:
        lines.append(f"  daily sections: {routing['result']} ({routing['mode']} mode)")
    if consolidation:
        lines.append(f"  daily notes consolidated: {consolidation.get('entries_consolidated', 0)}")
    lines.extend(f"  {w['action']:<9} {w['path']}" for w in result.get("writes", []) if w["action"] != "unchanged")
    lines.extend(f"  warning: {w}" for w in result.get("warnings", []))
    return "\n".join(lines)


def _render_compact(result: dict[str, Any]) -> str:
    files = result.get("files") or []
    if not files:
        return "nothing to compact (no archived days that old, or all compacted)"
    total = sum(f["bytes"] for f in files)
    lines = [f"{'would compact' if result['dry_run'] else 'compacting'} {len(files)} archived file(s), {total} bytes:"]
    lines += [f"  {f['path']}  {f['bytes']}" for f in files]
    if result.get("remaining"):
        lines.append(f"  ({result['remaining']} more for the next compact)")
    if result.get("request_id"):
        lines.append(f"request {result['request_id']}  ({result['path']})")
        lines.append(
            "next: have the host's model answer it with a history_entry, then `memoryctl consolidate --apply FILE`"
        )
    return "\n".join(lines)
