"""`pipx install` (or `uv tool install`) of the package is the documented way to get memoryctl on PATH for hosts that run it without a
virtualenv: the package installs as a tool from this checkout, its memoryctl runs, and `memoryctl install` points the
host at that memoryctl's absolute path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, short_tmp
from tests.hostcli import skip_if_unreachable

pytestmark = pytest.mark.registry


def test_pipx_install_gives_a_memoryctl_that_configures_a_host() -> None:
    pytest.importorskip("pipx", reason="pipx is in the dev extra (make test installs it)")
    home = short_tmp("px")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PIPX_"))},
        "PIPX_HOME": str(home / "pipx"),
        "PIPX_BIN_DIR": str(home / "bin"),
        "PIPX_MAN_DIR": str(home / "man"),
        "HOME": str(home),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pipx", "install", str(ROOT)], env=env, capture_output=True, text=True, timeout=900
    )
    skip_if_unreachable(done, "pip")
    assert done.returncode == 0, done.stderr[-2000:]
    memoryctl = home / "bin" / "memoryctl"
    version = subprocess.run([str(memoryctl), "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip(), version.stderr
    project = short_tmp("pj")
    (project / ".git").mkdir()
    printed = subprocess.run(
        [str(memoryctl), "--json", "install", "claude", "--print"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    files = {f["path"]: json.loads(f["content"]) for f in json.loads(printed.stdout)["data"]["files"]}
    server = files[str(project / ".mcp.json")]["mcpServers"]["memoryd"]
    assert server["args"] == ["mcp"] and server["command"].startswith(str(home / "pipx"))  # pipx's own venv
    assert os.access(server["command"], os.X_OK)


def test_uv_tool_install_gives_a_memoryctl_on_its_own() -> None:
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        pytest.skip("uv is in the dev extra (make test installs it)")
    home = short_tmp("uv")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_"))},
        "UV_TOOL_DIR": str(home / "tools"),
        "UV_TOOL_BIN_DIR": str(home / "bin"),
        "UV_PYTHON_DOWNLOADS": "never",
        "HOME": str(home),
    }
    done = subprocess.run(
        [str(uv), "tool", "install", "--python", sys.executable, str(ROOT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    skip_if_unreachable(done, "uv")
    assert done.returncode == 0, done.stderr[-2000:]
    version = subprocess.run(
        [str(home / "bin" / "memoryctl"), "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0 and version.stdout.startswith("memoryctl"), version.stderr
