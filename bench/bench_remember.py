"""The write path of remember: concurrent throughput, and the cost of one remember on a large daily file.

Targets on 2 cores: 50 concurrent clients × 100 remember ≥ 500 writes/s, every entry in the file exactly once;
remember p50 on a 1 MB daily file within 2× of an empty one.
Run: .venv/bin/python bench/bench_remember.py [--clients 50] [--per-client 100] [--calls 200] [--mb 1]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from datetime import datetime
from pathlib import Path

import orjson
from common import Rpc, conditions, daemon, pct, warm


async def client(sock: str, ws: str, number: int, calls: int, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_unix_connection(sock, limit=1 << 22)
    try:
        for i in range(calls):
            request = {
                "jsonrpc": "2.0",
                "id": i,
                "method": "remember",
                "params": {"workspace": ws, "text": f"client c{number} entry n{i} 并发写入"},
            }
            started = time.perf_counter()
            writer.write(orjson.dumps(request) + b"\n")
            reply = orjson.loads(await reader.readline())
            latencies.append(time.perf_counter() - started)
            if "error" in reply:
                raise RuntimeError(reply["error"])
    finally:
        writer.close()


async def concurrent(sock: str, ws: str, clients: int, per_client: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(*(client(sock, ws, n, per_client, latencies) for n in range(clients)))
    return time.perf_counter() - started, latencies


def today(ws_path: Path) -> Path:
    return ws_path / "memory" / f"{datetime.now().astimezone():%Y-%m-%d}.md"


def big_daily(path: Path, size: int) -> None:
    day = path.stem
    parts = [f"## {day}\n"]
    total, n = 0, 0
    while total < size:
        entry = (
            f"\n## {day} {n // 60 % 24:02d}:{n % 60:02d} — note\n- entry {n}: 串口超时 ERR_{n} retried the upload"
            f" after the gateway timed out; see run {n}\n- Reason: measured on the bench\n"
        )
        parts.append(entry)
        total += len(entry.encode())
        n += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts))


def sequential(rpc: Rpc, ws: str, calls: int) -> list[float]:
    times = []
    for i in range(calls):
        started = time.perf_counter()
        rpc.call("remember", {"workspace": ws, "text": f"sequential entry {i}\nwith a second line"})
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=100)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--mb", type=float, default=1.0)
    args = parser.parse_args()
    print(f"# bench_remember · {conditions()}")
    with daemon(log_level="warning") as (home, _env):
        sock = str(home / "run" / "memoryd.sock")
        rpc = Rpc(sock)

        # 1. concurrent clients on one workspace
        ws_path = Path(tempfile.mkdtemp(prefix="mdw", dir="/tmp"))
        ws = rpc.call("workspace.add", {"path": str(ws_path)})["workspace_id"]
        rpc.call("remember", {"workspace": ws, "text": "warm up"})
        warm(rpc, home)  # the dictionary's first parse (~1 s) is a fresh home's, not a running daemon's
        seconds, latencies = asyncio.run(concurrent(sock, ws, args.clients, args.per_client))
        total = args.clients * args.per_client
        text = today(ws_path).read_text()
        found = re.findall(r"^- client c(\d+) entry n(\d+) 并发写入$", text, re.MULTILINE)
        once = len(found) == total and len(set(found)) == total
        print(
            f"{args.clients} clients × {args.per_client} remember: {total / seconds:,.0f} writes/s "
            f"({seconds:.2f} s) · latency p50 {pct(latencies, 0.5) * 1000:.1f} ms · "
            f"p99 {pct(latencies, 0.99) * 1000:.1f} ms · every entry once: {once}  (target ≥ 500 writes/s)"
        )

        # 2. one remember at a time: an empty daily file, then a large one
        results = {}
        for label, size in (("empty", 0), (f"{args.mb:g} MB", int(args.mb * 1024 * 1024))):
            path = Path(tempfile.mkdtemp(prefix="mdw", dir="/tmp"))
            if size:
                big_daily(today(path), size)
            ws = rpc.call("workspace.add", {"path": str(path)})["workspace_id"]
            rpc.call("index", {"workspace": ws})
            started = time.perf_counter()
            rpc.call("remember", {"workspace": ws, "text": "first: the file is read once"})
            first = (time.perf_counter() - started) * 1000
            times = sequential(rpc, ws, args.calls)
            results[label] = pct(times, 0.5)
            print(
                f"remember on a daily file of {label} ({today(path).stat().st_size:,} bytes after): "
                f"first {first:.1f} ms · p50 {pct(times, 0.5):.2f} ms · p90 {pct(times, 0.9):.2f} ms · "
                f"p99 {pct(times, 0.99):.2f} ms over {args.calls}"
            )
        ratio = results[f"{args.mb:g} MB"] / results["empty"]
        print(f"p50 ratio {args.mb:g} MB / empty: {ratio:.2f}  (target ≤ 2)")
        rpc.close()


if __name__ == "__main__":
    main()
