"""<private> spans never reach a file, a resolve or a prompt, whatever path they arrive by: compile.apply's
response, the hooks, `memoryctl observe` and `remember`. One stripping function, the daemon's, serves them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Daemon
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


# --- one stripping function for every path: the hook, `memoryctl observe`, `memoryctl remember` -------------------

# 13 closed spellings and 5 unclosed openings: the 18 variants of the attack run.
VARIANTS = [(o, c) for o, c in PRIVATE_SPELLINGS] + [(o, "") for o in UNCLOSED]


def _hook(env: dict[str, str], payload: dict[str, Any]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memoryctl", "hook", "claude", payload["hook_event_name"]],
        env=env,
        input=json.dumps(payload).encode(),
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 0 and out.stdout == b"", out


def _observed(root: Path) -> str:
    return (root / "data/memory/observations.jsonl").read_text(encoding="utf-8")


@pytest.mark.parametrize("shape", ["structured_input", "string_input", "structured_output", "bash_output", "error"])
def test_the_hook_leaves_stripping_to_the_daemon_and_no_variant_leaks(
    daemon: Daemon, workspace: tuple[Path, str], shape: str
) -> None:
    root, _ = workspace
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    for n, (opening, closing) in enumerate(VARIANTS):
        secret = f"{opening}SECRET{n} 机密{closing}"
        value = f"kept{n} {secret} after{n}"
        payload: dict[str, Any] = {
            "session_id": "s",
            "cwd": str(root),
            "hook_event_name": "PostToolUseFailure" if shape == "error" else "PostToolUse",
            "tool_name": "Edit",
            "tool_input": {"file_path": "/x.c"},
        }
        if shape == "structured_input":
            payload["tool_input"] = {"old_string": value, "nested": {"list": [value, 1]}}
        elif shape == "string_input":
            payload["tool_input"] = value
        elif shape == "structured_output":
            payload["tool_response"] = {"filePath": "/x.c", "structuredPatch": [{"lines": [value]}]}
        elif shape == "bash_output":
            payload["tool_response"] = {"stdout": value, "stderr": "", "interrupted": False}
        else:
            payload["error"] = value
        _hook(env, payload)
        stored = _observed(root)
        assert f"SECRET{n}" not in stored and "机密" not in stored, (shape, opening, closing)
        assert f"kept{n}" in stored, (shape, opening)
        if closing:
            assert f"after{n}" in stored, (shape, opening, closing)
    assert "private" not in _observed(root).lower()


def test_memoryctl_observe_and_remember_strip_every_variant(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ = workspace
    for n, (opening, closing) in enumerate(VARIANTS):
        value = f"kept{n} {opening}SECRET{n} 机密{closing} after{n}"
        out = daemon.memoryctl("observe", value, "--kind", "log", "--source", "pytest", cwd=root)
        assert out.returncode == 0, out.stderr
        out = daemon.memoryctl("remember", value, cwd=root)
        assert out.returncode == 0, out.stderr
    observed = _observed(root)
    daily = "".join(p.read_text(encoding="utf-8") for p in (root / "memory").glob("*.md"))
    for text in (observed, daily):
        assert "SECRET" not in text and "机密" not in text and "private" not in text.lower()
        assert all(f"kept{n}" in text for n in range(len(VARIANTS)))
    assert "hooks.strip_private" not in (ROOT / "client/memoryctl/hooks.py").read_text()
    assert "def strip_private" not in (ROOT / "client/memoryctl/hooks.py").read_text()  # one stripper: the daemon's


def test_a_long_run_inside_a_tag_costs_linear_time(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """The tag pattern once backtracked quadratically: 250,000 spaces after "<private" held a worker for many
    minutes (this test then fails on the per-test timeout)."""
    root, ws = workspace
    for filler in (" " * 250_000, "\\n" * 50_000, "\\" * 100_000):
        text = f"lead <private{filler}x"
        daemon.call("observe", {"workspace": ws, "kind": "log", "source": "pytest", "text": text}, timeout=600)
        daemon.call("remember", {"workspace": ws, "text": text[:60_000]}, timeout=600)
    assert "lead" in _observed(root)
