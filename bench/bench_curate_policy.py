"""Curation policy speed, in-process: sanitize, conflicts and the loss guard on what a consolidation brings.

- a realistic update (20 sections × 5 bullets, Chinese and English, a secret and a private span in it) through
  size cap → sanitize → find_conflicts/resolve against a 200-section MEMORY.md: target ≤ 20 ms (the whole apply of
  issue 22 has 200 ms);
- an update at the size cap (256 KiB of bullets): target ≤ 1 s;
- hostile single lines of 10 MB (patterns that a careless regex makes quadratic): each linear, target ≤ 3 s.

Run: .venv/bin/python bench/bench_curate_policy.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import conditions

from memoryd.curate import conflicts
from memoryd.curate.guard import loss_guard, size_guard
from memoryd.curate.sanitize import sanitize
from memoryd.settings import CurateSettings

POLICY = CurateSettings()
MEMORY = "# 项目长期记忆\n\n## 偏好\n- language: Python\n- 包管理器：pip\n\n" + "".join(
    f"## 第{s}节 section {s}\n" + "".join(f"- 事实 {s}.{b}: 串口 uart fact number {b}\n" for b in range(5)) + "\n"
    for s in range(200)
)
UPDATE = (
    "## 偏好\n- language: Rust\n- 包管理器: uv\n"
    + "".join(
        f"## 第{s}节 section {s}\n" + "".join(f"- 新事实 {s}.{b}: 波特率 921600 needs RTS/CTS {b}\n" for b in range(5))
        for s in range(20)
    )
    + "- key sk-ant-api03-"
    + "Zx9" * 12
    + "\n- 部署 <private>秘密</private> 在 vault\n- https://example.com\n"
)


def best_of(n: int, work: object) -> float:
    assert callable(work)
    best = float("inf")
    for _ in range(n):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def realistic() -> None:
    if not size_guard(UPDATE, POLICY).ok:
        raise AssertionError("size cap")
    clean = sanitize(UPDATE, POLICY)
    found = conflicts.find_conflicts(MEMORY, clean.text, POLICY)
    conflicts.resolve(MEMORY, clean.text, found)
    loss_guard(1000, 0, False, POLICY)


def main() -> None:
    print(f"# bench_curate_policy · {conditions()}")
    took = best_of(20, realistic)
    print(f"realistic update (100 bullets) against a 200-section MEMORY.md: {took * 1000:.1f} ms (target ≤ 20 ms)")
    lines = ["## 大\n"]
    size = 0
    while size < POLICY.max_update_bytes - 64:
        lines.append(f"- 第{len(lines)}条 fact {len(lines)}\n")
        size += len(lines[-1].encode())
    at_cap = "".join(lines)
    took = best_of(3, lambda: sanitize(at_cap, POLICY))
    print(
        f"update at the size cap ({len(at_cap.encode()) // 1024} KiB, {len(lines) - 1} bullets): {took:.2f} s "
        "(target ≤ 1 s)"
    )
    for name, line in (
        ("eyJ × 3.3M", "eyJ" * 3_333_333),
        ("password= × 1.1M", "password=" * 1_111_111),
        ("'a' × 10M", "a" * 10_000_000),
        ("<!-- × 2.5M", "<!--" * 2_500_000),
    ):
        took = best_of(1, lambda line=line: sanitize("## 大\n- " + line + "\n", POLICY))  # type: ignore[misc]
        print(f"one 10 MB line ({name}): {took:.2f} s (target ≤ 3 s)")


if __name__ == "__main__":
    main()
