"""How memoryctl shows the state of the Markdown memory's index: `status`, `index`, `validate` (imported only by
those verbs, so `memoryctl search` does not load it)."""

from __future__ import annotations

from memoryctl.common import human_dict

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


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
    out = [human_dict(result)]
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
    scan = SCANS.get(v.get("scan") or "", "")
    return (
        f"vectors: {v.get('provider')} ({v.get('dimension')} dims), {v['embedded']:,} of {v['total']:,} passages "
        f"embedded ({v.get('progress', 0):.0%}){rate}{refused}{scan}"
    )


SCANS = {  # how a search reads the vectors (the daemon's vector_memory_mb)
    "memory": "",
    "rough": "; searched from rough rows in memory (past vector_memory_mb for full rows)",
    "file": "; searched from the file (past vector_memory_mb, or its rough rows are being built)",
}


REBUILT = {
    "missing": "",  # a new workspace, or an index file deleted while the daemon was stopped: nothing to say
    "corrupt": " (index rebuilt: the old one was corrupt)",
    "version_changed": " (index rebuilt for this version of memoryd)",
    "requested": " (index rebuilt on request)",
}


def _rebuilt(reason: str | None) -> str:
    return "" if not reason else REBUILT.get(reason, f" (index rebuilt: {reason})")


def _render_validate(result: dict[str, Any]) -> str:
    out = []
    for report in result.get("reports", []):
        out.append(f"{report['workspace_id']}  {'ok' if report['ok'] else 'problems found'}")
        for problem in report.get("problems", []):
            where = f"{problem['path']}:{problem['line']}" if problem.get("line") else problem.get("path", "")
            out.append(f"  {problem['severity']}: {where}  {problem['message']}")
    return "\n".join(out) or "nothing to validate"


RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "status": _render_status,
    "index": _render_index,
    "validate": _render_validate,
}
