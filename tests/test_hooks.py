"""`memoryctl hook <host> <event>`: real memoryd, real memoryctl processes, the hosts' hook JSON on stdin.

The rule under test everywhere: stdout is empty or exactly one JSON object, and the exit code is always 0.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, daemon_env, short_tmp

DEADLINES = {"SessionStart": 1.5, "UserPromptSubmit": 0.8, "PostToolUse": 0.2, "PostToolUseFailure": 0.2, "Stop": 0.8}


def hook(
    env: dict[str, str],
    host: str,
    event: str,
    payload: Any,
    *extra: str,
    cwd: Path | None = None,
    raw: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `memoryctl hook` as a host would. (How long it takes is measured in bench/bench_hooks.py: a test's
    wall clock includes a Python start on a loaded machine.)"""
    data = raw if raw is not None else json.dumps(payload).encode()
    return subprocess.run(
        [sys.executable, "-m", "memoryctl", "hook", *extra, host, event],
        env=env,
        cwd=cwd,
        input=data,
        capture_output=True,
        timeout=30,
    )


def answer(out: subprocess.CompletedProcess[bytes]) -> dict[str, Any] | None:
    """The hook's JSON (None when it printed nothing), after checking the fail-open contract."""
    assert out.returncode == 0, out.stderr
    if not out.stdout:
        return None
    assert out.stdout.endswith(b"\n") and out.stdout.count(b"\n") == 1, out.stdout
    value = json.loads(out.stdout)
    assert isinstance(value, dict)
    return value


def silent(out: subprocess.CompletedProcess[bytes]) -> None:
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"", out.stdout


def write_memory(root: Path, text: str) -> None:
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").write_text(text, encoding="utf-8")


def observations(root: Path) -> list[dict[str, Any]]:
    path = root / "data" / "memory" / "observations.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- SessionStart ---------------------------------------------------------------------------------------------------


def test_session_start_prints_the_stable_part_as_additional_context(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    write_memory(root, "# Memory\n\n- Makefiles are indented with tabs.\n")
    out = hook(daemon.env, "claude", "SessionStart", {"session_id": "s-1", "cwd": str(root), "source": "startup"})
    got = answer(out)
    assert got is not None and set(got) == {"hookSpecificOutput"}
    specific = got["hookSpecificOutput"]
    assert specific["hookEventName"] == "SessionStart"
    assert "Makefiles are indented with tabs." in specific["additionalContext"]
    assert len(specific["additionalContext"]) <= 9000
    direct = daemon.call("context", {"workspace": ws, "session_id": "s-1"})
    assert specific["additionalContext"] == direct["stable"]["text"]


def test_session_start_is_byte_identical_when_the_session_resumes_after_memory_changed(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, _ = workspace
    write_memory(root, "# Memory\n\n- The build uses ninja.\n")
    first = hook(daemon.env, "claude", "SessionStart", {"session_id": "s-2", "cwd": str(root), "source": "startup"})
    write_memory(root, "# Memory\n\n- The build uses make now.\n")
    daemon.call("index", {"workspace": str(root)})
    resumed = hook(daemon.env, "claude", "SessionStart", {"session_id": "s-2", "cwd": str(root), "source": "resume"})
    compacted = hook(daemon.env, "codex", "SessionStart", {"session_id": "s-2", "cwd": str(root), "source": "compact"})
    assert answer(first) is not None
    assert resumed.stdout == first.stdout == compacted.stdout
    fresh = hook(daemon.env, "claude", "SessionStart", {"session_id": "s-3", "cwd": str(root), "source": "startup"})
    fresh_text = answer(fresh)["hookSpecificOutput"]["additionalContext"]  # type: ignore[index]
    assert "make now" in fresh_text and "ninja" not in fresh_text


def test_session_start_stays_within_9000_characters(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ = workspace
    write_memory(
        root, "# Memory\n\n" + "".join(f"## Topic {n}\n\n- fact number {n}: {'x' * 80}\n\n" for n in range(400))
    )
    out = hook(daemon.env, "claude", "SessionStart", {"session_id": "s-big", "cwd": str(root)})
    text = answer(out)["hookSpecificOutput"]["additionalContext"]  # type: ignore[index]
    assert "fact number 0:" in text and "cut to 9000" in text and len(text) <= 9000


def test_an_empty_workspace_prints_nothing_at_session_start(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ = workspace
    out = hook(daemon.env, "claude", "SessionStart", {"session_id": "s-0", "cwd": str(root)})
    silent(out)


# --- UserPromptSubmit -------------------------------------------------------------------------------------------


def test_a_prompt_recalls_a_remembered_decision(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    daemon.call(
        "remember",
        {"workspace": ws, "type": "decision", "text": "The T9 board's serial port timeout is 250 ms (ERR_T9_TIMEOUT)."},
    )
    (root / "src").mkdir()
    payload = {"session_id": "s-4", "cwd": str(root / "src"), "prompt": "what serial port timeout for the T9 board?"}
    out = hook(daemon.env, "claude", "UserPromptSubmit", payload)
    got = answer(out)
    assert got is not None
    assert got["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    context = got["hookSpecificOutput"]["additionalContext"]
    assert "250 ms" in context and "memory/" in context  # the passage and a path the agent can read further


def test_a_prompt_with_nothing_to_recall_prints_nothing(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ = workspace
    out = hook(daemon.env, "codex", "UserPromptSubmit", {"session_id": "s", "cwd": str(root), "prompt": "hello"})
    silent(out)
    out = hook(daemon.env, "claude", "UserPromptSubmit", {"session_id": "s", "cwd": str(root), "prompt": ""})
    silent(out)


def test_the_workspace_is_the_payloads_cwd_never_the_process_cwd_or_an_option(daemon: Daemon) -> None:
    mine, other = short_tmp("ws"), short_tmp("ws")
    for root, word in ((mine, "kestrel"), (other, "kestrel-other")):
        daemon.call("workspace.add", {"path": str(root)})
        daemon.call("remember", {"workspace": str(root), "text": f"The codename is {word} for this project."})
    payload = {"session_id": "s", "cwd": str(mine), "prompt": "what is the codename?"}
    out = hook(daemon.env, "claude", "UserPromptSubmit", payload, "--workspace", str(other), cwd=other)
    context = answer(out)["hookSpecificOutput"]["additionalContext"]  # type: ignore[index]
    assert "kestrel for this project" in context and "kestrel-other" not in context
    # a cwd outside every workspace: the daemon's MEMORY_WORKSPACE_NOT_FOUND fails open
    out = hook(daemon.env, "claude", "UserPromptSubmit", {**payload, "cwd": str(short_tmp("nows"))}, cwd=mine)
    silent(out)
    assert b"MEMORY_WORKSPACE_NOT_FOUND" in out.stderr
    # no cwd at all: nothing, whatever the process's own directory is
    out = hook(daemon.env, "claude", "UserPromptSubmit", {"prompt": "what is the codename?"}, cwd=mine)
    silent(out)


# --- PostToolUse / PostToolUseFailure -----------------------------------------------------------------------------


def test_tool_use_is_observed_with_private_spans_stripped(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    payload = {
        "session_id": "s-5",
        "cwd": str(root),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "make flash BOARD=t9", "description": "flash"},
        "tool_response": {
            "stdout": "flashed ok token=<private>hunter2</private> done",
            "stderr": "",
            "interrupted": False,
        },
    }
    out = hook(daemon.env, "claude", "PostToolUse", payload)
    silent(out)
    [obs] = observations(root)
    assert obs["kind"] == "tool_use" and obs["source"] == "claude:Bash"
    assert obs["data"] == {"tool_name": "Bash", "session_id": "s-5"}
    assert "make flash BOARD=t9" in obs["text"] and "flashed ok" in obs["text"]
    assert "hunter2" not in obs["text"] and "private>" not in obs["text"]
    events = daemon.call("timeline", {"workspace": ws})["events"]
    assert [(e["type"], e["kind"], e["id"]) for e in events] == [("observation", "tool_use", obs["observation_id"])]


def test_a_failed_tool_is_observed_with_its_error(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ = workspace
    payload = {
        "session_id": "s-6",
        "cwd": str(root),
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "error": "Exit code 1: 3 failed, ERR_FLAKY_UART in test_uart.py",
    }
    out = hook(daemon.env, "codex", "PostToolUseFailure", payload)
    silent(out)
    [obs] = observations(root)
    assert obs["kind"] == "tool_failure" and obs["source"] == "codex:Bash"
    assert "ERR_FLAKY_UART" in obs["text"] and "pytest -q" in obs["text"]


def test_a_huge_tool_output_is_capped(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ = workspace
    payload = {
        "session_id": "s-7",
        "cwd": str(root),
        "tool_name": "Read",
        "tool_input": {"file_path": "/big/" + "d" * 5000},
        "tool_response": {"type": "text", "file": {"content": "line of the file\n" * 40_000}},
    }
    out = hook(daemon.env, "opencode", "PostToolUse", payload)
    silent(out)
    [obs] = observations(root)
    assert obs["source"] == "opencode:Read"
    assert len(obs["text"]) <= 2000 and "line of the file" in obs["text"] and obs["text"].startswith("Read\n")


# --- Stop, PreCompact, SessionEnd ---------------------------------------------------------------------------------


def test_stop_asks_for_consolidation_over_the_threshold_and_never_when_stop_hook_active(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    env = {**daemon.env, "MEMORYD_CONSOLIDATE_AFTER": "3"}
    stop = {"session_id": "s-8", "cwd": str(root), "stop_hook_active": False}
    for n in range(2):
        daemon.call("observe", {"workspace": ws, "kind": "tool_use", "source": "claude:Bash", "text": f"ran {n}"})
    assert daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]["uncompiled_observations"] == 2
    out = hook(env, "claude", "Stop", stop)
    silent(out)  # 2 < 3
    daemon.call("observe", {"workspace": ws, "kind": "tool_use", "source": "claude:Bash", "text": "ran 2"})
    out = hook(env, "claude", "Stop", stop)
    got = answer(out)
    assert got is not None and got["decision"] == "block"
    assert "compile_prepare" in got["reason"] and "compile_apply" in got["reason"]
    out = hook(env, "claude", "Stop", {**stop, "stop_hook_active": True})
    silent(out)
    # the agent consolidates (here: an answer with no rules): nothing is pending, so Stop lets it finish
    request = daemon.call("compile.prepare", {"workspace": ws})
    empty = {"rules": [], "candidates": [], "overrides": [], "provenance_summary": {"observation_ids_used": []}}
    daemon.call("compile.apply", {"workspace": ws, "response": {"request_id": request["request_id"], **empty}})
    assert daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]["uncompiled_observations"] == 0
    out = hook(env, "claude", "Stop", stop)
    silent(out)
    # the default threshold is 20
    out = hook(daemon.env, "claude", "Stop", stop)
    silent(out)


def test_stop_counts_daily_notes_waiting_for_a_consolidation(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """Notes `remember` wrote and no consolidation has folded into MEMORY.md count toward the nudge, with the
    observations; once a consolidation covers them, Stop lets the agent finish."""
    root, ws = workspace
    env = {**daemon.env, "MEMORYD_CONSOLIDATE_AFTER": "3"}
    stop = {"session_id": "s-10", "cwd": str(root), "stop_hook_active": False}
    for text in ("KX-200 needs RTS/CTS above 115200", "bench-3 的串口超时改成 500 ms", "flash with BOOT0 high"):
        daemon.call("remember", {"workspace": ws, "type": "decision", "text": text})
    rules = daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]
    assert (rules["uncompiled_observations"], rules["unconsolidated_notes"]) == (0, 3)
    got = answer(hook(env, "claude", "Stop", stop))
    assert got is not None and got["decision"] == "block" and "3 daily notes" in got["reason"], got
    assert "/consolidate" in got["reason"]  # Claude Code's command (the plugin's) …
    for host in ("codex", "opencode"):  # … which Codex and OpenCode do not have: the steps alone
        other = answer(hook(env, host, "Stop", stop))
        assert other is not None and other["decision"] == "block" and "/consolidate" not in other["reason"]
        assert "compile_prepare" in other["reason"] and "compile_apply" in other["reason"]
    request = daemon.call("compile.prepare", {"workspace": ws})
    assert len(request["request"]["consolidation"]["daily_notes"]) == 3
    # prepared, not applied (refused, declined): the notes still wait, and Stop still asks
    assert daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]["unconsolidated_notes"] == 3
    held = answer(hook(env, "claude", "Stop", stop))
    assert held is not None and held["decision"] == "block" and "3 daily notes" in held["reason"], held
    consolidated = {
        "request_id": request["request_id"],
        "provenance_summary": {"observation_ids_used": []},
        "memory_update": "## Devices\n- KX-200 needs RTS/CTS above 115200 baud\n",
        "daily_sections": {"Decisions": ["RTS/CTS on KX-200", "串口超时 500 ms"]},
        "history_entry": "KX-200 serial settings",
    }
    daemon.call("compile.apply", {"workspace": ws, "response": consolidated})
    assert daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]["unconsolidated_notes"] == 0
    silent(hook(env, "claude", "Stop", stop))


def test_the_waiting_notes_count_sees_an_edit_that_keeps_size_and_time(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    """Status keeps each daily file's count of notes waiting for a consolidation while the file, the consolidation
    state and the tombstones are unchanged (counting read every daily file on each call: 0.4 s at 50 MB of notes, on
    every Stop). A note edited by hand afterwards is a new note to consolidate, even when the edit keeps the file's
    size and time."""
    root, ws = workspace
    for text in ("KX-200 needs RTS/CTS above 115200", "flash with BOOT0 high"):
        daemon.call("remember", {"workspace": ws, "type": "decision", "text": text})

    def waiting() -> int:
        return int(daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]["unconsolidated_notes"])

    assert waiting() == 2 and waiting() == 2
    request = daemon.call("compile.prepare", {"workspace": ws})
    response = {
        "request_id": request["request_id"],
        "provenance_summary": {"observation_ids_used": []},
        "memory_update": "## Devices\n- KX-200 needs RTS/CTS above 115200 baud\n",
        "history_entry": "KX-200 serial settings",
    }
    daemon.call("compile.apply", {"workspace": ws, "response": response})
    assert waiting() == 0 and waiting() == 0
    daily = next((root / "memory").glob("20??-??-??.md"))
    before = daily.stat()
    daily.write_text(daily.read_text().replace("BOOT0 high", "BOOT0 HIGH"))
    os.utime(daily, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert daily.stat().st_size == before.st_size
    assert waiting() == 1


@pytest.mark.parametrize("event", ["PreCompact", "SessionEnd"])
def test_pre_compact_and_session_end_print_nothing(daemon: Daemon, workspace: tuple[Path, str], event: str) -> None:
    root, _ = workspace
    write_memory(root, "# Memory\n\n- something stable\n")
    out = hook(daemon.env, "claude", event, {"session_id": "s-9", "cwd": str(root), "trigger": "auto"})
    silent(out)
    assert out.stderr == b""


# --- fail open ------------------------------------------------------------------------------------------------------


def payload_for(event: str, root: Path) -> dict[str, Any]:
    return {
        "session_id": "s-x",
        "cwd": str(root),
        "prompt": "what did we decide about the serial port?",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_response": {"stdout": "a", "stderr": ""},
        "error": "boom",
        "stop_hook_active": False,
    }


@pytest.mark.parametrize("event", list(DEADLINES))
def test_daemon_down_fails_open(event: str) -> None:
    home = short_tmp()
    env = {**daemon_env(home), "MEMORYD_SOCKET": str(home / "nowhere.sock"), "MEMORYD_CONSOLIDATE_AFTER": "1"}
    out = hook(env, "claude", event, payload_for(event, home))
    if event == "SessionStart":  # said once per session, in the host's status line (tests/test_install_env.py)
        said = answer(out)
        assert said is not None and set(said) == {"systemMessage"} and "DAEMON_UNAVAILABLE" in said["systemMessage"]
    else:
        silent(out)
    assert b"DAEMON_UNAVAILABLE" in out.stderr and out.stderr.count(b"\n") == 1


def test_socket_option_pointing_nowhere_fails_open() -> None:
    home = short_tmp()
    out = hook(
        daemon_env(home), "claude", "SessionStart", payload_for("SessionStart", home), "--socket", str(home / "x.sock")
    )
    said = answer(out)  # SessionStart says it in the status line; the model's context is untouched
    assert said is not None and set(said) == {"systemMessage"} and "x.sock" in said["systemMessage"]
    assert b"x.sock" in out.stderr


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json at all",
        b'{"cwd": "/tmp", "prompt": ',  # cut short
        b'["a", "list"]',
        b"\xff\xfe garbage bytes",
        b'{"cwd": "relative/dir", "prompt": "x", "session_id": "s"}',
        b'{"cwd": 42, "prompt": "x"}',
        b"{" + b'"pad": "' + b"x" * (1 << 20) + b'"}',  # over the 1 MB cap
    ],
    ids=["empty", "text", "truncated", "list", "binary", "relative-cwd", "number-cwd", "over-1MB"],
)
def test_malformed_input_fails_open(daemon: Daemon, raw: bytes) -> None:
    out = hook(daemon.env, "claude", "UserPromptSubmit", None, raw=raw)
    silent(out)
    assert out.stderr.startswith(b"memoryctl hook: ")


@pytest.mark.parametrize(
    "words",
    [("claude", "Bogus"), ("vim", "SessionStart"), ("claude",), ("claude", "Stop", "extra"), ()],
    ids=["unknown-event", "unknown-host", "no-event", "extra-word", "nothing"],
)
def test_unknown_event_or_host_fails_open(daemon: Daemon, workspace: tuple[Path, str], words: tuple[str, ...]) -> None:
    root, _ = workspace
    out = subprocess.run(
        [sys.executable, "-m", "memoryctl", "hook", *words],
        env=daemon.env,
        input=json.dumps({"session_id": "s", "cwd": str(root)}).encode(),
        capture_output=True,
        timeout=30,
    )
    silent(out)
    assert out.stderr.startswith(b"memoryctl hook: ")


@pytest.fixture
def mute_socket() -> Iterator[Path]:
    """A listening Unix socket that accepts every connection and never answers."""
    path = short_tmp("mute") / "mute.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("event", list(DEADLINES))
def test_a_daemon_that_never_answers_fails_open_within_the_deadline(mute_socket: Path, event: str) -> None:
    home = short_tmp()
    env = {**daemon_env(home), "MEMORYD_SOCKET": str(mute_socket), "MEMORYD_CONSOLIDATE_AFTER": "1"}
    out = hook(env, "claude", event, payload_for(event, home))  # it ends (run's timeout would fail it) …
    silent(out)
    assert out.stderr.count(b"\n") == 1  # … by itself, saying why in one line


def test_stdin_left_open_fails_open_within_the_deadline(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """A host that never closes the hook's standard input: the deadline covers reading it."""
    root, _ = workspace
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryctl", "hook", "claude", "PostToolUse"],
        env=daemon.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"cwd": str(root), "tool_name": "Bash"}).encode())
    proc.stdin.flush()
    code = proc.wait(timeout=10)  # standard input still open: it ends by itself
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout.read(), proc.stderr.read()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()
    assert code == 0 and stdout == b""
    assert b"deadline" in stderr
    assert observations(root) == []


# --- the verb -------------------------------------------------------------------------------------------------------


def test_hook_is_a_listed_verb_with_help(daemon: Daemon) -> None:
    listed = daemon.memoryctl("--help")
    assert listed.returncode == 0 and "hook" in listed.stdout
    helped = daemon.memoryctl("hook", "--help")
    assert helped.returncode == 0 and "claude" in helped.stdout and "opencode" in helped.stdout


def test_the_hook_path_imports_nothing_of_the_daemon() -> None:
    """The hook path stays on the standard library's cheap modules: never memoryd, pydantic or typing."""
    code = (
        "import sys, io; sys.stdin = io.TextIOWrapper(io.BytesIO(b'{}'));"
        "from memoryctl.cli import main; main(['hook', 'claude', 'SessionEnd']);"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('memoryd', 'pydantic', 'typing')))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent / "client")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_lone_surrogate_in_the_prompt_never_breaks_the_output(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    daemon.call("remember", {"workspace": ws, "text": "The serial port runs at 921600 baud."})
    out = hook(
        daemon.env, "claude", "UserPromptSubmit", {"session_id": "s", "cwd": str(root), "prompt": "serial \ud800 baud"}
    )
    answer(out)  # exit 0; stdout empty or one JSON object


def test_codex_resuming_a_session_gets_no_second_stable_block(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """Codex replays the transcript on resume and keeps an identical second block: the hook gives none then."""
    root, _ = workspace
    (root / "memory" / "MEMORY.md").write_text("## Devices\n- KX-200 KQZRESUME\n", encoding="utf-8")
    payload = {"session_id": "s-resume", "cwd": str(root), "hook_event_name": "SessionStart", "source": "startup"}
    env = daemon.env
    start = subprocess.run(
        [sys.executable, "-m", "memoryctl", "hook", "codex", "SessionStart"],
        input=json.dumps(payload),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "KQZRESUME" in start.stdout
    resumed = subprocess.run(
        [sys.executable, "-m", "memoryctl", "hook", "codex", "SessionStart"],
        input=json.dumps({**payload, "source": "resume"}),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (resumed.returncode, resumed.stdout) == (0, "")
    claude = subprocess.run(  # Claude Code drops an identical block itself: it gets it, byte for byte
        [sys.executable, "-m", "memoryctl", "hook", "claude", "SessionStart"],
        input=json.dumps({**payload, "source": "resume"}),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert claude.stdout == start.stdout
