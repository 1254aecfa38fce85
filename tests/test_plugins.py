"""The host plugins as files: Claude Code's marketplace and plugin pass `claude plugin validate --strict` (the real
CLI, from the npm registry), the hooks point at scripts that exist, and the scripts fail open when memoryctl cannot be
found (no output, exit 0: a hook must never block a prompt)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, short_tmp
from tests.hostcli import (
    BUN_TYPES,
    CLAUDE_CODE,
    CODEX,
    OPENCODE_PLUGIN,
    TYPESCRIPT,
    npm_cache,
    npx,
    skip_if_unreachable,
)

PLUGIN = ROOT / "plugins" / "memoryd"


def _claude(*args: str) -> subprocess.CompletedProcess[str]:
    return npx(CLAUDE_CODE, *args)


@pytest.mark.registry
@pytest.mark.parametrize("target", [ROOT, PLUGIN], ids=["marketplace", "plugin"])
def test_claude_plugin_validate_strict(target: Path) -> None:
    done = _claude("plugin", "validate", "--strict", str(target))
    assert done.returncode == 0 and "Validation passed" in done.stdout, done.stdout + done.stderr


def test_every_hook_and_server_runs_a_script_of_the_plugin() -> None:
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())["hooks"]
    commands = [h["command"] for groups in hooks.values() for g in groups for h in g["hooks"]]
    assert set(hooks) >= {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"}
    for event, groups in hooks.items():
        for group in groups:
            for hook in group["hooks"]:
                # exec form: no shell, so a plugin root with spaces or quotes in its path needs no quoting
                # SessionStart may start the daemon (--autostart): a reboot without a service is not a memoryless session
                first = ["--autostart"] if event == "SessionStart" else []
                want = ("${CLAUDE_PLUGIN_ROOT}/bin/memoryd-hook", [*first, "claude", event])
                assert (hook["command"], hook["args"]) == want
    assert all("${CLAUDE_PLUGIN_ROOT}" in c for c in commands)
    server = json.loads((PLUGIN / ".mcp.json").read_text())["mcpServers"]["memoryd"]
    for script in ("memoryd-hook", Path(server["command"]).name):
        assert os.access(PLUGIN / "bin" / script, os.X_OK), script


def test_the_hook_script_fails_open_without_memoryctl() -> None:
    home = short_tmp("hk")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}  # no memoryctl anywhere it looks
    done = subprocess.run(
        [str(PLUGIN / "bin" / "memoryd-hook"), "claude", "UserPromptSubmit"],
        input='{"prompt": "hello"}',
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (0, "")
    # the MCP launcher says what is missing instead (a server that cannot start should say why)
    done = subprocess.run([str(PLUGIN / "bin" / "memoryd-mcp")], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 1 and "memoryctl not found" in done.stderr


@pytest.mark.registry
def test_codex_installs_the_plugin_from_the_repository_marketplace() -> None:
    home = short_tmp("cx")

    def codex(*args: str) -> subprocess.CompletedProcess[str]:
        done = npx(CODEX, *args, env={**os.environ, "HOME": str(home)})
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    codex("plugin", "marketplace", "add", str(ROOT))
    codex("plugin", "add", "memoryd@memoryd")
    installed = json.loads(codex("plugin", "list", "--json").stdout)["installed"]
    assert [(p["pluginId"], p["enabled"]) for p in installed] == [("memoryd@memoryd", True)]
    servers = {s["name"]: s for s in json.loads(codex("mcp", "list", "--json").stdout)}
    assert servers["memoryd"]["transport"]["command"].endswith("/bin/memoryd-mcp")
    cached = next((home / ".codex" / "plugins" / "cache" / "memoryd" / "memoryd").iterdir())
    hooks = json.loads((cached / "hooks" / "codex-hooks.json").read_text())["hooks"]
    assert hooks["SessionStart"][0]["hooks"][0]["command"].endswith('memoryd-hook" --autostart codex SessionStart')
    assert os.access(cached / "bin" / "memoryd-hook", os.X_OK)


@pytest.mark.registry
def test_the_opencode_plugin_typechecks_against_opencodes_own_types() -> None:
    npm = shutil.which("npm")
    npx = shutil.which("npx")
    if npm is None or npx is None:
        pytest.skip("npm is not installed: the OpenCode plugin cannot be type-checked here")
    work = short_tmp("ts")
    shutil.copy(ROOT / ".opencode" / "plugin" / "memoryd.ts", work / "memoryd.ts")
    (work / "package.json").write_text('{"name": "check", "private": true, "type": "module"}')
    options = {
        "strict": True,
        "noEmit": True,
        "module": "ESNext",
        "moduleResolution": "bundler",
        "target": "ES2022",
        "types": ["bun-types"],
        "skipLibCheck": True,
    }
    (work / "tsconfig.json").write_text(json.dumps({"compilerOptions": options, "files": ["memoryd.ts"]}))
    cache = str(npm_cache())
    env = {**os.environ, "npm_config_update_notifier": "false"}
    packages = [OPENCODE_PLUGIN, TYPESCRIPT, BUN_TYPES]
    done = subprocess.run(
        [npm, "install", "--silent", "--cache", cache, *packages],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    skip_if_unreachable(done)
    assert done.returncode == 0, done.stderr[-2000:]
    checked = subprocess.run([npx, "tsc", "-p", "."], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
