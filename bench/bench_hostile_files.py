"""Hostile files: the daemon's memory before and after indexing each one (VmRSS and VmHWM from /proc/<pid>/status).

Each case gets a fresh daemon (VmHWM is the process's peak since it started) and a workspace holding one small
note; the hostile file is then added and `index` called. With the default limit (index_max_file_bytes, 8 MB) the
10 and 30 MB files are refused unread; with --limit-mb 64 they are read and indexed, which measures what their
content costs. The FIFO and the device (mknod, root only) must not be opened at all: `index` and `validate`
answering at all is the result. Linux only (/proc).

Rule YAML cases (an alias bomb, nesting that crashed libyaml, a value beyond 64 bits) are indexed, and loaded by
`resolve`, which answers with the file in its errors.

What a cloned repository can ship under data/memory/ and runs/ (issue: nothing it holds can write outside it or hang
it): intent journals that are a FIFO, a 1 GB sparse file or name a path outside, a 1 GB sparse history, a history
line whose backup is /etc/passwd, a symlinked items sidecar and evidence linked in from elsewhere. Each is made
after the workspace is added, then the call that reads it (a journaled change runs recovery first) is made.

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


def _in_workspace(rel: str, make_file: Callable[[Path], None]) -> Callable[[Path], str]:
    def make(memory: Path) -> str:
        target = memory.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        make_file(target)
        return "made"

    return make


def _sparse(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(1 << 30)


JOURNAL = "data/memory/journal/cr_evil.json"
EVIL_JOURNAL = (
    '{"run_id": "cr_evil", "history": {"op": "x"}, "writes": [{"path": "../../../../../../tmp/mdbw-pwned", '
    '"content": "x"}]}'
)
EVIL_HISTORY = (
    '{"op": "compile_apply", "run_id": "cr_evil", "changes": [{"path": "memory/stolen.md", "sha_after": null, '
    '"backup": "/etc/passwd"}]}\n'
)


def _remember_and_forget(rpc: Rpc, ws: str) -> None:
    """A journaled change: recovery reads every intent record first."""
    item = rpc.call("remember", {"workspace": ws, "text": "a note to forget"})
    rpc.call("forget", {"workspace": ws, "id": item["id"]})


def _restore_evil(rpc: Rpc, ws: str) -> None:
    rpc.call("restore", {"workspace": ws, "run_id": "cr_evil"})


def _remember(rpc: Rpc, ws: str) -> None:
    rpc.call("remember", {"workspace": ws, "text": "a note"})


def _prepare(rpc: Rpc, ws: str) -> None:
    rpc.call("compile.prepare", {"workspace": ws})


def _status_all(rpc: Rpc, ws: str) -> None:
    rpc.call("timeline", {"workspace": ws})


def _outside_link(rel: str) -> Callable[[Path], None]:
    def make(target: Path) -> None:
        outside = Path(tempfile.mkdtemp(prefix="mdbo", dir="/tmp"))
        (outside / "observations.jsonl").write_text('{"observation_id": "obs_x", "kind": "log", "text": "B"}\n')
        target.symlink_to(outside / rel)

    return make


TRIGGERS: dict[str, Callable[[Rpc, str], None]] = {}
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
    ("journal record: a FIFO", _in_workspace(JOURNAL, os.mkfifo)),
    ("journal record: 1 GB sparse", _in_workspace(JOURNAL, _sparse)),
    ("journal record: path ../…", _in_workspace(JOURNAL, lambda p: p.write_text(EVIL_JOURNAL))),
    ("history.jsonl: 1 GB sparse", _in_workspace("data/memory/history.jsonl", _sparse)),
    (
        "history line: backup /etc/passwd",
        _in_workspace("data/memory/history.jsonl", lambda p: p.write_text(EVIL_HISTORY)),
    ),
    ("items.jsonl: 1 GB sparse", _in_workspace("data/memory/items.jsonl", _sparse)),
    ("items.jsonl → outside", _in_workspace("data/memory/items.jsonl", _outside_link("items.jsonl"))),
    (
        "runs/x/observations.jsonl → outside",
        _in_workspace("runs/x/observations.jsonl", _outside_link("observations.jsonl")),
    ),
    ("observations.jsonl: a FIFO", _in_workspace("data/memory/observations.jsonl", os.mkfifo)),
]
TRIGGERS.update(
    {
        "journal record: a FIFO": _remember_and_forget,
        "journal record: 1 GB sparse": _remember_and_forget,
        "journal record: path ../…": _remember_and_forget,
        "history.jsonl: 1 GB sparse": _status_all,
        "history line: backup /etc/passwd": _restore_evil,
        "items.jsonl: 1 GB sparse": _remember_and_forget,
        "items.jsonl → outside": _remember,
        "runs/x/observations.jsonl → outside": _prepare,
        "observations.jsonl: a FIFO": _prepare,
    }
)


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
            trigger = TRIGGERS.get(name)
            if trigger is not None:
                try:
                    trigger(rpc, ws)
                    made += ", answered"
                except RuntimeError as exc:  # an error answer: the refusal
                    made += f", refused: {str(exc)[:60]}"
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
