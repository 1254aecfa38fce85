"""What a new user trips over (issue 11): every message helps, no input ends in a traceback, exit codes tell
scripts the truth. The real daemon on a real socket; the tutorials themselves run in test_tutorials.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from memoryctl.cli import VERBS, build_parser

from memoryd import units
from memoryd.config import SettingsError, load_settings
from memoryd.units import install_service
from tests.conftest import Daemon, daemon_env, short_tmp, wait_for

CLIENT_ENV = daemon_env(Path("/nonexistent-memoryd-home"))


def memoryctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """memoryctl with no daemon behind it: for what must be answered before any connection."""
    return subprocess.run(
        [sys.executable, "-m", "memoryctl", *args],
        env={**CLIENT_ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def project_with_note(daemon: Daemon, text: str = "flow control KQZNEW on bench 3") -> Path:
    project = short_tmp("nc")
    assert daemon.memoryctl("init", cwd=project).returncode == 0
    assert daemon.memoryctl("remember", text, cwd=project).returncode == 0
    return project


# --- item 8: bad timeouts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "0", "abc", "nan", "inf"])
def test_bad_timeout_option_is_a_usage_error(value: str) -> None:
    out = memoryctl("--timeout", value, "ping")
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and "--timeout" in out.stderr


def test_bad_timeout_environment_is_a_usage_error() -> None:
    out = memoryctl("ping", env={"MEMORYCTL_TIMEOUT": "abc"})
    assert out.returncode == 2, out
    assert "MEMORYCTL_TIMEOUT" in out.stderr and "Traceback" not in out.stderr


# --- item 10: help, typos, bare memoryd ---------------------------------------------------------------------


def test_typo_gets_a_suggestion() -> None:
    out = memoryctl("serch", "x")
    assert out.returncode == 2
    assert "did you mean 'search'?" in out.stderr


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_option_is_described_and_globals_are_not_repeated(verb: str) -> None:
    parser = build_parser(verb)
    verb_parser = next(a for a in parser._actions if a.dest == "verb").choices[verb]  # type: ignore[index]
    parsers = [verb_parser] + [
        sub for a in verb_parser._actions if a.choices and isinstance(a.choices, dict) for sub in a.choices.values()
    ]
    for p in parsers:
        for action in p._actions:
            if action.dest in ("help", "action", "ws_verb"):
                continue
            assert action.help, f"{p.prog} {action.option_strings or action.dest} has no description"
    out = memoryctl(verb, "--help")
    assert out.returncode == 0
    assert not any(line.lstrip().startswith("--socket") for line in out.stdout.splitlines()), out.stdout
    assert "see memoryctl --help" in " ".join(out.stdout.split())


def test_bare_memoryd_says_what_to_run() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memoryd"], env=CLIENT_ENV, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 2
    assert "memoryd serve" in out.stderr and "arguments are required" not in out.stderr


# --- item 11: messages ---------------------------------------------------------------------------------------


def test_config_error_reads_as_english(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(home=str(tmp_path), overrides={"get_max_lines": "many"})
    assert "must be a whole number" in str(caught.value) and "a int" not in str(caught.value)


def test_status_of_a_new_workspace_and_all_search_labels(daemon: Daemon) -> None:
    project = project_with_note(daemon, "labels KQZLABEL")
    status = daemon.memoryctl("status", cwd=project)
    assert status.returncode == 0 and "rebuilt: missing" not in status.stdout, status.stdout
    everything = daemon.memoryctl("search", "--all", "KQZLABEL", cwd=project)
    assert f"[{project.name}] memory/" in everything.stdout, everything.stdout


# --- item 3: validate ------------------------------------------------------------------------------------------


def test_validate_exits_1_on_errors_and_0_on_warnings(daemon: Daemon) -> None:
    project = project_with_note(daemon)
    clean = daemon.memoryctl("validate", cwd=project)
    assert clean.returncode == 0, clean.stdout
    (project / "memory" / "MEMORY.md").write_text("# Memory\n\n[broken](nowhere.md)\n")
    warned = daemon.memoryctl("validate", cwd=project)
    assert warned.returncode == 0 and "warning:" in warned.stdout, warned.stdout
    (project / "memory" / "MEMORY.md").write_text("# Memory\n\n[out](../../../etc/passwd.md)\n")
    failed = daemon.memoryctl("validate", cwd=project)
    assert failed.returncode == 1 and "error:" in failed.stdout, failed.stdout
    as_json = daemon.memoryctl("--json", "validate", cwd=project)
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["ok"] is True


# --- item 7: search ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "   "])
def test_empty_search_is_a_usage_error(daemon: Daemon, query: str) -> None:
    project = project_with_note(daemon)
    out = daemon.memoryctl("search", query, cwd=project)
    assert out.returncode == 2 and "USAGE" in out.stderr, out


def test_search_says_when_more_matches_exist(daemon: Daemon) -> None:
    project = project_with_note(daemon, "KQZMANY one")
    for i in range(3):
        daemon.memoryctl("remember", f"KQZMANY {i}", cwd=project)
    limited = daemon.memoryctl("search", "KQZMANY", "--limit", "2", cwd=project)
    assert limited.returncode == 0
    assert limited.stdout.count("memory/") == 2 and "more matches" in limited.stdout and "--limit 4" in limited.stdout
    everything = daemon.memoryctl("search", "KQZMANY", "--limit", "4", cwd=project)
    assert everything.stdout.count("memory/") == 4 and "more matches" not in everything.stdout
    as_json = json.loads(daemon.memoryctl("--json", "search", "KQZMANY", "--limit", "2", cwd=project).stdout)
    assert len(as_json["data"]["hits"]) == 2 and as_json["data"]["more"] is True


def test_a_long_hit_shows_a_few_lines_and_how_to_read_the_rest(daemon: Daemon) -> None:
    project = short_tmp("nc")
    (project / "memory").mkdir()
    body = "\n".join(f"  continued line {i}" for i in range(16))  # one bullet: a passage is never cut inside one
    (project / "memory" / "MEMORY.md").write_text(f"# Memory\n\n## Long\n- KQZLONG starts here\n{body}\n")
    daemon.memoryctl("init", cwd=project)
    out = daemon.memoryctl("search", "KQZLONG", "--snippet-max-chars", "4000", cwd=project)
    shown = [line for line in out.stdout.splitlines() if line.startswith("    ")]
    assert len(shown) <= 7 and "memoryctl get memory/MEMORY.md --from" in out.stdout, out.stdout


# --- item 9: remember --dry-run -------------------------------------------------------------------------------


def test_remember_dry_run_shows_the_text(daemon: Daemon) -> None:
    project = project_with_note(daemon)
    out = daemon.memoryctl("remember", "maybe 串口 KQZDRY", "--reason", "why not", "--dry-run", cwd=project)
    assert out.returncode == 0
    assert "would write memory/" in out.stdout and "KQZDRY" in out.stdout and "Reason: why not" in out.stdout
    assert "KQZDRY" not in next((project / "memory").glob("2*.md")).read_text()


# --- items 5 and 6: get -------------------------------------------------------------------------------------------


def test_get_resolves_against_the_current_directory(daemon: Daemon) -> None:
    project = project_with_note(daemon, "from a subdirectory KQZSUB")
    daily = next((project / "memory").glob("2*.md")).name
    out = daemon.memoryctl("get", daily, cwd=project / "memory")
    assert out.returncode == 0 and "KQZSUB" in out.stdout, out
    also = daemon.memoryctl("get", f"memory/{daily}", cwd=project / "memory")  # as search prints it
    assert also.returncode == 0 and "KQZSUB" in also.stdout, also


def test_get_messages_name_the_path_and_the_end(daemon: Daemon) -> None:
    project = project_with_note(daemon)
    missing = daemon.memoryctl("get", "memory/nope.md", cwd=project)
    assert missing.returncode == 1 and "memory/nope.md" in missing.stderr, missing.stderr
    (project / "memory" / "MEMORY.md").write_text("# Memory\n\n- one line\n")
    past = daemon.memoryctl("get", "memory/MEMORY.md", "--from", "100", cwd=project)
    assert past.returncode == 1 and "past the end" in past.stderr and not past.stdout.strip(), past
    refused = daemon.memoryctl("get", "README.txt", cwd=project)
    assert refused.returncode == 4 and "spec/memory/profiles/" in refused.stderr, refused.stderr


# --- item 13: install-service without XDG_RUNTIME_DIR ---------------------------------------------------------


def test_install_service_without_runtime_dir_still_says_percent_t(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for name in ("XDG_RUNTIME_DIR", "MEMORYD_HOME", "MEMORYD_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(units, "memoryd_command", lambda: [sys.executable, "-m", "memoryd"])
    out, err = io.StringIO(), io.StringIO()
    assert install_service(print_only=True, home=None, out=out, err=err, platform="linux") == 0
    assert "ListenStream=%t/memoryd/memoryd.sock" in out.getvalue(), out.getvalue()
    assert "MEMORYD_SOCKET" not in out.getvalue()
    assert f"export XDG_RUNTIME_DIR=/run/user/{os.getuid()}" in err.getvalue()


# --- item 4: a hand edit of a rule file is a revision (issue 19 §3.9: recorded, the file never rewritten) ------------


def test_hand_edit_of_a_rule_is_recorded_as_a_revision(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    from tests.test_rules import PROFILE, compiled, history, observe, resolve, rule

    root, ws = workspace
    oid = observe(daemon, ws, fw_version="1.2.3")
    compiled(daemon, ws, rule(oid))
    path = root / PROFILE
    original = path.read_bytes()
    text = original.decode()
    assert "revision: 1\n" in text and "transport.uart.baud: 921600" in text
    saved = "# checked on bench 3 (串口)\n" + text.replace("transport.uart.baud: 921600", "transport.uart.baud: 460800")
    path.write_bytes(saved.encode())
    mtime = path.stat().st_mtime_ns

    edits = wait_for(lambda: [h for h in history(root) if h["op"] == "hand_edit"])
    # recorded, and the file is exactly what the person saved: same bytes, same mtime (no "changed on disk")
    assert path.read_bytes() == saved.encode() and path.stat().st_mtime_ns == mtime
    assert len(edits) == 1 and edits[0]["changes"][0]["rules"] == [
        {"rule_id": "uart-flow-control", "rev_before": 1, "rev_after": 2}
    ]
    assert edits[0]["changes"][0]["sha_after"] == hashlib.sha256(saved.encode()).hexdigest()
    shown = daemon.call("rules.show", {"workspace": ws, "rule_id": "uart-flow-control"})
    assert shown["rule"]["revision"] == 2, shown["rule"]
    assert shown["rule"]["updated_at"] == edits[0]["ts"]
    assert [h["rev_after"] for h in shown["history"]] == [1, 2]
    answer = daemon.call("rules.diff", {"workspace": ws, "rule_id": "uart-flow-control", "from_rev": 1})
    baud = {"key": "transport.uart.baud", "before": 921600, "after": 460800, "change": "changed"}
    assert answer["to_rev"] == 2 and baud in answer["facts"], answer
    listed = daemon.call("rules.search", {"workspace": ws, "query": "uart-flow-control"})["rules"]
    assert [r["revision"] for r in listed] == [2]
    assert resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.baud"] == 460800
    assert path.read_bytes() == saved.encode() and path.stat().st_mtime_ns == mtime  # still untouched

    # restoring the hand edit puts the old bytes back: revision 1 again, and that write is no hand edit
    restored = daemon.call("restore", {"workspace": ws, "run_id": edits[0]["run_id"]})
    assert restored["writes"] == [{"path": PROFILE, "action": "update"}]
    assert path.read_bytes() == original
    assert daemon.call("rules.show", {"workspace": ws, "rule_id": "uart-flow-control"})["rule"]["revision"] == 1
    assert resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.baud"] == 921600
    assert [h["op"] for h in history(root)] == ["compile.apply", "hand_edit", "restore"]


def test_the_next_change_numbers_from_the_recorded_revision(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    from tests.test_rules import PROFILE, compiled, history, observe, rule

    root, ws = workspace
    compiled(daemon, ws, rule(observe(daemon, ws, fw_version="1.2.3")))
    path = root / PROFILE
    path.write_text(path.read_text().replace("transport.uart.baud: 921600", "transport.uart.baud: 460800"))
    wait_for(lambda: [h for h in history(root) if h["op"] == "hand_edit"])
    assert yaml.safe_load(path.read_text())["revision"] == 1  # the file says 1, history says 2
    # the next change of the daemon's own is revision max(file, recorded) + 1, written into the file
    result = compiled(daemon, ws, rule(observe(daemon, ws, "again at 921600", fw_version="1.2.4"), priority=20))
    assert result["writes"][0]["revision"] == 3, result["writes"]
    assert yaml.safe_load(path.read_text())["revision"] == 3
    applied = history(root)[-1]
    assert applied["changes"][0]["rules"] == [{"rule_id": "uart-flow-control", "rev_before": 2, "rev_after": 3}]
    baud = {"key": "transport.uart.baud", "before": 921600, "after": 460800, "change": "changed"}
    first = daemon.call("rules.diff", {"workspace": ws, "rule_id": "uart-flow-control", "from_rev": 1, "to_rev": 2})
    assert baud in first["facts"], first
    second = daemon.call("rules.diff", {"workspace": ws, "rule_id": "uart-flow-control", "from_rev": 2})
    assert {"key": "transport.uart.baud", "before": 460800, "after": 921600, "change": "changed"} in second["facts"]
    # the daemon's own write is not taken for another hand edit
    assert [h["op"] for h in history(root)].count("hand_edit") == 1


def test_a_hand_edit_of_an_override_file_keeps_each_rules_recorded_revision(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    """An override file holds several rules: a second hand edit (of another rule) keeps the first one's recorded
    revision, and a restart reads both from history."""
    from tests.test_rules import compiled, history, observe

    root, ws = workspace
    oid = observe(daemon, ws)
    base = {"instance_id": "bench-3", "model_id": "KX-200", "priority": 0, "confidence": 0.95}
    compiled(
        daemon,
        ws,
        overrides=[
            {
                **base,
                "rule_id": "one",
                "fw_range": "1.2.*",
                "facts": {"transport.timeout_ms": 500},
                "provenance": {"observation_ids": [oid]},
            },
            {
                **base,
                "rule_id": "two",
                "fw_range": "1.3.*",
                "facts": {"transport.timeout_ms": 700},
                "provenance": {"observation_ids": [oid]},
            },
        ],
    )
    path = root / "data/memory/overrides/bench-3.yaml"

    def revisions() -> dict[str, int]:
        found = daemon.call("rules.search", {"workspace": ws, "layer": "override"})["rules"]
        return {r["rule_id"]: r["revision"] for r in found}

    assert revisions() == {"one": 1, "two": 1}
    path.write_text(path.read_text().replace("500", "550"))
    wait_for(lambda: revisions() == {"one": 2, "two": 1})
    path.write_text(path.read_text().replace("700", "750"))
    wait_for(lambda: revisions() == {"one": 2, "two": 2})
    saved = path.read_bytes()
    assert [h["op"] for h in history(root)].count("hand_edit") == 2
    daemon.stop()
    daemon.start()
    assert revisions() == {"one": 2, "two": 2} and path.read_bytes() == saved


# --- issue 19 §3.11: slips answered as slips, naming the path -----------------------------------------------------


def test_get_of_a_memory_file_outside_memory_says_which_path_was_meant(daemon: Daemon) -> None:
    project = project_with_note(daemon)
    (project / "memory" / "MEMORY.md").write_text("# Memory\n\n- 串口 one line\n")
    slip = daemon.memoryctl("get", "MEMORY.md", cwd=project)
    assert slip.returncode == 1, slip  # a plain slip: not the exit code of a refused escape (4)
    assert "did you mean memory/MEMORY.md?" in slip.stderr and "memoryctl get memory/MEMORY.md" in slip.stderr, slip
    answer = json.loads(daemon.memoryctl("--json", "get", "MEMORY.md", cwd=project).stdout)
    assert answer["error"]["name"] == "MEMORY_FILE_NOT_FOUND", answer
    daily = daemon.memoryctl("get", "2026-01-01.md", cwd=project)
    assert daily.returncode == 1 and "did you mean memory/2026-01-01.md?" in daily.stderr, daily.stderr
    # leaving the workspace is still refused as an escape
    escape = daemon.memoryctl("get", "../MEMORY.md", cwd=project)
    assert escape.returncode == 4 and "did you mean" not in escape.stderr, escape


def test_an_unregistered_directory_is_named(daemon: Daemon) -> None:
    elsewhere = short_tmp("unreg") / "子目录"
    elsewhere.mkdir()
    out = daemon.memoryctl("search", "anything", cwd=elsewhere)
    assert out.returncode == 1, out
    assert f"No registered workspace contains {elsewhere.resolve()}" in out.stderr, out.stderr
