"""Event-loop responsiveness: ping latency while the watcher rescans a 3,000-file memory tree by polling.

With MEMORYD_WATCH_POLLING=1 the watcher walks and stats every memory file every 200 ms. That walk must run in a
worker thread; on the loop it adds its whole duration to the latency of any request that arrives meanwhile.
Target (2 cores): ping p99 <= 5 ms during the rescans.

It runs the daemon twice on the same corpus: watching off (the baseline) and polling. ``--src`` runs another
checkout's daemon (e.g. the code before the change, exported with ``git archive REV | tar -x -C DIR``), so the
numbers before and after come from one script:

    .venv/bin/python bench/bench_loop.py                      # this checkout
    .venv/bin/python bench/bench_loop.py --src /tmp/base      # another one
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, conditions, env_for, pct, wait_socket

PING = b'{"jsonrpc":"2.0","method":"ping","id":1}\n'


def corpus(root: Path, files: int) -> None:
    for i in range(files):
        d = root / "memory" / "archive" / f"{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"2025-01-{i % 28 + 1:02d}-{i}.md").write_text(f"## 2025-01-01 10:00 — note\n- entry {i} 串口超时\n")


def call(s: socket.socket, payload: bytes) -> bytes:
    s.sendall(payload)
    data = s.recv(1 << 20)
    while not data.endswith(b"\n"):
        data += s.recv(1 << 20)
    return data


def pings(sock_path: Path, seconds: float, gap_s: float) -> list[float]:
    """Latencies (ms) of pings sent every ``gap_s`` for ``seconds`` (spread over many 200 ms rescans)."""
    out = []
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock_path))
        for _ in range(200):
            call(s, PING)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            call(s, PING)
            out.append((time.perf_counter() - t) * 1000)
            time.sleep(gap_s)
    return out


def run(src: Path, workspace: Path, polling: bool, seconds: float, gap_s: float) -> list[float]:
    home = Path(tempfile.mkdtemp(prefix="mdl", dir="/tmp"))
    env = env_for(home)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(src / "client")])
    env["MEMORYD_WATCH"] = "1" if polling else "0"
    if polling:
        env["MEMORYD_WATCH_POLLING"] = "1"
    log = open(home / "daemon.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "memoryd", "serve"], env=env, stdout=log, stderr=log, cwd=src)
    sock = home / "run" / "memoryd.sock"
    try:
        wait_socket(sock, 30)
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
            add = (
                b'{"jsonrpc":"2.0","method":"workspace.add","params":{"path":"%s"},"id":1}\n' % str(workspace).encode()
            )
            call(s, add)
            idx = b'{"jsonrpc":"2.0","method":"index","params":{"workspace":"%s"},"id":2}\n' % str(workspace).encode()
            call(s, idx)  # the index is current: what remains is the watcher's rescans
        time.sleep(1.0)  # let the first rescans start
        return pings(sock, seconds, gap_s)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT, help="checkout whose daemon to run (default: this one)")
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--gap-ms", type=float, default=2.0, help="pause between pings")
    args = parser.parse_args()
    workspace = Path(tempfile.mkdtemp(prefix="mdlws", dir="/tmp"))
    try:
        corpus(workspace, args.files)
        print(f"# bench_loop · {conditions()}")
        print(
            f"# daemon from {args.src} · {args.files} memory files · pings every {args.gap_ms} ms for {args.seconds} s"
        )
        print(f"{'watcher':<22} {'pings':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for label, polling in (("off (baseline)", False), ("polling, 200 ms rescan", True)):
            ms = sorted(run(args.src.resolve(), workspace, polling, args.seconds, args.gap_ms / 1000))
            print(f"{label:<22} {len(ms):>6} {pct(ms, 0.5):>8.2f} {pct(ms, 0.99):>8.2f} {ms[-1]:>8.2f}")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    main()
