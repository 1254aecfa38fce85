"""Fixtures: a real memoryd on a real Unix socket in a short temp dir; the real memoryctl client."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from memoryctl.rpc import ClientError, Connection

from memoryd.store.prepare import PIPELINE_MIN_BYTES

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that fetches from a package registry gets REGISTRY_TIMEOUT_S rather than pytest's 120 s: a cold
    download of a host CLI takes minutes (its own timeout marker, when it has one, wins)."""
    from tests.hostcli import REGISTRY_TIMEOUT_S

    for item in items:
        if item.get_closest_marker("registry") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(REGISTRY_TIMEOUT_S))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_SHORT_TMPS: list[Path] = []


def short_tmp(prefix: str = "md") -> Path:
    """A fresh directory under /tmp (macOS caps socket paths at 104 bytes), removed when the test session ends."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    _SHORT_TMPS.append(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def _remove_short_tmps() -> Iterator[None]:
    yield
    for path in _SHORT_TMPS:
        with contextlib.suppress(OSError):
            for sub in path.rglob("*"):  # tests make some files read-only or unreadable: let rmtree in
                if sub.is_dir() and not sub.is_symlink():
                    sub.chmod(0o700)
        shutil.rmtree(path, ignore_errors=True)


def wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


class Daemon:
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.env = env
        self.socket = home / "run" / "memoryd.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home / "daemon.log"

    def start(self, *extra: str, wait: bool = True) -> Daemon:
        log = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self._log_handle = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", *extra],
            env=self.env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"memoryd exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                with Connection(str(self.socket), 2.0) as conn:
                    conn.call("ping")
                    return
            except ClientError:
                time.sleep(0.02)
        raise TimeoutError("memoryd did not become ready")

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> Any:
        with Connection(str(self.socket), timeout) as conn:
            return conn.call(method, params)

    def owner_token(self) -> str:
        return (self.home / "config" / "owner.token").read_text().strip()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_handle.close()
        return self.proc.returncode

    def memoryctl(
        self, *args: str, cwd: Path | None = None, input: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memoryctl", *args],
            env=self.env,
            cwd=cwd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def daemon_env(home: Path) -> dict[str, str]:
    # (EMBEDDED_MEMORY_ROOT, like MEMORYD_WORKSPACE, would name memoryctl's workspace: not the developer's here)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", "LISTEN_")) and k != "EMBEDDED_MEMORY_ROOT"
    }
    env["MEMORYD_HOME"] = str(home)
    # No embedding model in tests that are not about semantic search (tests/test_semantic.py turns it on): loading
    # it costs each daemon a second of CPU and ~150 MB.
    env["MEMORYD_EMBEDDING_PROVIDER"] = "none"
    # Nor the CC-CEDICT query expansion (~1 s and ~50 MB on a daemon's first search): tests/test_dictionary.py.
    env["MEMORYD_SEARCH_DICTIONARY"] = "false"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "client")])
    return env


@pytest.fixture
def home() -> Iterator[Path]:
    path = short_tmp()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def started() -> Iterator[list[Daemon]]:
    """Daemons a test starts with settings of its own (append them): stopped when it ends."""
    daemons: list[Daemon] = []
    yield daemons
    for d in daemons:
        if d.proc is not None:  # one that exited already: its log file is closed
            d.stop()


@pytest.fixture
def daemon_factory(home: Path) -> Iterator[Any]:
    started: list[Daemon] = []

    def make(start: bool = True, *extra: str) -> Daemon:
        d = Daemon(home, daemon_env(home))
        started.append(d)
        return d.start(*extra) if start else d

    yield make
    for d in started:
        with contextlib.suppress(Exception):
            if d.proc is not None:
                d.stop(signal.SIGKILL if d.proc.poll() is None else signal.SIGTERM)
    _stop_autostarted(home / "run" / "memoryd.sock")


def _stop_autostarted(socket: Path) -> None:
    """A daemon that a host's hook (memoryctl's autostart) started on this home after the test's own was killed is
    not the test's child: stopped as well, or it would outlive the test run."""
    try:
        with Connection(str(socket), 2.0) as conn:
            pid = int(conn.call("status")["pid"])
    except (ClientError, KeyError, ValueError, TypeError):
        return
    with contextlib.suppress(ProcessLookupError):
        gone = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None  # readable once the process has exited
        os.kill(pid, signal.SIGTERM)
        if gone is not None:
            try:
                if not select.select([gone], [], [], 20)[0]:
                    os.kill(pid, signal.SIGKILL)
            finally:
                os.close(gone)


@pytest.fixture
def daemon(daemon_factory: Any) -> Daemon:
    d: Daemon = daemon_factory()
    return d


@pytest.fixture
def workspace(daemon: Daemon) -> Iterator[tuple[Path, str]]:
    path = short_tmp("ws")
    result = daemon.call("workspace.add", {"path": str(path)})
    yield path, result["workspace_id"]
    shutil.rmtree(path, ignore_errors=True)


def daily_logs(root: Path, days: int) -> dict[str, str]:
    """Daily notes, together more than PIPELINE_MIN_BYTES: a rebuild prepares them in a worker thread."""
    (root / "memory").mkdir(parents=True, exist_ok=True)
    texts = {}
    for day in range(1, days + 1):
        entries = [f"## 2026-03-{day:02d} 10:{n:02d} — note\n- 串口超时 ERR_D{day}_{n} entry {n}\n" for n in range(60)]
        texts[f"memory/2026-03-{day:02d}.md"] = "\n".join(entries) + "word " * 2000
    for rel, text in texts.items():
        (root / rel).write_text(text)
    assert sum(len(t.encode()) for t in texts.values()) > PIPELINE_MIN_BYTES
    return texts
