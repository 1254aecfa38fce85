"""Lifecycle runs through the real daemon: archive of 3,000 daily files, then restore of that run.

Targets on 2 cores: archive ≤ 5 s, restore ≤ 5 s (issue 22 §13), each one recorded change; the restore puts every
file back byte for byte (checked). Each daily file is a realistic day (~1 KB, English and Chinese entries).
Run: .venv/bin/python bench/bench_lifecycle.py [--files 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

from common import Rpc, conditions, daemon, pct


def days(path: Path, count: int, today: date) -> dict[str, str]:
    """``count`` daily files, the newest 31 days before ``today``; rel path → sha256."""
    memory = path / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    out = {}
    for n in range(count):
        day = today - timedelta(days=31 + n)
        text = (
            f"## {day}\n\n## {day} 09:{n % 60:02d} — decision\n- 串口超时 ERR_UART_{n} 在开启流控后消失\n"
            f"- Reason: measured on bench {n}; the gateway retried the upload after a timeout\n\n"
            f"## {day} 14:{n % 60:02d} — note\n- KX-200 firmware 1.2.{n % 9} needs RTS/CTS at 921600 baud\n"
            "- the watcher picked the edit up within a second; search found it\n" * 6
        )
        (memory / f"{day}.md").write_text(text, encoding="utf-8")
        out[f"memory/{day}.md"] = hashlib.sha256(text.encode()).hexdigest()
    return out


def tree(path: Path) -> dict[str, str]:
    return {
        p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (path / "memory").rglob("*.md")
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the daemon (a setting)")
    args = parser.parse_args()
    print(f"# bench_lifecycle · {conditions()}")
    today = date.today()
    archive_s, restore_s, dry_s = [], [], []
    with daemon(
        log_level="warning", extra_env={"MEMORYD_EMBEDDING_PROVIDER": "none", **dict(e.split("=", 1) for e in args.env)}
    ) as (home, _env):
        rpc = Rpc(str(home / "run" / "memoryd.sock"))
        for _ in range(args.rounds):
            path = Path(tempfile.mkdtemp(prefix="mdw", dir="/tmp"))
            before = days(path, args.files, today)
            size = sum((path / rel).stat().st_size for rel in before)
            ws = rpc.call("workspace.add", {"path": str(path)})["workspace_id"]
            rpc.call("index", {"workspace": ws})

            started = time.perf_counter()
            dry = rpc.call("lifecycle.archive", {"workspace": ws, "dry_run": True})
            dry_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            done = rpc.call("lifecycle.archive", {"workspace": ws})
            archive_s.append(time.perf_counter() - started)
            assert len(done["files"]) == 2 * args.files == len(dry["files"]), (len(done["files"]), done["remaining"])

            started = time.perf_counter()
            rpc.call("restore", {"workspace": ws, "run_id": done["run_id"]})
            restore_s.append(time.perf_counter() - started)
            print(
                f"dry run {dry_s[-1]:.2f} s · archive {archive_s[-1]:.2f} s · restore {restore_s[-1]:.2f} s", flush=True
            )
            assert tree(path) == before, "restore is not byte-identical"
            rpc.call(
                "workspace.remove", {"workspace": ws, "owner_token": (home / "config/owner.token").read_text().strip()}
            )
            shutil.rmtree(path, ignore_errors=True)
        rpc.close()
    print(f"{args.files:,} daily files, {size / 1e6:.1f} MB, {args.rounds} rounds (a fresh workspace each)")
    for label, values, target in (
        ("dry run", dry_s, None),
        ("archive", archive_s, 5.0),
        ("restore", restore_s, 5.0),
    ):
        goal = f"  (target ≤ {target:g} s)" if target else ""
        print(f"{label}: p50 {pct(values, 0.5):.2f} s · max {max(values):.2f} s{goal}")


if __name__ == "__main__":
    main()
