"""memoryctl: standard library only, JSON envelope, exit codes that match the daemon's error table."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memoryctl.cli import EXIT_CODES

from memoryd.errors import SPECS
from tests.conftest import ROOT, Daemon, short_tmp

PROBE = """
import sys
before = set(sys.modules)
import memoryctl, memoryctl.cli, memoryctl.rpc, memorydirs
try:
    memoryctl.cli.main(["--help"])
except SystemExit:
    pass
stdlib = set(sys.stdlib_module_names)
third_party = sorted(m for m in set(sys.modules) - before
                     if m.split(".")[0] not in stdlib and m.split(".")[0] not in ("memoryctl", "memorydirs"))
print("THIRD-PARTY:" + ",".join(third_party))
"""


def test_memoryctl_loads_no_third_party_module() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, cwd=ROOT / "client")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "THIRD-PARTY:"


def test_exit_codes_match_the_error_table() -> None:
    for name, spec in SPECS.items():
        assert EXIT_CODES.get(name, 1) == spec.exit_code, name


def test_json_envelopes_and_exit_codes(daemon: Daemon) -> None:
    ok = daemon.memoryctl("--json", "ping")
    assert ok.returncode == 0 and json.loads(ok.stdout) == {
        "ok": True,
        "data": {"pong": True, "version": importlib.metadata.version("memoryd")},
    }
    forbidden = daemon.memoryctl("workspace", "list", "--json")  # global flags after the verb work too
    assert forbidden.returncode == 0  # memoryctl reads the owner token itself
    env = dict(daemon.env, MEMORYD_HOME=str(short_tmp("other")), MEMORYD_SOCKET=str(daemon.socket))
    no_token = subprocess.run(
        [sys.executable, "-m", "memoryctl", "--json", "workspace", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_token.returncode == 4
    error = json.loads(no_token.stdout)["error"]
    assert error["name"] == "MEMORY_FORBIDDEN" and error["hint"] and error["message"]
    usage = daemon.memoryctl("no-such-verb")
    assert usage.returncode == 2
    missing = daemon.memoryctl("--json", "workspace", "add", "/definitely/not/here")
    assert missing.returncode == 1 and json.loads(missing.stdout)["error"]["name"] == "MEMORY_WORKSPACE_INVALID"


def test_human_output_is_readable(daemon: Daemon) -> None:
    project = short_tmp("proj")
    added = daemon.memoryctl("workspace", "add", str(project), "--name", "演示")
    assert added.returncode == 0 and added.stdout.startswith("ws_")
    listed = daemon.memoryctl("workspace", "list")
    assert "演示" in listed.stdout and str(project) in listed.stdout
    status = daemon.memoryctl("status")
    assert "workspace_count: 1" in status.stdout
    bad = daemon.memoryctl("workspace", "add", "/nope/nope")
    assert bad.returncode == 1
    assert "MEMORY_WORKSPACE_INVALID" in bad.stderr and "hint:" in bad.stderr


def test_init_registers_the_project_root(daemon: Daemon) -> None:
    project = short_tmp("proj")
    (project / ".git").mkdir()
    nested = project / "src" / "drivers"
    nested.mkdir(parents=True)
    out = daemon.memoryctl("--json", "init", cwd=nested)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["data"]["path"] == str(project)
    assert (project / "memory").is_dir()


# --- the quick reader (issue 20 item 9): a plain `memoryctl search` line skips argparse, with the same result ---

QUICK_LINES = [
    ["search", "x"],
    ["search", "串口超时 flow control"],
    ["--json", "search", "x"],
    ["search", "x", "--json"],
    ["search", "x", "-n", "3"],
    ["search", "--limit", "5", "x"],
    ["search", "x", "--limit", " 7 "],
    ["search", "x", "--mode", "bm25"],
    ["search", "x", "--mode", "vector", "--mode", "hybrid"],
    ["-w", "/tmp/p", "search", "x"],
    ["search", "x", "-w", "ws_0123456789ab"],
    ["-w", "a", "search", "x", "--workspace", "b"],
    ["--timeout", "2.5", "search", "x"],
    ["search", "x", "--timeout", "1e3", "--autostart"],
    ["search", "x", "--all"],
    ["search", "x", "--snippet-max-chars", "50"],
    ["--socket", "/tmp/s.sock", "search", "x"],
    ["--workspace", "search", "search", "x"],
    ["search", ""],
    ["search", "x", "--limit", "0"],
    ["search", "what did we decide", "--since", "2026-02-01", "--until", "2026-02-28"],
]
ARGPARSE_LINES = [  # the quick reader hands these to argparse (usage errors, help, forms it does not read)
    ["search", "x", "--mode", "nope"],
    ["search", "x", "--since", "2026-02-30"],
    ["search", "x", "--since", "20260201"],
    ["search", "x", "--also", "串口超时"],
    ["--timeout", "0", "search", "x"],
    ["--timeout", "nan", "search", "x"],
    ["--all", "search", "x"],
    ["search", "x", "y"],
    ["search"],
    ["search", "--limit=5", "x"],
    ["search", "-n5", "x"],
    ["search", "x", "--lim", "5"],
    ["search", "-x"],
    ["search", "-"],
    ["search", "x", "--limit", "-5"],
    ["search", "x", "--limit", "abc"],
    ["search", "x", "--help"],
    ["search", "x", "-w"],
    ["search", "x", "--", "y"],
]


def _argparse_args(line: list[str]) -> dict[str, object] | None:
    from memoryctl.cli import build_parser
    from memoryctl.common import Args

    try:
        return vars(build_parser("search").parse_args(line, namespace=Args()))
    except SystemExit:
        return None


def test_the_quick_reader_reads_plain_search_lines_as_argparse_does() -> None:
    from memoryctl import quick
    from memoryctl.verbs import notes

    spec = notes.QUICK["search"]
    for line in QUICK_LINES:
        fast = quick.parse(line, "search", spec)
        assert fast is not None, line
        assert vars(fast) == _argparse_args(line), line
    for line in ARGPARSE_LINES:
        assert quick.parse(line, "search", spec) is None, line


PLAIN_SEARCH = """
import sys
from memoryctl.cli import main
code = main(["--json", "search", "flow control", "-n", "3"])
print("CODE", code, "ARGPARSE" if "argparse" in sys.modules else "NO-ARGPARSE", file=sys.stderr)
"""


def test_a_plain_search_builds_no_parser() -> None:
    env = {"PATH": "/usr/bin:/bin", "MEMORYD_SOCKET": str(short_tmp("nosock") / "none.sock"), "HOME": "/nonexistent"}
    out = subprocess.run([sys.executable, "-c", PLAIN_SEARCH], capture_output=True, text=True, timeout=60, env=env)
    assert "CODE 3 NO-ARGPARSE" in out.stderr, out.stderr
    assert json.loads(out.stdout)["error"]["name"] == "DAEMON_UNAVAILABLE"


# --- memoryctl.wire: json.dumps/json.loads through _json, without the json package's start-up ------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_wire_writes_and_reads_json_as_the_json_package_does(value: object) -> None:
    from memoryctl import wire

    for ensure_ascii in (True, False):
        for separators in ((", ", ": "), (",", ":")):
            expected = json.dumps(value, ensure_ascii=ensure_ascii, separators=separators)
            assert wire.dumps(value, ensure_ascii=ensure_ascii, separators=separators) == expected
            read = wire.loads(f" {expected}\n")
            assert json.dumps(read) == json.dumps(json.loads(expected))  # NaN != NaN: compare the text
            assert json.dumps(wire.loads(expected.encode("utf-8", "surrogatepass"))) == json.dumps(read)


@pytest.mark.parametrize("text", ["", " ", "{", '{"a": 1} x', "[1,]", "nul", '"\\ud800', "\x00", "[" * 100_000])
def test_wire_refuses_what_json_refuses(text: str) -> None:
    from memoryctl import wire

    with pytest.raises((ValueError, RecursionError)):
        json.loads(text)
    with pytest.raises((ValueError, RecursionError)):
        wire.loads(text)
