"""`memoryctl merge-file %O %A %B` (git's merge driver: no daemon, the result over %A, exit 0) and `memoryctl init
--git` (.gitattributes and the driver in the repository's config; idempotent; says what it did)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from memoryctl import gitmerge

from tests.conftest import ROOT, Daemon, daemon_env, short_tmp

BIN = str(Path(sys.executable).parent)


def git_env(base: dict[str, str]) -> dict[str, str]:
    """No system or user git configuration (a developer's pull.rebase must not change a test), and this venv's
    memoryctl on PATH (what git runs as the driver)."""
    return dict(
        base, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, PATH=BIN + os.pathsep + base.get("PATH", "")
    )


def memoryctl(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryctl", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def git(repo: Path, *args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert not check or done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def no_daemon_env() -> dict[str, str]:
    home = short_tmp("nod")
    return git_env(dict(daemon_env(home), MEMORYD_SOCKET=str(home / "no.sock")))


BASE = "# Memory\n\n## Preferences\n- 用中文回答\n- use pnpm\n\n## Project\n- KX-200 talks 115200 baud\n"


def three(tmp: Path, base: bytes, ours: bytes, theirs: bytes) -> tuple[Path, Path, Path]:
    paths = tmp / "base.md", tmp / "ours.md", tmp / "theirs.md"
    for path, data in zip(paths, (base, ours, theirs), strict=True):
        path.write_bytes(data)
    return paths


def test_merge_file_writes_the_union_over_ours_without_a_daemon() -> None:
    tmp = short_tmp("mf")
    ours = BASE.replace("- use pnpm\n", "- use pnpm\n- 缩进两个空格\n")
    theirs = BASE.replace("- KX-200 talks 115200 baud\n", "") + "\n## Tools\n- ripgrep\n"
    b, o, t = three(tmp, BASE.encode(), ours.encode(), theirs.encode())
    done = memoryctl("merge-file", str(b), str(o), str(t), cwd=tmp, env=no_daemon_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    merged = o.read_text()
    assert "- 缩进两个空格\n" in merged and "## Tools\n- ripgrep\n" in merged
    assert "KX-200" not in merged  # deleted there, untouched here: the forget travels
    assert t.read_text() == theirs and b.read_text() == BASE
    with_path = memoryctl("merge-file", str(b), str(o), str(t), "memory/MEMORY.md", cwd=tmp, env=no_daemon_env())
    assert with_path.returncode == 0 and o.read_text() == merged  # theirs already in ours: nothing more


def test_bytes_that_are_not_utf8_come_back_as_they_were() -> None:
    tmp = short_tmp("mf")
    base = b"## A\n- caf\xe9 latin-1\n"
    b, o, t = three(tmp, base, base + b"- ours \xff\n", base.replace(b"## A", b"## A\n- theirs \xfe"))
    assert memoryctl("merge-file", str(b), str(o), str(t), cwd=tmp, env=no_daemon_env()).returncode == 0
    assert o.read_bytes() == b"## A\n- theirs \xfe\n- caf\xe9 latin-1\n- ours \xff\n"


def test_a_missing_version_is_a_usage_error_and_ours_is_untouched() -> None:
    tmp = short_tmp("mf")
    b, o, t = three(tmp, b"", b"## A\n- a\n", b"## A\n- b\n")
    b.unlink()
    done = memoryctl("--json", "merge-file", str(b), str(o), str(t), cwd=tmp, env=no_daemon_env())
    assert done.returncode == 2 and json.loads(done.stdout)["error"]["name"] == "USAGE"
    assert o.read_text() == "## A\n- a\n"


def test_a_version_too_large_goes_to_git_merge_file(monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = short_tmp("mf")
    b, o, t = three(tmp, b"## A\n- a\n", b"## A\n- o\n", b"## A\n- t\n")
    monkeypatch.setattr(gitmerge, "MAX_BYTES", 4)
    assert gitmerge.merge_file(str(b), str(o), str(t)) == 1  # git's own merge: a conflict, with its markers
    assert "<<<<<<< ours" in o.read_text()


def test_merge_file_is_read_without_argparse_and_as_argparse_would() -> None:
    from memoryctl import quick
    from memoryctl.cli import build_parser
    from memoryctl.common import Args
    from memoryctl.verbs import admin

    spec = admin.QUICK["merge-file"]
    line = ["merge-file", ".merge_file_a", ".merge_file_b", ".merge_file_c"]
    fast = quick.parse(line, "merge-file", spec)
    assert fast is not None and vars(fast) == vars(build_parser().parse_args(line, namespace=Args()))
    assert quick.parse([*line, "memory/MEMORY.md"], "merge-file", spec) is None  # %P: argparse reads it


def _repo(env: dict[str, str]) -> Path:
    repo = short_tmp("repo")
    git(repo, "init", "-q", "-b", "main", env=env)
    return repo


def test_init_git_registers_the_driver_once_and_says_what_it_did(daemon: Daemon) -> None:
    env = git_env(daemon.env)
    repo = _repo(env)
    (repo / ".gitattributes").write_text("*.png binary\nmemory/MEMORY.md text\nmemory/INSIGHTS.md merge=union")
    first = memoryctl("init", "--git", cwd=repo, env=env)
    assert first.returncode == 0, first.stderr
    assert "registered ws_" in first.stdout
    assert "memory/MEMORY.md merge=memoryd: extended" in first.stdout
    assert "memory/INSIGHTS.md merge=memoryd: left as is (merge=union)" in first.stdout
    assert "memory/[0-9]*.md merge=memoryd: added" in first.stdout
    assert "merge.memoryd.driver = memoryctl merge-file %O %A %B: set" in first.stdout
    attributes = (repo / ".gitattributes").read_text()
    assert attributes.startswith("*.png binary\nmemory/MEMORY.md text merge=memoryd\nmemory/INSIGHTS.md merge=union\n")
    assert attributes.endswith("memory/[0-9]*.md merge=memoryd\nmemory/archive/[0-9]*.md merge=memoryd\n")
    check = git(repo, "check-attr", "merge", "memory/MEMORY.md", "memory/2026-03-02.md", "memory/notes.md", env=env)
    assert check.stdout.splitlines() == [
        "memory/MEMORY.md: merge: memoryd",
        "memory/2026-03-02.md: merge: memoryd",
        "memory/notes.md: merge: unspecified",
    ]
    assert git(repo, "config", "merge.memoryd.driver", env=env).stdout.strip() == "memoryctl merge-file %O %A %B"
    again = memoryctl("--json", "init", "--git", cwd=repo, env=env)
    data = json.loads(again.stdout)["data"]
    assert {a["action"] for a in data["git"]["attributes"]} == {"unchanged", "left as is (merge=union)"}
    assert {c["action"] for c in data["git"]["config"]} == {"unchanged"}
    assert (repo / ".gitattributes").read_text() == attributes


def test_init_git_outside_a_repository_is_a_usage_error_and_registers_nothing(daemon: Daemon) -> None:
    project = short_tmp("plain")
    done = memoryctl("init", "--git", cwd=project, env=git_env(daemon.env))
    assert done.returncode == 2 and "not in a git repository" in done.stderr and "git init" in done.stderr
    assert daemon.call("workspace.list", {"owner_token": daemon.owner_token()})["workspaces"] == []
    assert not (project / ".gitattributes").exists()


def test_the_driver_command_without_memoryctl_on_path() -> None:
    env = git_env(daemon_env(short_tmp("h")))
    env["PATH"] = "/usr/bin:/bin"
    probe = "from memoryctl import gitmerge; print(gitmerge.driver_command())"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == f"{sys.executable} -m memoryctl merge-file %O %A %B"


def test_init_git_for_a_workspace_below_the_repository_root(daemon: Daemon) -> None:
    env = git_env(daemon.env)
    repo = _repo(env)
    project = repo / "firmware"
    (project / "memory").mkdir(parents=True)
    done = memoryctl("init", "--git", str(project), cwd=repo, env=env)
    assert done.returncode == 0, done.stderr
    assert (project / ".gitattributes").exists() and not (repo / ".gitattributes").exists()
    check = git(repo, "check-attr", "merge", "firmware/memory/MEMORY.md", "memory/MEMORY.md", env=env)
    assert check.stdout.splitlines() == [
        "firmware/memory/MEMORY.md: merge: memoryd",
        "memory/MEMORY.md: merge: unspecified",
    ]


def test_the_driver_command_when_another_memoryctl_comes_first_on_path() -> None:
    other = short_tmp("otherbin")
    (other / "memoryctl").write_text("#!/bin/sh\nexit 2\n")
    (other / "memoryctl").chmod(0o755)
    env = git_env(daemon_env(short_tmp("h")))
    env["PATH"] = f"{other}{os.pathsep}{env['PATH']}"
    probe = "from memoryctl import gitmerge; print(gitmerge.driver_command())"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == f"{sys.executable} -m memoryctl merge-file %O %A %B"
    env["PATH"] = BIN + os.pathsep + env["PATH"]  # this venv's own first: the plain command
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "memoryctl merge-file %O %A %B"
