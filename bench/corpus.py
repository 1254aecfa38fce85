"""Deterministic corpus generator: mixed English/Chinese daily logs with rare identifiers.

Each entry follows the daily format (## YYYY-MM-DD HH:MM — type + bullets). A fraction of entries carry a rare
identifier (error code, config key, path) or a rare Chinese term; those are the targets of the generated queries,
so recall can be measured: the entry that holds the rare thing must be in the top 5.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

EN = [
    "uart",
    "bus",
    "reset",
    "timeout",
    "firmware",
    "flash",
    "bootloader",
    "sensor",
    "calibration",
    "offset",
    "driver",
    "buffer",
    "overflow",
    "retry",
    "baudrate",
    "interrupt",
    "watchdog",
    "voltage",
    "regulator",
    "thermal",
    "throttle",
    "board",
    "bench",
    "cable",
    "probe",
    "trace",
    "logic",
    "analyzer",
    "packet",
    "checksum",
    "handshake",
    "register",
    "gpio",
    "clock",
    "jitter",
    "latency",
    "memory",
    "stack",
    "heap",
    "allocator",
    "scheduler",
    "thread",
    "mutex",
    "deadlock",
    "release",
    "build",
    "pipeline",
    "artifact",
    "signing",
    "upload",
    "review",
    "merge",
    "branch",
    "decision",
    "rollback",
    "deploy",
    "staging",
    "production",
    "customer",
    "report",
    "incident",
    "fix",
    "patch",
    "hotfix",
]
ZH = [
    "串口",
    "超时",
    "固件",
    "版本",
    "升级",
    "烧录",
    "引导",
    "传感器",
    "校准",
    "偏置",
    "驱动",
    "缓冲区",
    "溢出",
    "重试",
    "波特率",
    "中断",
    "看门狗",
    "电压",
    "稳压器",
    "温度",
    "降频",
    "开发板",
    "测试台",
    "线缆",
    "探头",
    "逻辑分析仪",
    "数据包",
    "校验和",
    "握手",
    "寄存器",
    "时钟",
    "抖动",
    "延迟",
    "内存",
    "调度",
    "线程",
    "死锁",
    "发布",
    "构建",
    "流水线",
    "签名",
    "上传",
    "评审",
    "合并",
    "分支",
    "决策",
    "回滚",
    "部署",
    "客户",
    "事故",
    "修复",
    "补丁",
]
TYPES = ("decision", "event", "summary", "note")
RARE_ZH = (
    "量子隧穿",
    "相位噪声",
    "谐振腔",
    "电迁移",
    "闩锁效应",
    "寄生电容",
    "热插拔",
    "毛刺滤波",
    "亚稳态",
    "回读校验",
)


@dataclass(frozen=True)
class Target:
    query: str
    path: str  # relative to the workspace
    line: int  # the entry heading's line
    kind: str  # "identifier" | "chinese" | "question"


def _sentence(rng: random.Random, chinese: bool) -> str:
    if chinese:
        return "".join(rng.choice(ZH) for _ in range(rng.randint(4, 9))) + "。"
    words = [rng.choice(EN) for _ in range(rng.randint(6, 14))]
    return " ".join(words).capitalize() + "."


def generate(
    root: Path,
    megabytes: float,
    seed: int = 7,
    targets_wanted: int = 200,
    per_file: int = 40_000,
    files: int | None = None,
) -> list[Target]:
    """Write ``memory/*.md`` under ``root`` totalling about ``megabytes`` (or ``files`` daily files, each just over
    ``per_file`` bytes); return query targets."""
    rng = random.Random(seed)
    memory = root / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    budget = int(megabytes * 1024 * 1024)
    written = 0
    day = date(2024, 1, 1)
    targets: list[Target] = []
    if files is not None:
        budget = files * per_file * 4  # the file count stops it
    target_every = max(1, int(budget / 450 / (targets_wanted * 1.2)))
    n = n_files = 0
    while written < budget and (files is None or n_files < files):
        n_files += 1
        name = f"{day.isoformat()}.md"
        lines = [f"## {day.isoformat()}", ""]
        size = 0
        minute = 0
        while size < per_file and written + size < budget:
            minute += rng.randint(1, 3)
            hh, mm = divmod(minute % 1440, 60)
            kind = rng.choice(TYPES)
            heading_line = len(lines) + 1
            lines.append(f"## {day.isoformat()} {hh:02d}:{mm:02d} — {kind}")
            chinese = rng.random() < 0.4
            bullets = [_sentence(rng, chinese) for _ in range(rng.randint(2, 4))]
            n += 1
            if n % target_every == 0 and len(targets) < targets_wanted:
                which = len(targets) % 3
                if which == 0:
                    ident = f"ERR_{rng.choice(EN).upper()}_{rng.choice(EN).upper()}_0x{rng.randint(0, 0xFFFF):04X}"
                    bullets[0] = f"{bullets[0]} Code {ident} appeared."
                    targets.append(Target(ident, f"memory/{name}", heading_line, "identifier"))
                elif which == 1:
                    pair = len(targets) // 3  # distinct pairs of rare terms: each Chinese target is unique
                    term = RARE_ZH[pair % len(RARE_ZH)] + RARE_ZH[(pair // len(RARE_ZH) + pair + 1) % len(RARE_ZH)]
                    bullets[0] = f"发现{term}问题，{bullets[0]}"
                    targets.append(Target(term, f"memory/{name}", heading_line, "chinese"))
                else:
                    key = f"facts.{rng.choice(EN)}.{rng.choice(EN)}_{rng.randint(100, 999)}"
                    bullets[0] = f"Set {key} to {rng.randint(1, 9999)} because the {rng.choice(EN)} drifted."
                    targets.append(
                        Target(f"what value did we set {key} to?", f"memory/{name}", heading_line, "question")
                    )
            for b in bullets:
                lines.append(f"- {b}")
            lines.append("")
            size = sum(len(line.encode()) + 1 for line in lines)
        text = "\n".join(lines) + "\n"
        (memory / name).write_text(text, encoding="utf-8")
        written += len(text.encode())
        day += timedelta(days=1)
    return targets
