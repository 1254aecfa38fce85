"""``memoryctl install claude|codex|opencode``: write (or ``--print``) a host's configuration for memoryd — its MCP
server and, where the host has them, its hooks — naming the absolute path of this ``memoryctl``, so they work when
the user's shell has no virtualenv active (hosts start hooks and MCP servers with their own environment).

Standard library only. Every file is merged, never replaced: other servers, hooks and settings stay; memoryd's own
entries are replaced (running it twice changes nothing). JSON files are written atomically (temp file + rename).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HOOK_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "PreCompact",
    "SessionEnd",
)
TIMEOUTS = {"SessionStart": 5, "UserPromptSubmit": 3, "Stop": 3, "PreCompact": 3, "SessionEnd": 3}
FORWARDED_ENV = ("MEMORYD_HOME", "MEMORYD_SOCKET", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME")
# Codex asks before these (they change files: reversible with restore, but not what an agent should do unasked);
# the other tools read or append and are approved.
ASKING_TOOLS = ("memory_forget", "compile_apply")
APPROVED_TOOLS = (
    "memory_search",
    "memory_get",
    "memory_remember",
    "memory_observe",
    "rules_resolve",
    "memory_context",
    "compile_prepare",
)
PLUGIN_SOURCE = Path(__file__).with_name("opencode_plugin.ts")
TOML_BEGIN = "# >>> memoryd (memoryctl install codex) >>>"
TOML_END = "# <<< memoryd <<<"


class InstallError(Exception):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def memoryctl_path() -> str:
    """The absolute path of the memoryctl that runs now: the script beside this interpreter (a venv, pipx, uv tool),
    else the one on PATH."""
    beside = Path(sys.executable).parent / "memoryctl"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside.absolute())
    found = shutil.which("memoryctl")
    if found:
        return str(Path(found).absolute())
    raise InstallError(
        "cannot find the memoryctl executable to point the host at",
        "Install it where hosts can run it: pipx install '.[semantic,mcp]' in a memoryd clone, then run "
        "`memoryctl install …` again.",
    )


def recorded_env() -> dict[str, str]:
    """The variables that say where the daemon is (its home, its socket, the XDG directories), as this memoryctl
    runs now: written into the host's configuration, so a host started without them (a desktop launcher, a trimmed
    environment) reaches the same daemon."""
    return {name: os.path.abspath(os.environ[name]) for name in FORWARDED_ENV if os.environ.get(name)}


def plan(
    host: str, scope: str, project: Path, home: Path, exe: str, env: dict[str, str] | None = None
) -> list[tuple[Path, str]]:
    """(file, its new content) for ``host``; nothing is written."""
    env = env or {}
    if host == "claude":
        settings = (home / ".claude" / "settings.json") if scope == "user" else (project / ".claude" / "settings.json")
        servers = (home / ".claude.json") if scope == "user" else (project / ".mcp.json")
        server: dict[str, Any] = {"command": exe, "args": ["mcp"], **({"env": env} if env else {})}
        return [
            (settings, _json(_with_hooks(_read_json(settings), exe, "claude", env))),
            (servers, _json(_with_server(_read_json(servers), "mcpServers", server))),
        ]
    if host == "codex":
        config = (home / ".codex" / "config.toml") if scope == "user" else (project / ".codex" / "config.toml")
        hooks = (home / ".codex" / "hooks.json") if scope == "user" else (project / ".codex" / "hooks.json")
        return [
            (config, _with_toml_block(_read_text(config), exe, env)),
            (hooks, _json(_with_hooks(_read_json(hooks), exe, "codex", env))),
        ]
    if host == "opencode":
        config = (home / ".config" / "opencode" / "opencode.json") if scope == "user" else (project / "opencode.json")
        plugin = (
            (home / ".config" / "opencode" / "plugin" / "memoryd.ts")
            if scope == "user"
            else (project / ".opencode" / "plugin" / "memoryd.ts")
        )
        server = {"type": "local", "command": [exe, "mcp"], "enabled": True, **({"environment": env} if env else {})}
        return [(config, _json(_with_server(_read_json(config), "mcp", server))), (plugin, _plugin(exe, env))]
    raise InstallError(f"unknown host {host!r}", "Use claude, codex or opencode.")


def install(host: str, scope: str, project: Path, *, dry_run: bool) -> list[tuple[Path, str]]:
    changes = plan(host, scope, project, Path.home(), memoryctl_path(), recorded_env())
    if not dry_run:
        for path, content in changes:
            _write(path, content)
    return changes


# --- merging ----------------------------------------------------------------------------------------------------


def _hook_command(exe: str, host: str, event: str, env: dict[str, str] | None = None) -> str:
    """The shell command a host runs: the recorded variables, this memoryctl, and for SessionStart ``--autostart``
    (a reboot without a service must not mean a memoryless session)."""
    prefix = "".join(f"{name}={shlex.quote(value)} " for name, value in sorted((env or {}).items()))
    autostart = "--autostart " if event == "SessionStart" else ""
    return f'{prefix}"{exe}" hook {autostart}{host} {event}'


def _ours(hook: Any) -> bool:
    command = str(hook.get("command", "")) if isinstance(hook, dict) else ""
    return "memoryctl" in command and " hook " in command


def _with_hooks(config: dict[str, Any], exe: str, host: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    hooks = config.get("hooks")
    hooks = dict(hooks) if isinstance(hooks, dict) else {}
    for event in HOOK_EVENTS:
        groups = [g for g in hooks.get(event, []) if isinstance(g, dict)]
        kept = []
        for group in groups:  # other tools' hooks stay; an older memoryd entry goes
            others = [h for h in group.get("hooks", []) if not _ours(h)]
            if others:
                kept.append({**group, "hooks": others})
        ours: dict[str, Any] = {"type": "command", "command": _hook_command(exe, host, event, env)}
        ours["timeout"] = TIMEOUTS.get(event, 2)
        group = {"matcher": "*", "hooks": [ours]} if event.startswith("PostToolUse") else {"hooks": [ours]}
        hooks[event] = [*kept, group]
    return {**config, "hooks": hooks}


def _with_server(config: dict[str, Any], key: str, server: dict[str, Any]) -> dict[str, Any]:
    servers = config.get(key)
    servers = dict(servers) if isinstance(servers, dict) else {}
    servers["memoryd"] = server
    return {**config, key: servers}


def _with_toml_block(text: str, exe: str, env: dict[str, str] | None = None) -> str:
    """config.toml with memoryd's MCP server as a marked block (replaced on reinstall, the rest left as it is)."""
    lines = [
        TOML_BEGIN,
        "[mcp_servers.memoryd]",
        f"command = {json.dumps(exe)}",
        'args = ["mcp"]',
        # Codex hands MCP servers a trimmed environment: forward what memoryctl finds the daemon's socket by
        # (without XDG_RUNTIME_DIR it would look in another place and start a second daemon) …
        "env_vars = " + json.dumps(list(FORWARDED_ENV)),
        "startup_timeout_sec = 20",
        # … and every tool asks first unless approved below: forget and compile_apply change files (reversible
        # with restore, still not something an agent should do unasked)
        "# memory_forget and compile_apply change files: Codex asks before each call (approve them in the",
        "# session, or here); `codex exec` cannot ask and refuses them unless the run approves them, e.g.",
        "# -c 'mcp_servers.memoryd.tools.compile_apply.approval_mode=\"approve\"'. The tools that read or",
        "# append are approved below.",
        'default_tools_approval_mode = "prompt"',
    ]
    if env:  # … and what this install ran with, for a Codex started without it
        lines += ["", "[mcp_servers.memoryd.env]", *(f"{k} = {json.dumps(v)}" for k, v in sorted(env.items()))]
    for tool in APPROVED_TOOLS:  # they read or append
        lines += ["", f"[mcp_servers.memoryd.tools.{tool}]", 'approval_mode = "approve"']
    block = "\n".join([*lines, TOML_END])
    if TOML_BEGIN in text and TOML_END in text:
        before, rest = text.split(TOML_BEGIN, 1)
        after = rest.split(TOML_END, 1)[1]
        return before + block + after
    if "[mcp_servers.memoryd]" in text:
        raise InstallError(
            "config.toml already has an [mcp_servers.memoryd] table not written by memoryctl",
            "Remove it (or rename it) and run `memoryctl install codex` again.",
        )
    return (text.rstrip("\n") + "\n\n" if text.strip() else "") + block + "\n"


def _plugin(exe: str, env: dict[str, str]) -> str:
    """OpenCode's plugin (client/memoryctl/opencode_plugin.ts, the repository's .opencode/plugin/memoryd.ts) with
    this memoryctl and the recorded variables filled in."""
    try:
        source = PLUGIN_SOURCE.read_text(encoding="utf-8")
    except OSError as exc:
        raise InstallError(
            f"cannot read OpenCode's plugin {PLUGIN_SOURCE} ({exc.strerror})", "Reinstall memoryd, then run this again."
        ) from None
    source = source.replace('process.env.MEMORYCTL || "memoryctl"', f"process.env.MEMORYCTL || {json.dumps(exe)}", 1)
    return source.replace(
        "const RECORDED_ENV: Record<string, string> = {}",
        "const RECORDED_ENV: Record<string, string> = " + json.dumps(env, sort_keys=True),
        1,
    )


# --- files ------------------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _read_json(path: Path) -> dict[str, Any]:
    text = _read_text(path)
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InstallError(f"{path} is not valid JSON ({exc})", "Fix or move the file, then run this again.") from exc
    if not isinstance(data, dict):
        raise InstallError(f"{path} is not a JSON object", "Fix or move the file, then run this again.")
    return data


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = (path.stat().st_mode & 0o777) if path.exists() else 0o644
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
