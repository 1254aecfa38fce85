"""The vector side at scale without waiting for the model: a workspace's vector index filled with N synthetic unit
vectors (clustered, as embeddings are), cells trained as the daemon would, then nearest-neighbour searches timed
in-process — exact scan versus the cells' default probes. What a 50 MB workspace costs once embedded (670,790
passages: ~15 minutes of embedding here, which this skips).

    .venv/bin/python bench/bench_vector_scale.py [--vectors 670000] [--queries 200]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from common import conditions, pct

from memoryd.store.vectors import Unit, VectorIndex, extension_path

DIM = 512


def clustered(rng: np.random.Generator, count: int, centres: np.ndarray) -> np.ndarray:
    data = centres[rng.integers(0, len(centres), count)] + 0.6 * rng.standard_normal((count, DIM))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    return data.astype("<f4")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=670_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    print(f"# bench_vector_scale · {conditions()}")
    work = Path(tempfile.mkdtemp(prefix="mdvs", dir="/tmp"))
    try:
        index = VectorIndex(work / "vectors.sqlite", extension_path())
        index.open("synthetic", DIM)
        rng = np.random.default_rng(0)
        centres = rng.standard_normal((2000, DIM))
        started = time.perf_counter()
        batch = 20_000
        for first in range(0, args.vectors, batch):
            count = min(batch, args.vectors - first)
            path = f"memory/{first:09d}.md"
            units = [Unit(path, n + 1, 1, "h", 1, 1, f"- {first + n}", f"d{first + n}", 0) for n in range(count)]
            index.replace({path: ("sha", units)}, [])
            data = clustered(rng, count, centres)
            todo = index.todo(count)
            index.store([(unit_id, digest, data[int(digest[1:]) - first].tobytes()) for unit_id, _t, digest in todo])
        filled = time.perf_counter() - started
        started = time.perf_counter()
        cells = index.train()
        trained = time.perf_counter() - started
        size = sum(f.stat().st_size for f in work.iterdir()) / 1e6
        print(
            f"{index.embedded} vectors stored in {filled:.0f} s; {cells} cells trained in {trained:.0f} s; files {size:.0f} MB"
        )
        queries = clustered(rng, args.queries, centres)
        for label, probes in (("cells (default probes)", None), ("exact scan (every cell)", cells)):
            times, found = [], []
            for q in queries[: args.queries if probes is None else 20]:
                t = time.perf_counter()
                found.append({h.digest for h in index.search(q.tobytes(), 20, probes)})
                times.append((time.perf_counter() - t) * 1000)
            print(
                f"  {label:<25} k=20: p50 {pct(times, 0.5):.1f} ms, p99 {pct(times, 0.99):.1f} ms ({len(times)} queries)"
            )
            if probes is None:
                approx = found
        exact = [{h.digest for h in index.search(q.tobytes(), 20, cells)} for q in queries[:20]]
        recall = sum(len(a & e) / 20 for a, e in zip(approx[:20], exact, strict=True)) / 20
        print(
            f"  cells found {recall:.2f} of the exact top 20 (synthetic clustered vectors; {index.probes()} of {cells} probed)"
        )
        index.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
