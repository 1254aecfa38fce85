"""The host programs (Claude Code, Codex, OpenCode, the MCP Inspector) and the OpenCode plugin's type-check run from
the npm registry, pinned to exact versions (below) and kept in one npm cache shared by every clone of the project:
``$MEMORYD_TEST_NPM_CACHE``, else ``<user cache dir>/memoryd-tests/npm`` (``~/.cache/memoryd-tests/npm``; about 2 GB
once all of them were fetched). A test that needs the registry (npm, or PyPI for pipx and uv) is marked
``registry``: it runs under :data:`REGISTRY_TIMEOUT_S` instead of pytest's 120 s, so a cold download is not cut
short, and it skips, saying why, when npx is missing or the registry cannot be reached (any network failure: DNS,
refused, reset, timed out, a proxy's refusal), never on anything else."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REGISTRY_TIMEOUT_S = 1800  # per test marked `registry` (tests/conftest.py): a cold download of ~2 GB included

# Exact versions: what the tests were written against; bump them on purpose, one at a time.
CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"
CODEX = "@openai/codex@0.169.0"
OPENCODE = "opencode-ai@1.18.33"
INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"
OPENCODE_PLUGIN = "@opencode-ai/plugin@1.18.33"
TYPESCRIPT = "typescript@5.9.3"
BUN_TYPES = "bun-types@1.4.5"


def npm_cache() -> Path:
    """The npm cache every clone shares (created on first use)."""
    configured = os.environ.get("MEMORYD_TEST_NPM_CACHE", "").strip()
    if configured:
        return Path(configured).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache")
    return base / "memoryd-tests" / "npm"


# What an installer prints when it could not talk to its registry (and only then): npm's error codes for DNS,
# connection and timeout failures, a proxy's refusal (407, a tunnel that failed), a registry's 5xx answers;
# pip's and uv's equivalents.
_UNREACHABLE = {
    "npm": re.compile(
        r"npm (?:error|ERR!) (?:code (?:ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ESOCKETTIMEDOUT|ERR_SOCKET_TIMEOUT|ECONNREFUSED|"
        r"ECONNRESET|ENETUNREACH|EHOSTUNREACH|EPROTO|E407|E5\d\d|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|"
        r"SELF_SIGNED_CERT_IN_CHAIN)\b|network\b)|tunneling socket could not be established"
    ),
    "pip": re.compile(
        r"Could not find a version that satisfies|NewConnectionError|ConnectTimeoutError|ReadTimeoutError|ProxyError|"
        r"Temporary failure in name resolution|Name or service not known|Max retries exceeded|Connection refused|"
        r"Connection reset by peer|Network is unreachable"
    ),
    "uv": re.compile(
        r"dns error|Failed to fetch|error sending request|operation timed out|Connection refused|Connection reset|"
        r"tunnel error|proxy|Network is unreachable|client error \(Connect\)",
        re.IGNORECASE,
    ),
}


def registry_unreachable(output: str, tool: str = "npm") -> bool:
    """Whether ``output`` (an installer's stderr and stdout) says its registry could not be reached."""
    return _UNREACHABLE[tool].search(output) is not None


def skip_if_unreachable(done: subprocess.CompletedProcess[str], tool: str = "npm") -> None:
    """Skip the test, quoting the installer, when it failed because its registry could not be reached."""
    output = done.stderr + done.stdout
    if done.returncode != 0 and registry_unreachable(output, tool):
        pytest.skip(f"the {tool} registry is not reachable: {output.strip()[-300:]}")


def npx(
    package: str, *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = 900
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
        [found, "-y", "--cache", str(npm_cache()), package, *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    skip_if_unreachable(done)
    return done
