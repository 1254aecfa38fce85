"""`memoryctl hook <host> <event>`: a coding agent host's hook, answered from memoryd within a deadline.

Reads the host's hook JSON on standard input (Claude Code's shape; Codex uses the same one, OpenCode's plugin
sends it too) and calls the daemon for the workspace containing the payload's ``cwd``. Fail-open: on any fault
(daemon down, timeout, malformed input, unknown host or event, an error from the daemon) it exits 0 with nothing on
standard output and one line on standard error — never exit 2 (Claude Code would block the user's prompt) and never
text that is not the hook's JSON. docs/reference/hooks.md describes every event.

Standard library only, and only what the call needs: this runs on every prompt and every tool call.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

HOSTS = ("claude", "codex", "opencode")
# Seconds from the hook's start to its answer: reading standard input, connecting and the call, all together.
DEADLINES = {
    "SessionStart": 1.5,
    "UserPromptSubmit": 0.8,
    "PostToolUse": 0.2,
    "PostToolUseFailure": 0.2,
    "Stop": 0.8,
    "PreCompact": 0.2,
    "SessionEnd": 0.2,
}
# SessionStart with --autostart (what `memoryctl install` writes): time to start the daemon too, within the 5 s the
# installed host configuration gives the hook
AUTOSTART_DEADLINE = 4.0
MAX_STDIN_BYTES = 1 << 20  # a larger payload is not read to the end: the hook fails open
CONTEXT_MAX_CHARS = 9_000  # Claude Code replaces additionalContext over 10,000 characters with a file pointer
QUERY_MAX_CHARS = 100_000  # the context method's limit for query_text
SUMMARY_INPUT_CHARS = 600  # a tool observation: the input, then the output or error, each capped …
SUMMARY_MAX_CHARS = 2_000  # … and the whole text
CONSOLIDATE_AFTER = 20  # pending observations that make Stop ask for a consolidation (MEMORYD_CONSOLIDATE_AFTER)

USAGE = (
    "usage: memoryctl hook [--socket PATH] [--autostart] {claude|codex|opencode} EVENT  (stdin: the host's hook JSON)"
)


class Deadline(BaseException):
    """The hook's time is up (raised by SIGALRM; a BaseException, so no `except Exception` on the way swallows it)."""


class Skip(Exception):
    """Nothing to do or nothing to say, with the reason for standard error (empty: say nothing)."""


_live = [False]  # the deadline may interrupt the work; once it is over (answer ready or fault caught), no longer


def _alarm(signum: int, frame: object) -> None:
    if _live[0]:
        raise Deadline


def main(argv: Sequence[str]) -> int:
    """Run the hook named by ``argv`` (the words after `memoryctl`, `hook` among them). Always returns 0."""
    started = time.monotonic()
    socket_opt, words, autostart = _parse(argv)
    event = words[1] if len(words) == 2 else ""
    autostart = autostart and event == "SessionStart"
    deadline = AUTOSTART_DEADLINE if autostart else DEADLINES.get(event, 0.2)
    armed = hasattr(signal, "setitimer")
    _live[0] = True
    if armed:
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, deadline)
    data = b""
    reason = ""
    try:
        try:
            if len(words) != 2:
                raise Skip(USAGE)
            host = words[0]
            if host not in HOSTS:
                raise Skip(f"unknown host {host!r} (one of {', '.join(HOSTS)})")
            if event not in DEADLINES:
                raise Skip(f"unknown event {event!r} (one of {', '.join(DEADLINES)})")
            out = run(host, event, _read_payload(), socket_opt, deadline, autostart=autostart, started=started)
            data = b"" if out is None else encode(out)
        finally:
            _live[0] = False  # a deadline that fires before this line is caught below; after it, it is ignored
    except Skip as exc:
        reason = str(exc)
    except Deadline:
        data, reason = b"", f"no answer within the {event or 'hook'} deadline of {deadline:g} s"
    except BaseException as exc:  # fail open, whatever it was (KeyboardInterrupt and SystemExit included)
        data, reason = b"", _describe(exc)
    if armed:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if data:
        _emit(data)
    elif reason:
        _say(reason)
    return 0


def encode(out: dict[str, Any]) -> bytes:
    """One line of JSON, UTF-8 whatever the locale (escaped ASCII if the text holds a lone surrogate)."""
    try:
        return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(out, separators=(",", ":")).encode("ascii") + b"\n"


def _parse(argv: Sequence[str]) -> tuple[str | None, list[str], bool]:
    """``--socket PATH`` (before or after the verb), the positional words after `hook` and whether ``--autostart``
    was given; other options ignored."""
    socket_opt: str | None = None
    autostart = False
    words: list[str] = []
    seen_verb = False
    skip = False
    args = list(argv)
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "--socket":
            socket_opt = args[i + 1] if i + 1 < len(args) else None
            skip = True
        elif arg.startswith("--socket="):
            socket_opt = arg.partition("=")[2]
        elif arg == "--autostart":
            autostart = True
        elif arg in ("--timeout", "--workspace", "-w"):
            skip = True  # accepted for symmetry with the other verbs; a hook's deadline and workspace are fixed
        elif arg.startswith("-"):
            continue
        elif not seen_verb and arg == "hook":
            seen_verb = True
        else:
            words.append(arg)
    return socket_opt, words, autostart


def _read_payload() -> dict[str, Any]:
    data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise Skip(f"hook input over {MAX_STDIN_BYTES:,} bytes; ignored")
    try:
        payload = json.loads(data)
    except ValueError:
        raise Skip("hook input is not JSON") from None
    if not isinstance(payload, dict):
        raise Skip("hook input is not a JSON object")
    return payload


def _describe(exc: BaseException) -> str:
    name = getattr(exc, "name", None)  # ClientError and RemoteError carry the daemon's error names
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"{name}: {message}" if name else f"{type(exc).__name__}: {message}"


def _say(reason: str) -> None:
    try:
        sys.stderr.write("memoryctl hook: " + " ".join(reason.split()) + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _emit(data: bytes) -> None:
    """The hook's answer, written at once."""
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except Exception:
        try:  # the host stopped listening: let the interpreter's final flush find nothing to fail on
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except Exception:
            pass


# --- events -------------------------------------------------------------------------------------------------------


def run(
    host: str,
    event: str,
    payload: dict[str, Any],
    socket_opt: str | None,
    deadline: float,
    *,
    autostart: bool = False,
    started: float | None = None,
) -> dict[str, Any] | None:
    """The JSON to print for ``event``, or None to print nothing; raises on a fault (the caller fails open)."""
    if event in ("PreCompact", "SessionEnd"):
        return None  # nothing to flush: every observation was recorded synchronously when it happened
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise Skip("hook input has no absolute cwd: no workspace")
    session = payload.get("session_id")
    session_id = session if isinstance(session, str) and 0 < len(session) <= 4096 else None

    if event == "SessionStart":
        if host == "codex" and payload.get("source") == "resume":
            # Codex replays the session's transcript, the block from its start included, and does not drop an
            # identical second one (Claude Code does): emitting it again would send it twice (measured, 0.169)
            return None
        params: dict[str, Any] = {"workspace": cwd, "budget_chars": CONTEXT_MAX_CHARS}
        if session_id:
            params["session_id"] = session_id
        try:
            answer = _call(socket_opt, deadline, "context", params)
        except Exception as exc:
            if getattr(exc, "name", None) != "DAEMON_UNAVAILABLE":
                raise
            # said once per session, in the host's own status line (SessionStart runs once; later events stay quiet)
            if not autostart:
                return _status(
                    host,
                    f"memoryd is not running ({_describe(exc)}); this session has no project memory. "
                    "Start it with `memoryd serve` or install its service (docs/howto/service.md).",
                )
            problem = _start_daemon(socket_opt, deadline - (time.monotonic() - (started or time.monotonic())) - 0.3)
            if problem is not None:
                return _status(host, problem)
            answer = _call(socket_opt, deadline, "context", params)
        text = str(answer["stable"]["text"])
        return _context(event, text) if text else None

    if event == "UserPromptSubmit":
        prompt = payload.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise Skip("")  # nothing to recall for
        # the SessionStart call's budget: the same snapshot, so recall leaves out what that block already showed
        params = {"workspace": cwd, "query_text": prompt[:QUERY_MAX_CHARS], "budget_chars": CONTEXT_MAX_CHARS}
        if session_id:
            params["session_id"] = session_id
        text = str(_call(socket_opt, deadline, "context", params)["dynamic"]["text"])
        return _context(event, _cut(text, CONTEXT_MAX_CHARS)) if text else None

    if event in ("PostToolUse", "PostToolUseFailure"):
        tool = payload.get("tool_name")
        if not isinstance(tool, str) or not tool:
            raise Skip("hook input has no tool_name")
        failed = event == "PostToolUseFailure"
        data: dict[str, Any] = {"tool_name": tool}
        if session_id:
            data["session_id"] = session_id
        params = {
            "workspace": cwd,
            "kind": "tool_failure" if failed else "tool_use",
            "source": f"{host}:{tool}"[:256],
            "text": tool_summary(tool, payload, failed),
            "data": data,
        }
        _call(socket_opt, deadline, "observe", params)
        return None

    # Stop
    if payload.get("stop_hook_active"):
        return None  # the agent is already continuing because of a Stop hook: never loop
    threshold = consolidate_after()
    observations, notes = waiting(_call(socket_opt, deadline, "status", {"workspace": cwd}))
    if observations + notes < threshold:
        return None
    what = " and ".join(
        part
        for part in (f"{observations} observations" * bool(observations), f"{notes} daily notes" * bool(notes))
        if part
    )
    # only Claude Code has the /consolidate command (the plugin's); Codex and OpenCode get the steps alone
    how = ", as the /consolidate command says" if host == "claude" else ""
    return {
        "decision": "block",
        "reason": (
            f"memoryd: {what} of this project are waiting to be consolidated (into MEMORY.md and rules). Before "
            f"you finish, consolidate through the memory MCP tools{how}: compile_prepare → answer the request it "
            "returns (memory_update, daily_sections, history_entry; rules where the evidence supports them) → "
            "compile_apply with that answer. Then stop."
        ),
    }


def _status(host: str, message: str) -> dict[str, Any] | None:
    """A line for the person, in the host's status channel (Claude Code and Codex show ``systemMessage``); the
    model's context is untouched."""
    _say(message)
    return {"systemMessage": "memoryd: " + message} if host in ("claude", "codex") else None


def _start_daemon(socket_opt: str | None, wait_s: float) -> str | None:
    """Start memoryd in the background and wait at most ``wait_s`` for it: None once it answers, else what to tell
    the person (it goes on starting: the next prompts have memory)."""
    from memorydirs import resolve_dirs, socket_path

    from memoryctl.rpc import ClientError, start_daemon

    try:
        start_daemon(socket_path(socket_opt), max(wait_s, 0.1))
    except ClientError as exc:
        if "did not answer within" in exc.message:
            return "memoryd was not running; it is starting now, so memory arrives from the next prompt on."
        return f"memoryd was not running and could not be started ({exc.message}). {exc.hint}"
    except OSError as exc:  # no python to run, a log directory it cannot create
        return f"memoryd was not running and could not be started ({exc}); log: {resolve_dirs().log_file}"
    return None


def _context(event: str, text: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


def _call(socket_opt: str | None, deadline: float, method: str, params: dict[str, Any]) -> Any:
    from memorydirs import socket_path

    from memoryctl.rpc import Connection

    with Connection(socket_path(socket_opt), deadline) as conn:
        return conn.call(method, params)


def consolidate_after() -> int:
    raw = os.environ.get("MEMORYD_CONSOLIDATE_AFTER", "").strip()
    if not raw:
        return CONSOLIDATE_AFTER
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        _say(f"MEMORYD_CONSOLIDATE_AFTER must be a whole number above 0, got {raw!r}; using {CONSOLIDATE_AFTER}")
        return CONSOLIDATE_AFTER
    return value


def waiting(status: dict[str, Any]) -> tuple[int, int]:
    """The workspace's observations not compiled yet and daily notes not consolidated yet, from `status` (0, 0
    while its rules are still loading)."""
    for ws in status.get("workspaces") or []:
        rules = ws.get("rules") or {}
        observations, notes = rules.get("uncompiled_observations"), rules.get("unconsolidated_notes", 0)
        if isinstance(observations, int) and isinstance(notes, int):
            return observations, notes
    return 0, 0


# --- the observation's text ---------------------------------------------------------------------------------------


def tool_summary(tool: str, payload: dict[str, Any], failed: bool) -> str:
    """``tool``, its input and its output (or error), each capped, within 2,000 chars. <private> spans are left to
    the daemon's ``observe``, which strips them with the one function every path uses (JSON-escaped line breaks
    inside a tag included); a cap that cuts a span leaves it unclosed, and an unclosed span is stripped to the end."""
    head = f"{tool} failed" if failed else tool
    parts = [head]
    tool_input = payload.get("tool_input")
    if tool_input not in (None, "", {}, []):
        parts.append("input: " + _cut(_compact(tool_input), SUMMARY_INPUT_CHARS))
    if failed:
        result = payload.get("error")
        label = "error"
        if result in (None, ""):
            result, label = payload.get("tool_response"), "output"
    else:
        result, label = payload.get("tool_response", payload.get("tool_output")), "output"
    if result not in (None, "", {}, []):
        room = SUMMARY_MAX_CHARS - sum(len(p) + 1 for p in parts) - len(label) - 2
        if room > 20:
            parts.append(f"{label}: " + _cut(_compact(result), room))
    return _cut("\n".join(parts), SUMMARY_MAX_CHARS)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict) and set(value) <= {"stdout", "stderr", "interrupted", "isImage", "exit_code"}:
        # Bash's response: the streams as text, not as escaped JSON
        streams = [str(value[k]).strip() for k in ("stdout", "stderr") if value.get(k)]
        if streams:
            return "\n".join(streams)
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except ValueError:  # a circular structure cannot come from JSON; be safe anyway
        return str(value)


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: cut at the last line break in the final fifth if there is one, and
    marked with an ellipsis."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    newline = head.rfind("\n")
    if newline >= limit * 4 // 5:
        head = head[:newline]
    return head + "…"
