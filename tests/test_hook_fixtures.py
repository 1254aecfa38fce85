"""The hook JSON the real Claude Code 2.1.197 sent, recorded (tests/fixtures/claude-code-2.1.197/, paths replaced by
{cwd} and {home}), fed to `memoryctl hook claude <event>` against a real daemon: fast checks that the payloads hosts
really send are read as meant."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon

FIXTURES = Path(__file__).parent / "fixtures" / "claude-code-2.1.197"
MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")


def run(d: Daemon, root: Path, event: str) -> subprocess.CompletedProcess[str]:
    payload = (FIXTURES / f"{event}.json").read_text().replace("{cwd}", str(root)).replace("{home}", str(d.home))
    return subprocess.run(
        [MEMORYCTL, "hook", "claude", event], input=payload, env=d.env, capture_output=True, text=True, timeout=30
    )


def context(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return str(answer["hookSpecificOutput"]["additionalContext"])


def test_recorded_payloads_are_answered(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    (root / "memory" / "MEMORY.md").write_text("## Greetings\n- we say hello in English KQZFIXTURE\n", encoding="utf-8")
    daemon.call("remember", {"workspace": ws, "type": "note", "text": "say hello to the bench operator KQZPROMPT"})
    assert "KQZFIXTURE" in context(run(daemon, root, "SessionStart"))
    assert "KQZPROMPT" in context(run(daemon, root, "UserPromptSubmit"))  # its prompt is "say hello"
    for event in ("PostToolUse", "PostToolUseFailure"):
        done = run(daemon, root, event)
        assert (done.returncode, done.stdout) == (0, ""), done.stderr
    observed = json.dumps(daemon.call("timeline", {"workspace": ws}), ensure_ascii=False)
    assert "echo hello" in observed and "File does not exist" in observed
    for event in ("Stop", "SessionEnd"):  # under the consolidation threshold; nothing to flush
        done = run(daemon, root, event)
        assert (done.returncode, done.stdout) == (0, ""), done.stderr


@pytest.mark.parametrize("event", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_a_recorded_payload_for_a_project_that_is_not_registered_fails_open(
    daemon: Daemon, tmp_path: Path, event: str
) -> None:
    done = run(daemon, tmp_path, event)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
