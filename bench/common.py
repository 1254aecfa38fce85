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
    sock = home / "run" / "memoryd.sock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(sock))
                break
        except OSError:
            time.sleep(0.05)
    try:
        yield home, env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5):.3f} · p90 {pct(values, 0.9):.3f} · p99 {pct(values, 0.99):.3f} · mean {statistics.fmean(values):.3f}"
