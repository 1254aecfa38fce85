"""The host programs (Claude Code, Codex, OpenCode, the MCP Inspector) run with npx from the npm registry, cached in
.venv/npm-cache. A test that needs one skips, saying why, when npx is missing or the registry cannot be reached."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".venv" / "npm-cache"


def npx(
    package: str, *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    found = shutil.which("npx")
    if found is None:
        pytest.skip(f"npx is not installed: {package} cannot run here")
    environ = {
        **(os.environ if env is None else env),
        "npm_config_update_notifier": "false",
        "DISABLE_AUTOUPDATER": "1",
    }
    done = subprocess.run(
        [found, "-y", "--cache", str(CACHE), package, *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0 and "ENOTFOUND" in done.stderr + done.stdout:
        pytest.skip(f"the npm registry is not reachable: {done.stderr[-300:]}")
    return done
