"""Foundation benchmark (issue 2): ping round trip, throughput with concurrent clients, memoryctl ping.

Targets on 2 cores: ping p50 ≤ 60 µs, ≥ 15k requests/s with 8 clients, `memoryctl ping` ≤ 40 ms median.
Run: .venv/bin/python bench/bench_rpc.py [--calls 10000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import conditions, daemon, pct

PING = b'{"jsonrpc":"2.0","method":"ping","id":1}\n'


def ping_latencies(sock_path: str, calls: int) -> list[float]:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    out = []
    for _ in range(200):  # warm-up
        s.sendall(PING)
        s.recv(4096)
    for _ in range(calls):
        t = time.perf_counter()
        s.sendall(PING)
        data = s.recv(4096)
        while not data.endswith(b"\n"):
            data += s.recv(4096)
        out.append((time.perf_counter() - t) * 1e6)
    s.close()
    return out


def client_worker(args: tuple[str, float]) -> int:
    sock_path, seconds = args
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    done = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        s.sendall(PING)
        data = s.recv(4096)
        while not data.endswith(b"\n"):
            data += s.recv(4096)
        done += 1
    s.close()
    return done


def throughput(sock_path: str, clients: int, seconds: float) -> float:
    with multiprocessing.Pool(clients) as pool:
        counts = pool.map(client_worker, [(sock_path, seconds)] * clients)
    return sum(counts) / seconds


def memoryctl_ping(env: dict[str, str], runs: int) -> list[float]:
    exe = str(Path(sys.executable).with_name("memoryctl"))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([exe, "ping"], env=env, capture_output=True, check=True)
        times.append((time.perf_counter() - t) * 1000)
    baseline = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import socket, json"], env=env, capture_output=True, check=True)
        baseline.append((time.perf_counter() - t) * 1000)
    print(f"  python -c 'import socket, json' median {statistics.median(baseline):.1f} ms (the floor)")
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--levels", default="warning,info", help="daemon log levels to measure, in order")
    args = parser.parse_args()
    print(f"# bench_rpc · {conditions()}")
    for level in args.levels.split(","):
        with daemon(log_level=level) as (home, env):
            sock = str(home / "run" / "memoryd.sock")
            lat = ping_latencies(sock, args.calls)
            print(
                f"[log-level {level}] ping round trip over {args.calls} calls, one client process: "
                f"p50 {pct(lat, 0.5):.1f} µs · p99 {pct(lat, 0.99):.1f} µs  (target p50 ≤ 60 µs)"
            )
            for clients in (1, 8):
                rate = throughput(sock, clients, args.seconds)
                print(
                    f"[log-level {level}] throughput, {clients} concurrent client processes: {rate:,.0f} req/s"
                    + ("  (target ≥ 15,000)" if clients == 8 else "")
                )
            if level == "info":
                times = memoryctl_ping(env, args.runs)
                print(
                    f"memoryctl ping whole process over {args.runs} runs: median {statistics.median(times):.1f} ms "
                    f"· p90 {pct(times, 0.9):.1f} ms  (target ≤ 40 ms)"
                )


if __name__ == "__main__":
    main()
