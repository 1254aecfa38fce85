"""Shared helpers for the benchmarks: start a real daemon in a temp home, time things, print tables."""

from __future__ import annotations

import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent


def conditions() -> str:
    return (
        f"{platform.node()} · {os.cpu_count()} cores · Python {platform.python_version()} · "
        f"{platform.system()} {platform.release()} · load {os.getloadavg()[0]:.2f}"
    )


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["MEMORYD_HOME"] = str(home)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # users have byte-compiled installs
    return env


@contextmanager
def daemon(log_level: str = "info", extra_env: dict[str, str] | None = None) -> Iterator[tuple[Path, dict[str, str]]]:
    home = Path(tempfile.mkdtemp(prefix="mdb", dir="/tmp"))
    env = env_for(home)
    env.update(extra_env or {})
    log = open(home / "daemon.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "serve", "--log-level", log_level], env=env, stdout=log, stderr=log
    )
    wait_socket(home / "run" / "memoryd.sock", 30)
    try:
        yield home, env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def wait_socket(sock: Path, deadline_s: float = 60) -> None:
    """Until the daemon accepts connections on ``sock`` (or the deadline passes)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(sock))
                return
        except OSError:
            time.sleep(0.005)


class Rpc:
    """One persistent connection; newline-framed JSON-RPC. An error answer raises RuntimeError."""

    def __init__(self, path: str) -> None:
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rb")
        self.n = 0

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.n += 1
        request: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": self.n}
        if params is not None:
            request["params"] = params
        self.s.sendall(orjson.dumps(request) + b"\n")
        reply = orjson.loads(self.f.readline())
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def close(self) -> None:
        self.f.close()
        self.s.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5):.3f} · p90 {pct(values, 0.9):.3f} · p99 {pct(values, 0.99):.3f} · mean {statistics.fmean(values):.3f}"


def warm(rpc: Rpc, home: Path) -> None:
    """Wait for what a daemon reads once when it starts (the CC-CEDICT dictionary, ~1 s of one core holding the
    GIL; the embedding model, when there is one): a user registers a project with a daemon that has been running,
    and a registration during those first seconds measures those loads, not the indexer."""
    scratch = home / "warm-up"
    (scratch / "memory").mkdir(parents=True, exist_ok=True)
    ws = rpc.call("workspace.add", {"path": str(scratch)})["workspace_id"]
    rpc.call("search", {"workspace": ws, "query": "warm up", "limit": 1, "mode": "bm25"})
    deadline = time.monotonic() + 60
    while rpc.call("status", {"workspace": ws})["workspaces"][0].get("dictionary") == "loading":
        assert time.monotonic() < deadline, "the dictionary did not load in 60 s"
        time.sleep(0.05)
    while _loading(rpc, ws):
        assert time.monotonic() < deadline, "the embedding model did not load in 60 s"
        time.sleep(0.05)


def _loading(rpc: Rpc, ws: str) -> bool:
    vectors = rpc.call("status", {"workspace": ws})["workspaces"][0].get("vectors") or {}
    problem = vectors.get("problem") or {}
    return problem.get("reason") == "embeddings_loading"


WAITING = (None, "embeddings_loading", "vectors_loading", "vectors_behind")  # what a workspace still embedding says


def wait_embedded(rpc: Rpc, ws: str, at_least: int = 1, timeout: float = 3600) -> tuple[str | None, int, float]:
    """Until every passage of ``ws`` (at least ``at_least``) has a vector, as in a daemon that has been running:
    (None, passages, seconds waited); or, when the workspace has no vectors to wait for (embeddings off, no model),
    (the reason, 0, seconds); or ("still embedding", embedded, timeout)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        vectors = rpc.call("status", {"workspace": ws})["workspaces"][0].get("vectors") or {}
        reason = (vectors.get("problem") or {}).get("reason")
        if not vectors or reason not in WAITING:
            return str(reason or "no vectors"), 0, time.perf_counter() - started
        if reason is None and vectors.get("total", 0) >= at_least and vectors["embedded"] == vectors["total"]:
            return None, int(vectors["total"]), time.perf_counter() - started
        time.sleep(0.2)
    return "still embedding", int(vectors.get("embedded", 0)), timeout
