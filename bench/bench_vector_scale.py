"""The vector side at scale without waiting for the model: a workspace's vector index filled with N vectors, cells
trained as the daemon would, then nearest-neighbour searches timed in-process for several probe counts, each
scored against the exact answer (a float32 scan in numpy): recall@10.

Vectors: synthetic (clustered unit vectors, as embeddings are) or real ones kept by
``bench_semantic.py --latency-mb 50 --keep DIR`` (``--real DIR/passages-50mb.sqlite``: the generated 50 MB corpus's
670,750 passages embedded by use-m3, with the benchmark's own queries embedded here).

    .venv/bin/python bench/bench_vector_scale.py [--vectors 670000] [--real FILE] [--queries 200] [--probes 8,16,32]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import apsw
import numpy as np
from common import conditions, pct

from memoryd.store.passage import Passage
from memoryd.store.vector_schema import extension_path
from memoryd.store.vectors import Unit, VectorIndex

DIM = 512


def clustered(rng: np.random.Generator, count: int, centres: np.ndarray) -> np.ndarray:
    data = centres[rng.integers(0, len(centres), count)] + 0.6 * rng.standard_normal((count, DIM))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    return data.astype("<f4")


def real(path: Path, queries: int) -> tuple[np.ndarray, np.ndarray]:
    from memoryd.embed.local import UseM3

    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    data = np.frombuffer(b"".join(bytes(v) for (v,) in conn.execute("SELECT vector FROM passages")), dtype="<f4")
    texts = [str(t) for (t,) in conn.execute("SELECT text FROM queries LIMIT ?", (queries,))]
    asked = np.stack([np.frombuffer(v, dtype="<f4") for v in UseM3().encode(texts, query=True)])
    return data.reshape(-1, DIM), asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=670_000)
    parser.add_argument("--real", type=Path, help="a passages file kept by bench_semantic.py --keep")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--probes", default="8,16,32")
    args = parser.parse_args()
    print(f"# bench_vector_scale · {conditions()}")
    rng = np.random.default_rng(0)
    if args.real:
        data, queries = real(args.real, args.queries)
        source = f"real: {args.real.name}"
    else:
        centres = rng.standard_normal((2000, DIM))
        data, queries = clustered(rng, args.vectors, centres), clustered(rng, args.queries, centres)
        source = "synthetic clustered"
    work = Path(tempfile.mkdtemp(prefix="mdvs", dir="/tmp"))
    try:
        index = VectorIndex(work / "vectors.sqlite", extension_path())
        index.open("bench", DIM)
        started = time.perf_counter()
        batch = 20_000
        for first in range(0, len(data), batch):
            count = min(batch, len(data) - first)
            path = f"memory/{first:09d}.md"
            units = [
                Unit(Passage(path, n + 1, 1, "h", 1, 1, f"- {first + n}"), f"d{first + n}", 0) for n in range(count)
            ]
            index.replace({path: ("sha", units)}, [])
            todo = index.todo(count)
            index.store([(unit_id, digest, data[int(digest[1:])].tobytes()) for unit_id, _t, digest in todo])
        filled = time.perf_counter() - started
        started = time.perf_counter()
        cells = index.train()
        trained = time.perf_counter() - started
        index.close()
        index.open("bench", DIM)  # as the daemon reads it: a fresh connection, the WAL checkpointed
        size = sum(f.stat().st_size for f in work.iterdir()) / 1e6
        print(
            f"{source}: {index.vectors} vectors stored in {filled:.0f} s; {cells} cells trained in {trained:.0f} s; "
            f"files {size:.0f} MB ({size * 1e6 / index.vectors:.0f} bytes a vector)"
        )
        exact = [{f"d{i}" for i in np.argpartition(-(data @ q), 10)[:10]} for q in queries]
        for probes in [int(p) for p in args.probes.split(",")] + [0]:
            times, found = [], 0.0
            for q, truth in zip(queries, exact, strict=True):
                t = time.perf_counter()
                hits = index.search(q.tobytes(), 10, probes or None)
                times.append((time.perf_counter() - t) * 1000)
                found += len({h.digest for h in hits} & truth) / 10
            label = f"{probes or index.probes()} of {cells} cells" + ("" if probes else " (default)")
            print(
                f"  {label:<26} k=10: p50 {pct(times, 0.5):6.1f} ms, p99 {pct(times, 0.99):6.1f} ms, "
                f"recall@10 {found / len(queries):.3f} ({len(queries)} queries)"
            )
        index.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
