"""The fixtures: loaded once: a second copy (imported as `conftest` and as `tests.conftest`) kept its own
list of temp dirs, which the session's clean-up (in the other copy) never removed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests import conftest, hostcli
from tests.hostcli import REGISTRY_TIMEOUT_S, registry_unreachable


def test_conftest_is_one_module() -> None:
    copies = [
        name
        for name, module in list(sys.modules.items())
        if getattr(module, "__file__", None) and module.__file__ == conftest.__file__
    ]
    assert copies == ["tests.conftest"], copies


def test_the_session_clean_up_empties_the_list_short_tmp_fills(request: pytest.FixtureRequest) -> None:
    plugins = [
        p for p in request.config.pluginmanager.get_plugins() if getattr(p, "__file__", None) == conftest.__file__
    ]
    assert plugins == [conftest]  # the module whose _remove_short_tmps runs at the end is the one tests import
    path = conftest.short_tmp("ct")
    assert path in conftest._SHORT_TMPS


@pytest.mark.registry
def test_a_registry_test_gets_the_longer_timeout(request: pytest.FixtureRequest) -> None:
    """Issue 19 §5: a cold download hit pytest's 120 s timeout."""
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args[0] == REGISTRY_TIMEOUT_S > 600


@pytest.mark.parametrize(
    ("tool", "output"),
    [
        ("npm", "npm error code ENOTFOUND\nnpm error syscall getaddrinfo\nnpm error errno ENOTFOUND"),
        ("npm", "npm error code EAI_AGAIN\nnpm error request to https://registry.npmjs.org/x failed"),
        ("npm", "npm ERR! code ETIMEDOUT\nnpm ERR! network request to https://registry.npmjs.org/ failed"),
        ("npm", "npm error code ECONNREFUSED\nnpm error FetchError: request to http://proxy:3128 failed"),
        ("npm", "npm error code E407\nnpm error 407 Proxy Authentication Required"),
        ("npm", "npm error network tunneling socket could not be established, cause=socket hang up"),
        ("npm", "npm error code ECONNRESET\nnpm error network aborted"),
        ("npm", "npm error code E503\nnpm error 503 Service Unavailable"),
        ("pip", "WARNING: Retrying ... NewConnectionError('Failed to establish a new connection')"),
        ("pip", "ERROR: Could not find a version that satisfies the requirement hatchling>=1.25"),
        ("pip", "ProxyError('Cannot connect to proxy.', OSError('Tunnel connection failed: 403 Forbidden'))"),
        ("uv", "error: Failed to fetch: `https://pypi.org/simple/anyio/`\n  Caused by: dns error"),
        ("uv", "error: Request failed after 3 retries\n  Caused by: operation timed out"),
    ],
)
def test_any_network_failure_of_an_installer_skips(tool: str, output: str) -> None:
    """Issue 19 §5: each test skipped on one exact string; EAI_AGAIN, a timeout or a proxy's refusal failed it."""
    assert registry_unreachable(output, tool)


@pytest.mark.parametrize(
    "output",
    [
        "npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/@openai%2fcodex - Not found",
        "npm error code ERESOLVE\nnpm error ERESOLVE unable to resolve dependency tree",
        "Error: Request timed out talking to the model API",  # the host's own failure: a test failure, not a skip
        "TypeError: Cannot read properties of undefined (reading 'tools')",
    ],
)
def test_other_failures_are_not_taken_for_an_unreachable_registry(output: str) -> None:
    assert not registry_unreachable(output, "npm")


def test_the_host_clis_are_pinned_and_cached_outside_the_clone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 §3.7: .venv/npm-cache filled each clone with ~2 GB, and @openai/codex had no version at all."""
    for package in (hostcli.CLAUDE_CODE, hostcli.CODEX, hostcli.OPENCODE, hostcli.INSPECTOR, hostcli.OPENCODE_PLUGIN):
        name, _, version = package.rpartition("@")
        assert name and re.fullmatch(r"\d+\.\d+\.\d+", version), package
    monkeypatch.delenv("MEMORYD_TEST_NPM_CACHE", raising=False)
    assert not hostcli.npm_cache().is_relative_to(conftest.ROOT)
    assert hostcli.npm_cache().parts[-2:] == ("memoryd-tests", "npm")
    monkeypatch.setenv("MEMORYD_TEST_NPM_CACHE", "/somewhere/else")
    assert hostcli.npm_cache() == Path("/somewhere/else")
    sources = [
        p.read_text(encoding="utf-8")
        for p in (conftest.ROOT / "tests").glob("*.py")
        if p.name not in ("hostcli.py", "test_conftest.py")
    ]
    assert not any('npm-cache"' in text or '@openai/codex"' in text for text in sources)
