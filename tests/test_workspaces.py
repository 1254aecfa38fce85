"""workspace.add: what may be a workspace, idempotence, and path references resolved (and cached) right."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from memoryctl.rpc import RemoteError

from tests.conftest import Daemon, daemon_env, short_tmp, wait_for


@pytest.fixture
def fake_home() -> Iterator[Path]:
    path = short_tmp("uh")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home_daemon(home: Path, fake_home: Path) -> Iterator[Daemon]:
    """A daemon whose user's home directory ($HOME) is ``fake_home``."""
    env = daemon_env(home)
    env["HOME"] = str(fake_home)
    d = Daemon(home, env).start()
    yield d
    d.stop()


@pytest.fixture
def project() -> Iterator[Path]:
    path = short_tmp("proj")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def refused(daemon: Daemon, path: str, **params: Any) -> RemoteError:
    with pytest.raises(RemoteError) as info:
        daemon.call("workspace.add", {"path": path, **params})
    assert info.value.name == "MEMORY_WORKSPACE_INVALID", (path, info.value.name)
    assert info.value.hint
    return info.value


@contextlib.contextmanager
def nothing_created(*dirs: Path) -> Iterator[None]:
    """Asserts no memory/ appeared in ``dirs``; removes one that did (an empty directory) so a failing run
    leaves the system as it found it."""
    before = {d: (d / "memory").exists() for d in dirs}
    try:
        yield
    finally:
        created = [d for d in dirs if not before[d] and (d / "memory").exists()]
        for d in created:
            with contextlib.suppress(OSError):
                (d / "memory").rmdir()
        assert not created, f"memory/ created in {created}"


def test_system_directories_are_refused_and_nothing_is_created(home_daemon: Daemon) -> None:
    candidates = ["/etc", "/dev", "/usr", "/usr/share", "/proc", "/sys", "/var", "/var/lib", "/boot", "/run", "/tmp"]
    dirs = [Path(p) for p in candidates if Path(p).is_dir()]
    with nothing_created(*dirs):
        for d in dirs:
            refused(home_daemon, str(d))
    assert home_daemon.call("workspace.list", {"owner_token": home_daemon.owner_token()})["workspaces"] == []


def test_home_directory_itself_is_refused_but_a_project_in_it_is_fine(home_daemon: Daemon, fake_home: Path) -> None:
    with nothing_created(fake_home):
        refused(home_daemon, str(fake_home))
    inner = fake_home / "code" / "项目"
    inner.mkdir(parents=True)
    assert home_daemon.call("workspace.add", {"path": str(inner)})["created"] is True
    assert (inner / "memory").is_dir()


@pytest.mark.parametrize("tree", ["memory", "spec/memory", "data/memory", "runs"])
def test_a_workspace_inside_another_ones_memory_trees_is_refused(daemon: Daemon, project: Path, tree: str) -> None:
    daemon.call("workspace.add", {"path": str(project)})
    nested = project / tree / "sub"
    nested.mkdir(parents=True)
    with nothing_created(project / tree, nested):
        refused(daemon, str(project / tree))
        error = refused(daemon, str(nested))
    assert tree in error.message
    token = daemon.owner_token()
    assert [w["path"] for w in daemon.call("workspace.list", {"owner_token": token})["workspaces"]] == [str(project)]


def test_a_workspace_whose_trees_would_contain_an_existing_one_is_refused(daemon: Daemon, project: Path) -> None:
    inner = project / "runs" / "r1"
    inner.mkdir(parents=True)
    daemon.call("workspace.add", {"path": str(inner)})
    with nothing_created(project):
        refused(daemon, str(project))


def test_nesting_outside_the_memory_trees_is_allowed(daemon: Daemon, project: Path) -> None:
    outer = daemon.call("workspace.add", {"path": str(project)})
    (project / "packages" / "app").mkdir(parents=True)
    inner = daemon.call("workspace.add", {"path": str(project / "packages" / "app")})
    assert inner["created"] is True and inner["workspace_id"] != outer["workspace_id"]


def test_re_adding_under_another_name_renames_nothing(daemon: Daemon, project: Path) -> None:
    first = daemon.call("workspace.add", {"path": str(project), "name": "原名"})
    again = daemon.call("workspace.add", {"path": str(project), "name": "new-name"})
    assert again == first | {"created": False}
    listed = daemon.call("workspace.list", {"owner_token": daemon.owner_token()})["workspaces"]
    assert [w["name"] for w in listed] == ["原名"]


def test_path_references_follow_registry_changes(daemon: Daemon, project: Path) -> None:
    """Path references are cached; adding or removing a workspace must not leave a stale answer."""
    deep = project / "pkg" / "src"
    deep.mkdir(parents=True)
    outer = daemon.call("workspace.add", {"path": str(project)})["workspace_id"]
    status = daemon.call("status", {"workspace": str(deep)})
    assert status["workspaces"][0]["workspace_id"] == outer
    inner = daemon.call("workspace.add", {"path": str(project / "pkg")})["workspace_id"]
    assert daemon.call("status", {"workspace": str(deep)})["workspaces"][0]["workspace_id"] == inner
    daemon.call("workspace.remove", {"workspace": inner, "owner_token": daemon.owner_token()})
    assert daemon.call("status", {"workspace": str(deep)})["workspaces"][0]["workspace_id"] == outer
    daemon.call("workspace.remove", {"workspace": outer, "owner_token": daemon.owner_token()})
    with pytest.raises(RemoteError) as info:
        daemon.call("status", {"workspace": str(deep)})
    assert info.value.name == "MEMORY_WORKSPACE_NOT_FOUND"


class ProbedDaemon(Daemon):
    """The real daemon, run through tests/loop_probe.py: file-system calls on its event-loop thread are logged."""

    def start(self, *extra: str, wait: bool = True) -> Daemon:
        self._log_handle = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        probe = Path(__file__).with_name("loop_probe.py")
        self.proc = subprocess.Popen(
            [sys.executable, str(probe), "serve", *extra],
            env=self.env,
            stdout=self._log_handle,
            stderr=self._log_handle,
            stdin=subprocess.DEVNULL,
        )
        if wait:
            self.wait_ready()
        return self


def test_registration_and_workspace_calls_do_no_file_work_on_the_event_loop(home: Path, project: Path) -> None:
    out = home / "probe.log"
    env = daemon_env(home) | {
        "MEMORYD_PROBE_PREFIXES": os.pathsep.join([str(project), str(home / "config")]),
        "MEMORYD_PROBE_OUT": str(out),
        "MEMORYD_WATCH_POLLING": "1",
    }
    d = ProbedDaemon(home, env).start()
    try:
        start = out.stat().st_size if out.exists() else 0
        ws = d.call("workspace.add", {"path": str(project), "name": "探针"})["workspace_id"]
        d.call("remember", {"workspace": ws, "text": "a note 串口"})
        (project / "memory" / "sub").mkdir()
        (project / "memory" / "sub" / "b.md").write_text("## B\n- ERR_PROBE_1\n")
        wait_for(lambda: d.call("search", {"workspace": ws, "query": "ERR_PROBE_1"})["hits"])
        d.call("status", {"workspace": str(project / "memory")})
        d.call("workspace.remove", {"workspace": ws, "owner_token": d.owner_token()})
    finally:
        d.stop()
    on_loop = out.read_text()[start:].splitlines() if out.exists() else []
    assert on_loop == []
