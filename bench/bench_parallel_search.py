"""Parallel search benchmark: throughput of 1 vs N concurrent clients searching one workspace, and where the
daemon's time goes (the event-loop thread: RPC, JSON, snippets; the worker threads: SQLite).

Target on 2 cores: 8 clients ≥ 1.7× the throughput of 1 client, on a 50 MB workspace.
Also measured in-process (NoteIndex from threads, no RPC): the ceiling SQLite's side allows.
Clients are processes (not threads), so the client side is not what limits.
Run: .venv/bin/python bench/bench_parallel_search.py [--mb 50] [--clients 1,2,8] [--seconds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import Rpc, conditions, daemon, wait_embedded
from corpus import generate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[float, float]:
    """(event-loop thread, all other threads) CPU seconds of a process, from /proc. The process's total includes
    threads that have ended (anyio's idle workers exit after 10 s), so the others are the total minus the loop's."""

    def seconds(stat: Path) -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    main = seconds(Path(f"/proc/{pid}/task/{pid}/stat"))
    return main, seconds(Path(f"/proc/{pid}/stat")) - main


def _client(sock: str, ws: str, queries: list[str], seconds: float, start: float, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    rpc = Rpc(sock)
    while time.time() < start:
        time.sleep(0.001)
    done = failed = 0
    n = os.getpid()
    deadline = start + seconds
    while time.time() < deadline:
        try:
            rpc.call("search", {"workspace": ws, "query": queries[n % len(queries)], "limit": 5})
            done += 1
        except RuntimeError:
            failed += 1
        n += 1
    rpc.close()
    out.put((done, failed))


def over_rpc(sock: str, ws: str, pid: int, queries: list[str], clients: int, seconds: float) -> float:
    out: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    start = time.time() + 0.5
    procs = [
        multiprocessing.Process(target=_client, args=(sock, ws, queries, seconds, start, out)) for _ in range(clients)
    ]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start - time.time()))
    before = _cpu(pid)
    results = [out.get(timeout=seconds + 60) for _ in procs]
    after = _cpu(pid)
    for p in procs:
        p.join()
    done = sum(r[0] for r in results)
    failed = sum(r[1] for r in results)
    rate = done / seconds
    loop, workers = after[0] - before[0], after[1] - before[1]
    print(
        f"  RPC, {clients} client(s): {rate:.0f} searches/s ({failed} failed); daemon CPU per search: "
        f"event loop {loop / max(done, 1) * 1000:.2f} ms, worker threads {workers / max(done, 1) * 1000:.2f} ms; "
        f"event-loop thread busy {loop / seconds:.0%} of the wall time"
    )
    if done:  # what the daemon's CPU use allows on this machine: the loop is one thread, the rest spreads
        per_loop, per_all = loop / done, (loop + workers) / done
        cores = os.cpu_count() or 1
        bound = min(1 / per_loop if per_loop else float("inf"), cores / per_all if per_all else float("inf"))
        print(f"    CPU bound for the daemon alone on {cores} cores: ≈ {bound:.0f} searches/s")
    return rate


def in_process(root: Path, queries: list[str], threads_list: list[int], seconds: float) -> None:
    from memoryd.store.index import NoteIndex
    from memoryd.text import textindex

    db = Path(tempfile.mkdtemp(prefix="mdbp", dir="/tmp")) / "index.sqlite"
    index = NoteIndex(root, db)
    index.open()
    while index.merge_step():
        pass
    matches = [m for q in queries if (m := textindex.join_terms(index.prune(textindex.match_terms(q))))]
    base = None
    for count in threads_list:
        totals = [0] * count
        stop = time.perf_counter() + seconds

        def run(slot: int, stop: float = stop, totals: list[int] = totals) -> None:
            n = slot
            while time.perf_counter() < stop:
                index.search(matches[n % len(matches)], 5)
                n += 1
                totals[slot] += 1

        workers = [threading.Thread(target=run, args=(slot,)) for slot in range(count)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        rate = sum(totals) / seconds
        base = base or rate
        print(f"  in-process, {count} thread(s): {rate:.0f} searches/s ({rate / base:.2f}× 1 thread)")
    index.drop()
    shutil.rmtree(db.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--clients", default="1,2,8")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the client counts this many times in turn (a busy machine's "
        "load drifts between runs: the median ratio of rounds is steadier than one run)",
    )
    parser.add_argument(
        "--no-wait-vectors",
        dest="wait_vectors",
        action="store_false",
        help="measure while the workspace is still being embedded (the embedding worker then competes for the cores)",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    print(f"# bench_parallel_search · {conditions()}")
    work = Path(tempfile.mkdtemp(prefix="mdbw", dir="/tmp"))
    try:
        targets = generate(work, args.mb, targets_wanted=args.queries)
        queries = [t.query for t in targets]
        print(f"\n## corpus {args.mb} MB, {len(queries)} queries, {args.seconds:g} s per run")
        in_process(work, queries, counts, args.seconds)
        with daemon(log_level="warning") as (home, _env):
            sock = str(home / "run" / "memoryd.sock")
            rpc = Rpc(sock)
            ws = rpc.call("workspace.add", {"path": str(work)})["workspace_id"]
            rpc.call("index", {"workspace": ws})
            status = rpc.call("status", {"workspace": ws})
            while status["workspaces"][0]["segments"] > 1:  # the idle merge, as a long-running daemon has done
                time.sleep(0.1)
                status = rpc.call("status", {"workspace": ws})
            if args.wait_vectors:  # a long-running daemon's steady state: every passage embedded, nothing behind
                problem, total, took = wait_embedded(rpc, ws)
                print(f"  vectors: {problem or f'{total} embedded'}, waited {took:.0f} s")
            pid = int(status["pid"])
            ratios: dict[int, list[float]] = {c: [] for c in counts[1:]}
            for round_ in range(args.rounds):
                if args.rounds > 1:
                    print(f"  round {round_ + 1} of {args.rounds}")
                rates = {count: over_rpc(sock, ws, pid, queries, count, args.seconds) for count in counts}
                first = rates[counts[0]]
                for c in counts[1:]:
                    ratios[c].append(rates[c] / first)
                print(
                    f"  throughput vs {counts[0]} client: "
                    + ", ".join(f"{c} clients {r / first:.2f}×" for c, r in rates.items() if c != counts[0])
                    + "  (target 8 clients ≥ 1.7×)"
                )
            if args.rounds > 1:
                print(
                    "  median over rounds: "
                    + ", ".join(f"{c} clients {statistics.median(r):.2f}×" for c, r in ratios.items())
                )
            rss = int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]) // 1024
            print(f"  daemon RSS after the runs: {rss} MB")
            threads = len(list(Path(f"/proc/{pid}/task").iterdir()))
            print(f"  daemon threads after the runs: {threads} (anyio's default limiter allows 40 worker threads)")
            rpc.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    main()
