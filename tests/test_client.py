"""memoryctl: standard library only, JSON envelope, exit codes that match the daemon's error table."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

from memoryctl.cli import EXIT_CODES

from memoryd.errors import SPECS
from tests.conftest import ROOT, Daemon, short_tmp

PROBE = """
import sys
before = set(sys.modules)
import memoryctl, memoryctl.cli, memoryctl.rpc, memoryctl.paths
try:
    memoryctl.cli.main(["--help"])
except SystemExit:
    pass
stdlib = set(sys.stdlib_module_names)
third_party = sorted(m for m in set(sys.modules) - before
                     if m.split(".")[0] not in stdlib and m.split(".")[0] != "memoryctl")
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
