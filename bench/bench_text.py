"""Text-processing speed, in-process: what the tests only check for correctness.

- ``FwRange.contains`` per call (resolve checks every rule's range: target ≤ 2 µs);
- turning hostile 10 kB queries into FTS5 terms and running them on a small table (target: well under 2 s for
  the three together; the terms are capped at MAX_TERMS whatever the query).

Run: .venv/bin/python bench/bench_text.py
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apsw
from common import conditions

from memoryd.rules.fwrange import parse_range, parse_version
from memoryd.text import textindex


def contains_speed() -> float:
    ranges = [parse_range(t) for t in ("*", "1.2.*", ">=1.2.0-rc.1 <=1.3", "1.2.3", "<2")]
    version = parse_version("1.2.9-rc.1")
    n = 20_000
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for r in ranges:
            contains = functools.partial(r.contains, version)
            for _ in range(n):
                contains()
        best = min(best, (time.perf_counter() - start) / (n * len(ranges)))
    return best


def hostile_queries() -> float:
    conn = apsw.Connection(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE chunks_fts USING fts5(body, idents, tokenize='{textindex.TOKENIZER}')")
    conn.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES('rank', '{textindex.rank_sql()}')")
    for text in [
        "今天调试发现串口超时问题 ERR_UART_TIMEOUT_0x3F",
        "facts.transport.baud = 115200 in src/drivers/uart.c",
    ]:
        conn.execute("INSERT INTO chunks_fts(body, idents) VALUES(?, ?)", textindex.index_fields(text))
    queries = [
        ("串口超时 uart timeout ERR_UART_TIMEOUT_0x3F what does it mean? " * 200)[:10_000],
        "".join(chr(0x4E00 + i % 2000) for i in range(10_000)),
        " ".join(f"w{i}" for i in range(3000)),
    ]
    started = time.perf_counter()
    for query in queries:
        match = textindex.join_terms(textindex.match_terms(query))
        if match is not None:
            conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT 10", (match,))
    return time.perf_counter() - started


def main() -> None:
    print(f"# bench_text · {conditions()}")
    print(f"FwRange.contains: {contains_speed() * 1e6:.2f} µs a call (best of 5; target ≤ 2 µs)")
    print(f"three hostile 10 kB queries, parsed and run: {hostile_queries() * 1000:.0f} ms (target well under 2 s)")


if __name__ == "__main__":
    main()
