"""memoryctl's evidence-to-rules verbs: observe, compile prepare/apply, resolve, rules search/show/diff,
timeline, candidates list/promote/reject.

cli.py imports this module only when one of these verbs runs (memoryctl.verbs.group), so `memoryctl search` and
the hooks never pay for it.
"""

from __future__ import annotations

import json

from memoryctl.common import EXIT_APP, EXIT_OK, Args, Usage, read_capped, workspace_of
from memoryctl.rpc import ClientError

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from memoryctl.quick import Spec
    from memoryctl.rpc import Connection

QUICK: dict[str, Spec] = {}  # every line of these verbs is read by argparse

# --- parsers ------------------------------------------------------------------------------------------------


def _model_options(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("--model-id", required=required, help="device model, e.g. dvk-a1")
    p.add_argument("--fw-version", required=required, help="firmware version, e.g. 1.2.3")


def configure(verb: str, p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    layers = ("profile", "override", "candidate")
    if verb == "observe":
        p.add_argument("text", metavar="TEXT", help="the evidence, or - to read standard input")
        p.add_argument("--kind", required=True, help="test_result, log, measurement, report, conversation, …")
        p.add_argument("--source", required=True, help="who produced it: claude-code, pytest, a path, …")
        p.add_argument("--run-id", help="append to runs/RUN_ID/observations.jsonl")
        _model_options(p)
        p.add_argument("--tag", dest="tags", action="append", metavar="TAG", help="repeatable")
        p.add_argument("--data", metavar="JSON_OBJECT", help="structured details, e.g. '{\"baud\": 115200}'")
        p.add_argument("--dry-run", action="store_true", help="validate only; write nothing")
    elif verb == "compile":
        sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        prepare = sub.add_parser("prepare", parents=[common], help="write compile_request.json for the host LLM")
        prepare.add_argument("--run-id", help="only this run's observations")
        prepare.add_argument("--model-id", help="only observations of this model")
        prepare.add_argument("--since", help="ISO date or time: recompile observations from then on")
        prepare.add_argument("--restart", action="store_true", help="abandon outstanding requests; prepare afresh")
        prepare.add_argument("--out", metavar="FILE", help="also write the request object to FILE")
        apply = sub.add_parser("apply", parents=[common], help="validate the LLM's response and write the rules")
        apply.add_argument("--in", dest="in_file", required=True, metavar="FILE", help="compile response; - = stdin")
        apply.add_argument("--dry-run", action="store_true", help="validate and show the planned writes only")
    elif verb == "resolve":
        _model_options(p, required=True)
        p.add_argument("--instance-id", help="include this instance's overrides")
    elif verb == "rules":
        sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        search = sub.add_parser("search", parents=[common], help="list rules by model, firmware, layer and words")
        search.add_argument("query", nargs="?", help="words in the rule id, summary or fact keys")
        _model_options(search)
        search.add_argument("--layer", choices=layers, help="only rules of this layer")
        search.add_argument("--limit", "-n", type=int, metavar="N", help="at most N rules (default 50)")
        show = sub.add_parser("show", parents=[common], help="one rule with its provenance and history")
        diff = sub.add_parser("diff", parents=[common], help="unified diff between two revisions of a rule")
        for one in (show, diff):
            one.add_argument("rule_id", metavar="RULE_ID", help="as rules search or timeline prints it")
            one.add_argument("--layer", choices=layers, help="when the id exists in more than one layer")
        diff.add_argument("--from", dest="from_rev", type=int, required=True, metavar="REV", help="the older revision")
        diff.add_argument("--to", dest="to_rev", type=int, metavar="REV", help="default: the current revision")
    elif verb == "timeline":
        p.add_argument("--since", help="ISO date or time (inclusive)")
        p.add_argument("--until", help="ISO date or time (exclusive)")
        p.add_argument("--run-id", help="only this run's observations (changes are left out)")
        p.add_argument("--limit", "-n", type=int, metavar="N", help="at most N events (default 50)")
    elif verb == "candidates":
        sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = sub.add_parser("list", parents=[common], help="candidates waiting for review")
        listing.add_argument("--model-id", help="only this model's")
        for action, help_text in (
            ("promote", "move into profiles/ (or overrides)"),
            ("reject", "remove it (kept in backups/)"),
        ):
            move = sub.add_parser(action, parents=[common], help=help_text)
            move.add_argument("rule_id", metavar="RULE_ID", help="as candidates list prints it")
            move.add_argument("--model-id", help="when two models share the id")
            move.add_argument("--reason", help="recorded in history")
            move.add_argument("--dry-run", action="store_true", help="show the planned writes only")


def local(args: Args, path: str, timeout: float) -> int | None:
    return None  # every verb here is a call


# --- calls ------------------------------------------------------------------------------------------------------


def _pick(args: Args, params: dict[str, Any], *names: str) -> dict[str, Any]:
    """Copy the options that were given into params; the options are named like the wire's fields."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value is not False:
            params[name] = value
    return params


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_object(text: str, what: str, hint: str) -> dict[str, Any]:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise Usage(f"{what} is not valid JSON: {exc}", hint) from None
    except RecursionError:
        raise Usage(f"{what} is nested too deeply to be read", hint) from None
    if not isinstance(value, dict):
        raise Usage(f"{what} must hold a JSON object, not {type(value).__name__}", hint)
    return value


def _read_response(source: str) -> dict[str, Any]:
    """The compile response in FILE (or standard input for -), checked to be a JSON object before sending."""
    hint = "The response is one JSON object meeting response_schema in compile_request.json; nothing was sent."
    what = "standard input" if source == "-" else source
    return _json_object(read_capped(source, what, hint), what, hint)


def call(args: Args) -> tuple[str, dict[str, Any]]:
    verb: str = args.verb
    action: str = getattr(args, "action", "")
    method = f"{verb}.{action}" if action else verb
    params: dict[str, Any] = {"workspace": workspace_of(args)}
    if verb == "observe":
        params.update(
            kind=args.kind,
            text=read_capped("-", "standard input") if args.text == "-" else args.text,
            source=args.source,
        )
        if args.data is not None:
            params["data"] = _json_object(args.data, "--data", "Quote the object for the shell: --data '{\"k\": 1}'.")
        return method, _pick(args, params, "run_id", "model_id", "fw_version", "tags", "dry_run")
    if method == "compile.prepare":
        return method, _pick(args, params, "run_id", "model_id", "since", "restart")
    if method == "compile.apply":
        params["response"] = _read_response(args.in_file)
        return method, _pick(args, params, "dry_run")
    if verb == "resolve":
        return method, _pick(args, params, "model_id", "fw_version", "instance_id")
    if method == "rules.search":
        return method, _pick(args, params, "query", "model_id", "fw_version", "layer", "limit")
    if method in ("rules.show", "rules.diff"):
        return method, _pick(args, params, "rule_id", "layer", "from_rev", "to_rev")
    if verb == "timeline":
        return method, _pick(args, params, "since", "until", "run_id", "limit")
    if method == "candidates.list":
        return method, _pick(args, params, "model_id")
    return method, _pick(args, params, "rule_id", "model_id", "reason", "dry_run")


def exchange(conn: Connection, args: Args, method: str, params: dict[str, Any]) -> Any:
    result = conn.call(method, params)
    if method == "compile.prepare" and args.out:
        save_request(args.out, result)
    return result


def exit_code(args: Args, result: Any) -> int:
    return EXIT_OK


def save_request(path: str, result: dict[str, Any]) -> None:
    """compile prepare --out: the request object as pretty UTF-8 JSON (nothing is written when there is none)."""
    if result.get("request_id") is None:
        return
    if result.get("request") is None:
        raise ClientError("PROTOCOL_ERROR", "memoryd prepared a request but did not return it", "Update memoryd.", 5)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(result["request"], ensure_ascii=False, indent=2) + "\n")
    except OSError as exc:
        raise ClientError(
            "OUTPUT_FAILED",
            f"cannot write {path}: {exc.strerror or exc}",
            "The request stays outstanding: run compile prepare again with a writable --out.",
            EXIT_APP,
        ) from None


# --- renderers ---------------------------------------------------------------------------------------------


def render(args: Args, result: Any) -> str:
    verb: str = args.verb
    action: str = getattr(args, "action", "")
    if verb == "observe":
        return _render_observe(result)
    if verb == "compile":
        return _render_prepare(result, args.out) if action == "prepare" else _render_apply(result)
    if verb == "resolve":
        return _render_resolve(result)
    if verb == "rules":
        if action == "search":
            return _render_rule_list(result["rules"], "no rules", result["total"])
        return _render_show(result) if action == "show" else _render_diff(result)
    if verb == "timeline":
        return _render_timeline(result)
    if action == "list":
        return _render_rule_list(result["candidates"], "no candidates")
    return _render_move(result, action)


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _render_observe(result: dict[str, Any]) -> str:
    if result.get("dry_run"):
        return f"would append {result['observation_id']} to {result['path']} (dry run: nothing written)"
    return str(result["observation_id"])


def _render_prepare(result: dict[str, Any], out: str | None) -> str:
    if result.get("request_id") is None:
        return "nothing to compile (no new observations)"
    chunk = result.get("chunk") or {"index": 1, "of": 1}
    lines = [
        f"request {result['request_id']}{'  (resumed)' if result.get('resumed') else ''}",
        f"  path          {result['path']}",
        f"  observations  {result['observation_count']}",
        f"  chunk         {chunk['index']}/{chunk['of']}",
        f"  remaining     {result['remaining']}",
    ]
    if out:
        lines.append(f"  written to    {out}")
    return "\n".join(lines)


def _render_writes(writes: list[dict[str, Any]]) -> list[str]:
    lines = []
    for w in writes:
        rule = f"  {w['rule_id']}" if w.get("rule_id") else ""
        revision = f" rev {w['revision']}" if w.get("revision") is not None else ""
        lines.append(f"{w['action']:<9} {w['path']}{rule}{revision}")
    return lines


def _render_apply(result: dict[str, Any]) -> str:
    if result.get("dry_run"):
        head = f"dry run of {result['request_id']}: nothing written"
    elif result.get("already_applied"):
        head = f"{result['request_id']} was already applied (run {result['run_id']})"
    else:
        head = f"applied {result['request_id']} (run {result['run_id']})"
    lines = [head, *_render_writes(result["writes"])]
    if result.get("demoted"):
        lines.append("demoted to candidates (low confidence): " + ", ".join(result["demoted"]))
    lines.extend(f"warning: {w}" for w in result.get("warnings", []))
    return "\n".join(lines)


def _render_resolve(result: dict[str, Any]) -> str:
    where = f"{result['model_id']} {result['fw_version']}" + (
        f" on {result['instance_id']}" if result.get("instance_id") else ""
    )
    facts, trace = result["facts"], result["trace"]
    lines = [f"{where}: {len(facts)} fact(s) from {len(result['rules'])} rule(s)"]
    for key in sorted(facts):
        why = trace.get(key)
        if why:
            beat = f"; beat {', '.join(why['beat'])}" if why.get("beat") else ""
            reason = f"({why['rule_id']}, {why['layer']}, {why['fw_range']}, priority {why['priority']}{beat})"
            lines.append(f"{key} = {_value(facts[key])}    {reason}")
        else:
            lines.append(f"{key} = {_value(facts[key])}")
    serving = {why.get("path") for why in trace.values()}
    for error in result.get("errors", []):
        path, _, problem = error.partition(": ")
        if path in serving:  # its last good version still sets facts above
            lines.append(f"kept the last good version of {path}: {problem}")
        else:
            lines.append(f"skipped invalid rule file: {error}")
    return "\n".join(lines)


def _render_rule_list(rules: list[dict[str, Any]], empty: str, total: int | None = None) -> str:
    if not rules:
        return empty
    lines = []
    for r in rules:
        on = f" on {r['instance_id']}" if r.get("instance_id") else ""
        lines.append(
            f"{r['rule_id']}  {r['layer']}  {r['model_id']} {r['fw_range']}{on}  "
            f"rev {r['revision']}  confidence {r['confidence']}  priority {r['priority']}"
        )
        if r.get("summary"):
            lines.append(f"    {r['summary']}")
        lines.append(f"    facts: {', '.join(r['facts'])}")
    if total is not None and total > len(rules):
        lines.append(f"({len(rules)} of {total} shown; raise --limit)")
    return "\n".join(lines)


def _render_show(result: dict[str, Any]) -> str:
    rule = result["rule"]
    lines = [
        f"{rule['rule_id']}  {result['layer']}  {result['path']}",
        f"  model {rule['model_id']}  fw {rule['fw_range']}  priority {rule['priority']}  "
        f"confidence {rule['confidence']}  revision {rule['revision']}  updated {rule['updated_at']}",
    ]
    if rule.get("summary"):
        lines.append(f"  summary: {rule['summary']}")
    lines.append("facts:")
    lines.extend(f"  {key} = {_value(value)}" for key, value in sorted(rule["facts"].items()))
    lines.append("provenance:")
    for obs in result["observations"]:
        text = " ".join(str(obs["text"]).split())
        lines.append(f"  {obs['observation_id']}  {obs['ts']}  {obs['kind']}  {text[:100]}")
    lines.extend(f"  {missing}  (no longer in the store)" for missing in result["missing_observations"])
    if result["history"]:
        lines.append("history:")
        for h in result["history"]:
            revision = f" rev {h['rev_after']}" if h.get("rev_after") is not None else ""
            change = f"{h.get('action')} {h.get('path')}{revision}"
            lines.append(f"  {h.get('ts')}  {h.get('op')}  {h.get('run_id')}  {change}")
    return "\n".join(lines)


def _render_diff(result: dict[str, Any]) -> str:
    if not result["diff"]:
        return f"{result['rule_id']}: rev {result['from_rev']} and rev {result['to_rev']} are the same"
    return str(result["diff"])


def _render_timeline(result: dict[str, Any]) -> str:
    lines = [f"{e['ts']}  {e['type']:<11}  {e['id']}  {e['summary']}" for e in result["events"]]
    if result.get("truncated"):
        lines.append("(older events not shown; raise --limit or narrow with --since/--until)")
    return "\n".join(lines) or "no events"


def _render_move(result: dict[str, Any], action: str) -> str:
    if result.get("dry_run"):
        head = f"would {action} {result['rule_id']} (dry run: nothing written)"
    else:
        done = {"promote": "promoted", "reject": "rejected"}.get(action, action)
        head = f"{done} {result['rule_id']} (run {result['run_id']})"
    return "\n".join([head, *_render_writes(result["writes"])])
