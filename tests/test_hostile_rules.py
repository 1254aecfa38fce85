"""Rule files and evidence a cloned repository or a full disk can throw at the daemon: alias bombs, nesting deep
enough to crash libyaml, values the wire cannot carry, FIFOs, torn history lines, deep observation data, a disk
that fills up mid-append. Every call is answered, the daemon stays up, and the file is reported."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memoryctl.rpc import Connection, RemoteError

from memoryd import yamlsafe
from memoryd.fsio import append_line
from tests.conftest import Daemon, short_tmp, wait_for
from tests.test_rules import PROFILE, compiled, observe, resolve, rule

HEADER = """rule_id: uart-flow-control
model_id: KX-200
fw_range: '>=1.2.0 <1.3.0'
priority: 10
confidence: 0.9
provenance:
  observation_ids: [obs_01ARZ3NDEKTSV4RRFFQ69G5FAV]
"""


def bomb(levels: int) -> str:
    """The billion laughs inside a rule's facts: 9**levels strings from a few hundred bytes."""
    lines = [HEADER + "facts:", "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def call(d: Daemon, method: str, params: dict[str, Any]) -> Any:
    """A call that must be answered within 10 s: a hang or a flood fails the test instead of stalling it."""
    with Connection(str(d.socket), 10.0) as conn:
        return conn.call(method, params)


def rule_errors(d: Daemon, ws: str) -> list[str]:
    errors: list[str] = call(d, "status", {"workspace": ws})["workspaces"][0]["rules"]["errors"]
    return errors


@pytest.fixture
def two(daemon: Daemon) -> Iterator[tuple[Path, str, str]]:
    """A workspace with a good rule, and another workspace with a note: the bystander."""
    root, other = short_tmp("ws"), short_tmp("ws")
    ws = daemon.call("workspace.add", {"path": str(root)})["workspace_id"]
    bystander = daemon.call("workspace.add", {"path": str(other)})["workspace_id"]
    daemon.call("remember", {"workspace": bystander, "text": "串口超时 ERR_UART_TIMEOUT_0x3F after 115200"})
    compiled(daemon, ws, rule(observe(daemon, ws)))
    yield root, ws, bystander
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(other, ignore_errors=True)


def assert_serving(d: Daemon, root: Path, ws: str, bystander: str, *, problem: str) -> None:
    """The hostile file is reported, the last good rule still answers, search works here and elsewhere."""
    errors = wait_for(lambda: [e for e in rule_errors(d, ws) if e.startswith(PROFILE)])
    assert problem in errors[0], errors
    assert resolve(d, ws, "1.2.3")["facts"]["transport.uart.flow_control"] == "rts_cts"
    report = call(d, "validate", {"workspace": ws})["reports"][0]
    assert not report["ok"] and any(p["path"] == PROFILE and problem in p["message"] for p in report["problems"])
    call(d, "search", {"workspace": ws, "query": "KX-200 flow control"})
    hits = call(d, "search", {"workspace": bystander, "query": "串口超时"})["hits"]
    assert hits and hits[0]["workspace_id"] == bystander
    assert call(d, "ping", {})["pong"]


@pytest.mark.parametrize("levels", [6, 9])
def test_an_alias_bomb_is_refused_and_reported(daemon: Daemon, two: tuple[Path, str, str], levels: int) -> None:
    root, ws, bystander = two
    (root / PROFILE).write_text(bomb(levels))
    assert_serving(daemon, root, ws, bystander, problem="aliases")


def test_nesting_that_crashes_libyaml_is_refused(daemon: Daemon, two: tuple[Path, str, str]) -> None:
    root, ws, bystander = two
    deep = 100_000  # libyaml's composer recurses in C: this deep, a segmentation fault
    (root / PROFILE).write_text(HEADER + "facts:\n  x: " + "[" * deep + "]" * deep + "\n")
    assert_serving(daemon, root, ws, bystander, problem="nested too deeply")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("18446744073709551617", "does not fit in 64 bits"),
        ("-9223372036854775809", "does not fit in 64 bits"),
        (".nan", "not a JSON number"),
        ("-.inf", "not a JSON number"),
        ("!!binary aGVsbG8=", "binary"),
        ("!!set {a, b}", "a set"),
        ("!!python/object:os.system echo", "not valid YAML"),
    ],
)
def test_a_value_that_cannot_travel_is_the_files_problem(
    daemon: Daemon, two: tuple[Path, str, str], value: str, problem: str
) -> None:
    root, ws, bystander = two
    (root / PROFILE).write_text(HEADER + f"facts:\n  transport.uart.flow_control: none\n  x: {value}\n")
    assert_serving(daemon, root, ws, bystander, problem=problem)


def test_a_rule_file_too_large_or_not_a_file_is_not_read(daemon: Daemon, two: tuple[Path, str, str]) -> None:
    root, ws, bystander = two
    path = root / PROFILE
    path.write_text(HEADER + "facts:\n  x: '" + "a" * (1024 * 1024) + "'\n")
    assert_serving(daemon, root, ws, bystander, problem="rule files may have at most")
    path.unlink()
    os.mkfifo(path)  # opened for reading, a FIFO waits for a writer forever: it is no rule file, and never opened
    wait_for(lambda: not [e for e in rule_errors(daemon, ws) if e.startswith(PROFILE)])
    assert resolve(daemon, ws, "1.2.3")["facts"] == {}
    for method in ("validate", "status", "rules.search", "index"):
        call(daemon, method, {"workspace": ws} if method != "rules.search" else {"workspace": ws, "query": "uart"})
    assert call(daemon, "search", {"workspace": bystander, "query": "串口超时"})["hits"]


def test_a_history_backup_path_cannot_leave_the_backups(daemon: Daemon, two: tuple[Path, str, str]) -> None:
    root, ws, _bystander = two
    compiled(daemon, ws, rule(observe(daemon, ws, "again"), facts={"transport.uart.baud": 230400}))
    history = root / "data/memory/history.jsonl"
    secret = root.parent / f"{root.name}-secret.yaml"
    secret.write_text("facts: {stolen: true}\n")
    entries = [json.loads(line) for line in history.read_text().splitlines()]
    forged = 0
    for entry in entries:  # history.jsonl is a workspace file: a clone can carry a forged one
        for change in entry.get("changes", []):
            if change.get("backup"):
                change["backup"] = f"data/memory/backups/../../../../{secret.name}"
                forged += 1
    assert forged
    history.write_text("".join(json.dumps(e) + "\n" for e in entries))
    try:
        with pytest.raises(RemoteError) as err:
            call(daemon, "rules.diff", {"workspace": ws, "rule_id": "uart-flow-control", "from_rev": 1})
        assert err.value.data["name"] == "MEMORY_REVISION_NOT_FOUND"
    finally:
        secret.unlink()


def test_torn_history_lines_are_counted_and_shown(daemon: Daemon, two: tuple[Path, str, str]) -> None:
    root, ws, _bystander = two
    history = root / "data/memory/history.jsonl"
    good = history.read_text()
    history.write_text(good + "not json at all\n" + '{"run_id": "apply_torn", "op": "ap')
    errors = wait_for(lambda: [e for e in rule_errors(daemon, ws) if "history.jsonl" in e])
    assert len(errors) == 2 and "line 2: not a JSON object" in errors[0] and "line 3: torn" in errors[1]
    report = call(daemon, "validate", {"workspace": ws})["reports"][0]
    found = {(p["line"], p["severity"]) for p in report["problems"] if p["path"] == "data/memory/history.jsonl"}
    assert found == {(2, "warning"), (3, "warning")}
    assert call(daemon, "timeline", {"workspace": ws})  # the good lines still make a timeline


@pytest.mark.parametrize("depth", [65, 254, 255, 1000])
def test_observe_data_nested_too_deep_is_invalid_params(daemon: Daemon, two: tuple[Path, str, str], depth: int) -> None:
    _root, ws, _bystander = two
    # written by hand: Python's json module cannot encode 1,000 levels
    data = '{"k":' * depth + '"leaf"' + "}" * depth  # ``depth`` objects, data itself the outermost
    params = f'{{"workspace":"{ws}","kind":"log","text":"deep","source":"t","data":{data}}}'
    line = f'{{"jsonrpc":"2.0","id":1,"method":"observe","params":{params}}}\n'
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(daemon.socket))
        sock.sendall(line.encode())
        reply = json.loads(sock.makefile("rb").readline())
    assert reply["error"]["data"]["name"] == "INVALID_PARAMS", reply
    assert "nested more than 64" in str(reply["error"]["data"]["errors"])
    shallow = {"d": {"k": {"k": [1, 2, {"k": "v"}]}}}
    assert call(daemon, "observe", {"workspace": ws, "kind": "log", "text": "ok", "source": "t", "data": shallow})


def test_private_keys_in_observe_data_are_stripped(daemon: Daemon, two: tuple[Path, str, str]) -> None:
    root, ws, _bystander = two
    data = {"<private>key-sk-123</private>token": "<PRIVATE>v</PRIVATE>x", "nested": {"<private>a</private>b": 1}}
    call(daemon, "observe", {"workspace": ws, "kind": "log", "text": "secret keys", "source": "t", "data": data})
    stored = (root / "data/memory/observations.jsonl").read_text()
    assert "sk-123" not in stored and '"token":"x"' in stored and '"b":1' in stored


# --- hypothesis: arbitrary YAML values in a rule file ----------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=16),
    st.dates(),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_junk = st.sampled_from(
    ["", "---\n---\n", "[unclosed", "a: &x [1]\nb: *x\n", "!!python/name:os.system", "\x00\x01", "? [a, b]\n: c\n"]
)


@given(
    facts=st.dictionaries(st.text(min_size=1, max_size=12), _values, min_size=1, max_size=5), top=_values, junk=_junk
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_arbitrary_yaml_values_never_take_the_daemon_down(
    tmp_root: tuple[Daemon, Path, str], facts: dict[str, Any], top: Any, junk: str
) -> None:
    d, root, ws = tmp_root
    data = yaml.safe_load(HEADER)
    data["facts"] = facts
    data["extra"] = top
    path = root / PROFILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        text = yaml.dump(data, allow_unicode=True)
    except yaml.YAMLError:
        text = junk
    for content in (text, text + junk):
        path.write_bytes(content.encode("utf-8", "surrogatepass"))
        call(d, "index", {"workspace": ws})  # with the watcher off, index and resolve read hand edits
        answer = call(d, "resolve", {"workspace": ws, "model_id": "KX-200", "fw_version": "1.2.3"})
        assert isinstance(answer["facts"], dict)
        call(d, "validate", {"workspace": ws})
        call(d, "status", {"workspace": ws})
        call(d, "search", {"workspace": ws, "query": "KX-200 uart"})
        call(d, "rules.search", {"workspace": ws, "query": "uart"})
    assert d.proc is not None and d.proc.poll() is None


@pytest.fixture(scope="module")
def tmp_root() -> Iterator[tuple[Daemon, Path, str]]:
    """One daemon for every example (the watcher off: each example's edit is read by index/resolve)."""
    from tests.conftest import daemon_env

    home, root = short_tmp(), short_tmp("ws")
    env = daemon_env(home)
    env["MEMORYD_WATCH"] = "false"
    d = Daemon(home, env).start()
    try:
        ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
        yield d, root, ws
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


# --- the disk fills up ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(where: Path, size: str = "256k") -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip() or 'not root'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> None:
    """Leave no free block on the file system of ``directory``."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


def test_append_line_leaves_no_torn_line_on_a_full_disk() -> None:
    base = short_tmp("disk")
    try:
        with small_disk(base / "fs") as fs:
            path = fs / "observations.jsonl"
            append_line(path, b'{"n": 1}')
            fill(fs)
            with pytest.raises(OSError):
                append_line(path, b'{"n": 2, "pad": "' + b"x" * 20_000 + b'"}')
            assert path.read_bytes() == b'{"n": 1}\n'
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_writes_on_a_full_disk_are_named_errors_and_leave_nothing_torn(daemon: Daemon) -> None:
    root = short_tmp("ws")
    try:
        with small_disk(root / "data" / "memory", "512k") as fs:
            ws = daemon.call("workspace.add", {"path": str(root)})["workspace_id"]
            oid = observe(daemon, ws)
            before = (fs / "observations.jsonl").read_bytes()
            fill(fs)
            for method, params in (
                ("observe", {"kind": "log", "text": "x" * 20_000, "source": "t"}),
                ("compile.prepare", {}),
            ):
                with pytest.raises(RemoteError) as err:
                    call(daemon, method, {"workspace": ws, **params})
                assert err.value.data["name"] == "MEMORY_WRITE_FAILED", (method, err.value.data)
            assert (fs / "observations.jsonl").read_bytes() == before  # no torn line
            (fs / "filler").unlink()
            request = call(daemon, "compile.prepare", {"workspace": ws})  # room again: it works
            assert request["request_id"] and call(daemon, "ping", {})["pong"]
            fill(fs)
            response = {
                "request_id": request["request_id"],
                "rules": [rule(oid, summary="s" * 1500)],
                "candidates": [],
                "overrides": [],
                "provenance_summary": {"observation_ids_used": [oid]},
            }
            with pytest.raises(RemoteError) as err:
                call(daemon, "compile.apply", {"workspace": ws, "response": response})
            assert err.value.data["name"] == "MEMORY_WRITE_FAILED", err.value.data
            (fs / "filler").unlink()
            assert not (root / PROFILE).exists() or yamlsafe.load((root / PROFILE).read_text())
            assert call(daemon, "compile.apply", {"workspace": ws, "response": response})["writes"]
            assert resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.flow_control"] == "rts_cts"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_compile_response_file_that_is_a_fifo_is_refused(daemon: Daemon, two: tuple[Path, str, str]) -> None:
    root, ws, _bystander = two
    os.mkfifo(root / "answer.json")  # `compile apply --in answer.json`: opened for reading, it would wait forever
    with pytest.raises(RemoteError) as err:
        call(daemon, "compile.apply", {"workspace": ws, "path": "answer.json"})
    assert err.value.data["name"] == "MEMORY_FILE_REFUSED"
    assert call(daemon, "ping", {})["pong"]
