"""Semantic search on a small bilingual device-lab set: recall@5 per query class for bm25, vector and hybrid, and
hybrid search latency on generated corpora.

The labelled set (below, written for this benchmark): 30 notes as a team keeps them — Chinese, English and mixed —
and questions in four classes: ``identifier`` (an error code or key the note says), ``words`` (words the note
says), ``cross-lingual`` (an English question for a Chinese note or the reverse: no word in common) and
``paraphrase`` (the same language, other words). Each question has one right note. A real daemon stores the notes
with ``remember``, embeds them with the configured provider, and answers every question through ``search``.

    .venv/bin/python bench/bench_semantic.py [--provider use-m3] [--latency-mb 0,2,50] [--keep DIR] [--setting K=V]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import apsw
from common import Rpc, conditions, daemon, pct, wait_embedded
from corpus import generate

NOTES = [
    "串口在 115200 下偶发 ERR_UART_TIMEOUT_0x3F，开启硬件流控（RTS/CTS）后消失",
    "KX-200 的 bootloader 烧录时必须在复位期间拉高 BOOT0",
    "部署脚本需要先停止 nginx 再替换 TLS 证书，否则旧证书会被缓存",
    "数据库迁移必须在低峰期执行，否则会长时间锁表",
    "固件构建改用 ninja 代替 make，速度快三倍",
    "周报模板放在 docs/weekly.md，每周五下午提交",
    "测试板 3 号的 USB 集线器必须插在 2 号口，否则枚举失败",
    "facts.transport.baud 在 1.2.x 固件上默认是 921600，老板子要改成 115200",
    "电源模块上电顺序：先 3.3V 再 1.8V，反过来会烧坏 PHY",
    "内存泄漏出现在 OTA 升级失败后的重试循环里，重启才会释放",
    "The CI cache key includes the lockfile hash; bump it when the toolchain changes",
    "Flaky test test_reconnect fails when the mock broker starts slower than 2 seconds; we added a readiness probe",
    "We chose SQLite over Postgres for the edge gateway because it must run without a server",
    "The staging cluster's certificates expire on the first of every month; renew them a week before",
    "Logs older than 30 days are moved to cold storage by the nightly job",
    "The sensor driver returns ERR_I2C_NACK_0x12 when the pull-up resistors are missing",
    "Code review needs two approvals for anything under firmware/, one elsewhere",
    "The release branch is cut every second Tuesday; hotfixes go to main first, then get cherry-picked",
    "Battery readings drift by 5% when the board temperature goes above 60 degrees",
    "We disabled the watchdog in debug builds because breakpoints kept resetting the board",
    "WiFi 模块在 2.4GHz 干扰严重时掉线，改用 5GHz 频段后稳定",
    "日志级别在生产环境必须设为 warning，debug 会把磁盘写满",
    "API 限流阈值是每分钟 600 次，超过返回 429",
    "The GPS module needs a cold start of about 40 seconds after the antenna is reconnected",
    "ADC 采样率超过 10kHz 时 DMA 缓冲区会溢出，要把缓冲区加到 4096",
    "Our on-call rotation changes on Mondays at 10:00; the handover note goes in the ops channel",
    "显示屏在低温下响应变慢，零下 10 度以下需要预热",
    "The Bluetooth pairing fails on Android 14 unless location permission is granted",
    "编译缓存目录 ~/.ccache 超过 20GB 后要手动清理",
    "The factory reset button must be held for 10 seconds; shorter presses only reboot",
]

QUESTIONS: list[tuple[str, str, int]] = [  # (class, question, index of the right note)
    ("identifier", "ERR_UART_TIMEOUT_0x3F", 0),
    ("identifier", "facts.transport.baud", 7),
    ("identifier", "ERR_I2C_NACK_0x12", 15),
    ("identifier", "docs/weekly.md", 5),
    ("identifier", "test_reconnect", 11),
    ("words", "串口超时", 0),
    ("words", "nginx 证书", 2),
    ("words", "watchdog debug builds", 19),
    ("words", "cold storage logs", 14),
    ("words", "DMA 缓冲区溢出", 24),
    ("cross-lingual", "why did we turn on flow control?", 0),
    ("cross-lingual", "how do we replace the TLS certificate on the server?", 2),
    ("cross-lingual", "which pin must be held high when flashing the bootloader?", 1),
    ("cross-lingual", "why is the firmware build faster now?", 4),
    ("cross-lingual", "what is the power-up sequence of the supply rails?", 8),
    ("cross-lingual", "为什么边缘网关用 SQLite 而不是 Postgres？", 12),
    ("cross-lingual", "证书多久过期一次？", 13),
    ("cross-lingual", "电池读数为什么会漂移？", 18),
    ("cross-lingual", "蓝牙配对失败怎么办？", 27),
    ("cross-lingual", "恢复出厂设置要按多久？", 29),
    ("paraphrase", "the test that breaks when the message broker is slow to come up", 11),
    ("paraphrase", "how many reviewers does a firmware change need", 16),
    ("paraphrase", "当天线重新连接后定位要等多久", 23),
    ("paraphrase", "生产环境应该用什么日志等级", 21),
    ("paraphrase", "请求太频繁会被拒绝吗", 22),
    ("paraphrase", "屏幕在冬天很卡", 26),
]

MODES = ("bm25", "vector", "hybrid")


SETTINGS: dict[str, str] = {}  # daemon settings from --setting
KEEP: Path | None = None  # --keep DIR


def _daemon_env(provider: str) -> dict[str, str]:
    return {"MEMORYD_EMBEDDING_PROVIDER": provider, **SETTINGS}


def _wait_dictionary(rpc: Rpc, ws: str) -> None:
    """With search_dictionary on, the daemon reads CC-CEDICT from start-up: wait until it is ready."""
    rpc.call("search", {"workspace": ws, "query": "warm up", "limit": 1, "mode": "bm25"})
    start = time.perf_counter()
    while (state := rpc.call("status", {"workspace": ws})["workspaces"][0].get("dictionary")) == "loading":
        time.sleep(0.05)
    if state is not None:
        print(f"dictionary {state} {time.perf_counter() - start:.2f} s after the first search")


def quality(provider: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="mdsq", dir="/tmp"))
    try:
        with daemon(log_level="warning", extra_env=_daemon_env(provider)) as (home, _env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            ws = rpc.call("workspace.add", {"path": str(work)})["workspace_id"]
            lines: dict[int, int] = {}  # every line of an entry → its note
            for n, text in enumerate(NOTES):
                entry = rpc.call("remember", {"workspace": ws, "type": "note", "text": text})
                lines.update(dict.fromkeys(range(entry["start_line"], entry["start_line"] + entry["lines"]), n))
            _wait_embedded(rpc, ws, len(NOTES))
            _wait_dictionary(rpc, ws)
            classes = sorted({c for c, _, _ in QUESTIONS}, key=[c for c, _, _ in QUESTIONS].index)
            print(f"\n## labelled set: {len(NOTES)} notes, {len(QUESTIONS)} questions, provider {provider}")
            print(f"{'class':<15}{'n':>4}" + "".join(f"{m + ' R@5':>14}{'MRR':>7}" for m in MODES))
            totals: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
            for cls in classes:
                asked = [(q, want) for c, q, want in QUESTIONS if c == cls]
                cells = ""
                for mode in MODES:
                    scores = []
                    for question, want in asked:
                        hits = rpc.call("search", {"workspace": ws, "query": question, "limit": 5, "mode": mode})[
                            "hits"
                        ]
                        found = [lines.get(h["start_line"]) for h in hits]
                        rank = found.index(want) + 1 if want in found else 0
                        scores.append((float(rank > 0), 1.0 / rank if rank else 0.0))
                    totals[mode] += scores
                    cells += (
                        f"{statistics.fmean(s[0] for s in scores):14.2f}{statistics.fmean(s[1] for s in scores):7.2f}"
                    )
                print(f"{cls:<15}{len(asked):>4}{cells}")
            print(
                f"{'all':<15}{len(QUESTIONS):>4}"
                + "".join(
                    f"{statistics.fmean(s[0] for s in totals[m]):14.2f}{statistics.fmean(s[1] for s in totals[m]):7.2f}"
                    for m in MODES
                )
            )
            rpc.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wait_embedded(rpc: Rpc, ws: str, at_least: int) -> tuple[int, float]:
    problem, total, took = wait_embedded(rpc, ws, at_least)
    if problem is not None:
        raise SystemExit(f"vectors unavailable: {problem}")
    return total, took


def latency(provider: str, mb: float, rounds: int = 200) -> None:
    work = Path(tempfile.mkdtemp(prefix="mdsl", dir="/tmp"))
    try:
        targets = generate(work, mb, targets_wanted=rounds) if mb else []
        with daemon(log_level="warning", extra_env=_daemon_env(provider)) as (home, _env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            ws = rpc.call("workspace.add", {"path": str(work)})["workspace_id"]
            report = rpc.call("index", {"workspace": ws})["workspaces"][0]
            total, took = _wait_embedded(rpc, ws, 1)
            print(
                f"\n## {mb:g} MB corpus: {report['chunks']} chunks, {total} passages embedded in {took:.1f} s "
                f"({total / max(took, 1e-9):.0f} texts/s, model load included)"
            )
            _wait_dictionary(rpc, ws)
            scan = _wait_scan(rpc, ws)
            print(f"  vectors read by: {scan}")
            pid = int(rpc.call("status")["pid"])
            rss = int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]) // 1024
            queries = [t.query for t in targets] or ["why did we turn on flow control?"]
            for mode in MODES:
                for n in range(50):  # warm (issue 21 item 8 compares warm p50s): each search thread's connection
                    rpc.call("search", {"workspace": ws, "query": queries[-1 - n % len(queries)], "mode": mode})
                times = []
                for n in range(rounds):
                    started = time.perf_counter()
                    rpc.call("search", {"workspace": ws, "query": queries[n % len(queries)], "limit": 8, "mode": mode})
                    times.append((time.perf_counter() - started) * 1000)
                print(f"  {mode:<7} search p50 {pct(times, 0.5):.2f} ms, p99 {pct(times, 0.99):.2f} ms")
            print(f"  daemon RSS with the model (and the dictionary, if on) loaded: {rss} MB")
            _cell_recall(next(home.rglob("vectors.sqlite")), queries)
            if KEEP:  # the passages and their vectors, for in-process experiments (bench_vector_scale.py --real)
                _keep(next(home.rglob("vectors.sqlite")), KEEP / f"passages-{mb:g}mb.sqlite", queries)
            rpc.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wait_scan(rpc: Rpc, ws: str, deadline_s: float = 300) -> str:
    """Past the float rows' budget the embedding worker builds the rough rows once the backlog is done (decision
    0022): until their status says so (or the deadline: past both budgets the file is what searches read). A daemon
    from before 0022 (an A/B run against an older tree) does not say: "not reported"."""
    deadline = time.monotonic() + deadline_s
    while (scan := rpc.call("status", {"workspace": ws})["workspaces"][0]["vectors"].get("scan")) == "file":
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return "not reported" if scan is None else str(scan)


def _keep(source: Path, target: Path, queries: list[str]) -> None:
    """The passages with their vectors as float32 (int8 / scale) in a plain SQLite file, and the queries."""
    import numpy as np

    from memoryd.store.vector_schema import extension_path

    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    src = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
    src.enable_load_extension(True)
    src.load_extension(str(extension_path()))
    meta = dict(src.execute("SELECT key, value FROM meta"))
    scale = float(meta["int8_scale"])
    rows = src.execute(
        f"SELECT u.unit_id, u.text, u.digest, v.embedding FROM units u JOIN cache c ON c.digest = u.digest "
        f"JOIN {meta['vec_table']} v ON v.rowid = c.vector_id"
    )
    with apsw.Connection(str(target)) as conn:
        conn.execute("CREATE TABLE passages(unit_id, text, digest, vector); CREATE TABLE queries(text TEXT)")
        conn.executemany(
            "INSERT INTO passages VALUES(?, ?, ?, ?)",
            (
                (i, t, d, (np.frombuffer(bytes(v), dtype=np.int8).astype("<f4") / np.float32(scale)).tobytes())
                for i, t, d, v in rows
            ),
        )
        conn.executemany("INSERT INTO queries VALUES(?)", [(q,) for q in queries])
    src.close()
    print(f"  passages and vectors kept in {target}")


def _cell_recall(path: Path, queries: list[str]) -> None:
    """How much of the exact top 10 (sqlite-vec over every vector of the daemon's own file) the default search
    finds: the cells it probes, and the rough pass of the scan in memory (in-process)."""
    from memoryd.embed.local import UseM3

    try:
        from memoryd.store import cells as arithmetic
        from memoryd.store.vector_schema import extension_path
        from memoryd.store.vectors import VectorIndex
    except ImportError:  # an older tree (an A/B run): its vectors have no cells to measure
        print("  recall of the cells and the two passes: not measured (this tree has neither)")
        return

    index = VectorIndex(path, extension_path())
    index.open(UseM3.model, UseM3.dimension)
    index.prepare()  # past the float rows' budget: the rough rows, as the daemon's worker builds them
    on_file = VectorIndex(path, extension_path(), memory_max_bytes=0)  # sqlite-vec over the probed cells
    on_file.open(UseM3.model, UseM3.dimension)
    exact_index = VectorIndex(path, extension_path(), memory_max_bytes=0)
    exact_index.open(UseM3.model, UseM3.dimension)
    model = UseM3()
    centroids = index._layout[1]
    cells = 0 if centroids is None else len(centroids)
    found = exact_ms = default_ms = file_found = file_ms = 0.0
    sample = queries[:100]
    for query in sample:
        vector = model.encode([query], query=True)[0]
        index.search(vector, 10)  # the first reads the matrix
        started = time.perf_counter()
        exact = {h.digest for h in exact_index.search(vector, 10, probes=max(cells, 1))}
        exact_ms += time.perf_counter() - started
        started = time.perf_counter()
        found += len(exact & {h.digest for h in index.search(vector, 10)}) / max(len(exact), 1)
        default_ms += time.perf_counter() - started
        started = time.perf_counter()
        file_found += len(exact & {h.digest for h in on_file.search(vector, 10)}) / max(len(exact), 1)
        file_ms += time.perf_counter() - started
    path_ = index.scan_path()
    if path_ == "memory" and index.embedded >= arithmetic.SHORTLIST_MIN_ROWS:
        path_ = "memory, two passes"
    n = len(sample)
    print(
        f"  {index.embedded} vectors, {f'{cells} cells, {index.probes()} probed' if cells else 'no cells'}, read by "
        f"{path_}: recall@10 of the exact answer {found / n:.3f}, in-process {1000 * default_ms / n:.2f} ms a query; "
        f"sqlite-vec over the probed cells {file_found / n:.3f}, {1000 * file_ms / n:.2f} ms; exact (sqlite-vec "
        f"over all) {1000 * exact_ms / n:.2f} ms"
    )
    for opened in (index, on_file, exact_index):
        opened.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="use-m3")
    parser.add_argument("--latency-mb", default="", help="corpus sizes for the latency runs, e.g. 2,50")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE", help="a daemon setting")
    parser.add_argument("--keep", type=Path, help="keep each latency corpus's passages and vectors in this directory")
    args = parser.parse_args()
    global KEEP
    KEEP = args.keep
    SETTINGS.update({f"MEMORYD_{k.upper()}": v for k, _, v in (x.partition("=") for x in args.setting)})
    print(f"# bench_semantic · {conditions()} · settings {args.setting}")
    if not args.skip_quality:
        quality(args.provider)
    for mb in [float(x) for x in args.latency_mb.split(",") if x]:
        latency(args.provider, mb)


if __name__ == "__main__":
    main()
