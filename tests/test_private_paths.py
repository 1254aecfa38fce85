"""<private> spans never reach a file, a resolve or a prompt, whatever path they arrive by: compile.apply's
response, the hooks, `memoryctl observe` and `remember`. One stripping function, the daemon's, serves them all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import Daemon
from tests.test_remember import PRIVATE_SPELLINGS, UNCLOSED
from tests.test_rules import apply, observe, prepare, resolve, response, rule


def _walk(root: Path) -> str:
    """Every byte the daemon wrote under the workspace's trees, as one text."""
    texts = []
    for sub in ("spec", "data", "memory"):
        for path in sorted((root / sub).rglob("*")) if (root / sub).exists() else []:
            if path.is_file():
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(texts)


def test_compile_apply_strips_private_spans_from_rules_overrides_resolve_and_context(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    oid = observe(daemon, ws, fw_version="1.2.3")
    request = prepare(daemon, ws)
    facts: dict[str, Any] = {}
    summary = []
    for n, (opening, closing) in enumerate(PRIVATE_SPELLINGS):
        facts[f"k.v{n}"] = f"kept{n} {opening}SECRET{n} 机密{closing} tail{n}"
        summary.append(f"s{n} {opening}SECRET{n}{closing}")
    facts[f"k.{'<private>'}SECRETKEY</private>name"] = "value"
    facts["k.open"] = f"lead {UNCLOSED[2]}SECRETOPEN to the end"
    override = {
        "instance_id": "bench-3",
        "model_id": "KX-200",
        "fw_range": "1.2.*",
        "facts": {"transport.token": "tok <PRIVATE>SECRETOVR</PRIVATE> end"},
        "confidence": 0.95,
        "provenance": {"observation_ids": [oid]},
    }
    resp = response(
        request["request_id"],
        rules=[rule(oid, facts=facts, summary=" ".join(summary))],
        overrides=[override],
    )
    done = apply(daemon, ws, resp)
    assert done["applied"]
    written = _walk(root)
    assert "SECRET" not in written and "机密" not in written
    assert "kept0" in written and "tail0" in written and "lead" in written
    plain = resolve(daemon, ws, "1.2.3", "bench-3")
    text = json.dumps(plain, ensure_ascii=False)
    assert "SECRET" not in text and "机密" not in text
    assert plain["facts"]["k.v0"] == "kept0  tail0" and plain["facts"]["transport.token"] == "tok  end"
    assert plain["facts"]["k.open"] == "lead "
    context = daemon.call(
        "context",
        {"workspace": ws, "model_id": "KX-200", "fw_version": "1.2.3", "instance_id": "bench-3", "session_id": "s1"},
    )
    assert "kept0" in context["stable"]["text"] and "SECRET" not in json.dumps(context, ensure_ascii=False)
    shown = daemon.call("rules.show", {"workspace": ws, "rule_id": "uart-flow-control"})
    assert "SECRET" not in json.dumps(shown, ensure_ascii=False)
