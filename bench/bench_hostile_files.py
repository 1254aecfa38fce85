"""Hostile files: the daemon's memory before and after indexing each one (VmRSS and VmHWM from /proc/<pid>/status).

Each case gets a fresh daemon (VmHWM is the process's peak since it started) and a workspace holding one small
note; the hostile file is then added and `index` called. With the default limit (index_max_file_bytes, 8 MB) the
10 and 30 MB files are refused unread; with --limit-mb 64 they are read and indexed, which measures what their
content costs. The FIFO and the device (mknod, root only) must not be opened at all: `index` and `validate`
answering at all is the result. Linux only (/proc).

Rule YAML cases (an alias bomb, nesting that crashed libyaml, a value beyond 64 bits) are indexed, and loaded by
`resolve`, which answers with the file in its errors.

Run: .venv/bin/python bench/bench_hostile_files.py [--limit-mb 64]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import Rpc, conditions, daemon

MB = 1024 * 1024


def _memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in MB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) // 1024
    return values["VmRSS"], values["VmHWM"]


def _write(path: Path, byte: bytes, size: int, newline_every: int = 0) -> None:
    block = byte * MB
    with open(path, "wb") as f:
        for _ in range(size // MB):
            f.write(block)


def _nul(mb: int) -> Callable[[Path], str]:
    def make(memory: Path) -> str:
        _write(memory / "nul.md", b"\x00", mb * MB)
        return "written"

    return make


def _ctrl_line(memory: Path) -> str:
    _write(memory / "ctrl.md", b"\x01", 10 * MB)  # one line: no line break in 10 MB
    return "written"


def _fifo(memory: Path) -> str:
    os.mkfifo(memory / "x.md")
    return "made"


def _device(memory: Path) -> str:
    try:
        os.mknod(memory / "zdev.md", 0o600 | 0o020000, os.makedev(1, 5))  # /dev/zero
    except PermissionError:
        return "skipped (mknod needs root)"
    return "made"


def _loop(memory: Path) -> str:
    os.symlink("self.md", memory / "self.md")
    os.symlink("b.md", memory / "a.md")
    os.symlink("a.md", memory / "b.md")
    return "made"


RULE = "rule_id: bomb\nmodel_id: KX-200\nfw_range: '*'\nconfidence: 0.9\nprovenance: {observation_ids: [obs_1]}\n"


def _rule(text: str) -> Callable[[Path], str]:
    def make(memory: Path) -> str:
        target = memory.parent / "spec/memory/profiles/KX-200/bomb.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(RULE + text)
        return f"{len(text.encode())} bytes"

    return make


def _bomb(levels: int) -> str:
    lines = ["facts:", "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


CASES: list[tuple[str, Callable[[Path], str]]] = [
    ("rule YAML: alias bomb, 9 levels", _rule(_bomb(9))),
    ("rule YAML: [[[…]]] 100,000 deep", _rule("facts:\n  x: " + "[" * 100_000 + "]" * 100_000 + "\n")),
    ("rule YAML: a fact of 2**64+1", _rule("facts:\n  x: 18446744073709551617\n")),
    ("10 MB of NUL", _nul(10)),
    ("30 MB of NUL", _nul(30)),
    ("10 MB line of \\x01", _ctrl_line),
    ("FIFO memory/x.md", _fifo),
    ("char device 1,5", _device),
    ("symlink loops", _loop),
]


def run(name: str, make: Callable[[Path], str], limit_mb: int | None) -> str:
    extra = {"MEMORYD_INDEX_MAX_FILE_BYTES": str(limit_mb * MB)} if limit_mb else {}
    extra["MEMORYD_WATCH"] = "false"  # the index call does the work, measured alone
    workspace = Path(tempfile.mkdtemp(prefix="mdbw", dir="/tmp"))
    try:
        (workspace / "memory").mkdir()
        (workspace / "memory" / "MEMORY.md").write_text("# Memory\n\nordinary note about serial timeouts\n")
        with daemon(extra_env=extra) as (home, _env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            pid = rpc.call("status")["pid"]
            ws = rpc.call("workspace.add", {"path": str(workspace)})["workspace_id"]
            rpc.call("index", {"workspace": ws})
            rss0, hwm0 = _memory(pid)
            made = make(workspace / "memory")
            started = time.perf_counter()
            try:
                rpc.call("index", {"workspace": ws})
            except RuntimeError as exc:  # an error answer
                made += f", index failed: {str(exc)[:40]}"
            seconds = time.perf_counter() - started
            rss1, hwm1 = _memory(pid)
            status = rpc.call("status", {"workspace": ws})["workspaces"][0]
            refused = "; ".join(f"{r['path']}: {r['reason']}" for r in status.get("refused", [])) or "-"
            hits = len(rpc.call("search", {"workspace": ws, "query": "serial timeouts"})["hits"])
            resolved = rpc.call("resolve", {"workspace": ws, "model_id": "KX-200", "fw_version": "1.0"})
            refused += "".join(f"; {e}" for e in resolved.get("errors", []))
            rss1, hwm1 = _memory(pid)  # after resolve too: a rule file is loaded by the rule set, not the index
            rpc.close()
        return (
            f"| {name} | {made} | {rss0} | {rss1} | {rss1 - rss0:+d} | {hwm0} | {hwm1} | {hwm1 - hwm0:+d} | "
            f"{seconds:.2f} | {hits} | {refused[:90]} |"
        )
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit-mb", type=int, default=0, help="index_max_file_bytes in MB (0: the default)")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("needs /proc (Linux)")
    print(f"# hostile files · {conditions()}")
    print(f"index_max_file_bytes: {f'{args.limit_mb} MB' if args.limit_mb else 'default'}")
    print()
    print(
        "| file | | VmRSS before MB | after | added | VmHWM before MB | after | added | index s | search hits "
        "| refused |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, make in CASES:
        if args.only not in name:
            continue
        print(run(name, make, args.limit_mb or None), flush=True)


if __name__ == "__main__":
    main()
