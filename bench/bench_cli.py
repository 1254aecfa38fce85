"""Whole-process time of `memoryctl search` (issue 20 item 9: p50 ≤ 30 ms on 2 cores; the interpreter alone is
~27 ms here), start → exit, the way a person or a script runs it: the installed console script, a fresh process each
time, the daemon already up and warm.

Rows (each a new process per sample, rows interleaved round by round so load drifts hit them all alike):
- `python -c pass` and `python -S -c pass`: the floor no client code can go under
- `memoryctl search WORDS` (human output) and `memoryctl --json search WORDS`, against a ~1 MB workspace
- with --tree DIR (repeatable): the same two searches with DIR/client first on the path (PYTHONPATH), e.g. a
  `git archive` of an earlier commit, so before and after run alternately under the same conditions

Run: .venv/bin/python bench/bench_cli.py [--runs 40] [--rounds 5] [--mb 1] [--tree /tmp/before]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Rpc, conditions, daemon, pct, summary
from corpus import generate

MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")


def once(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if out.returncode != 0:
        raise RuntimeError(f"{argv} exited {out.returncode}: {out.stderr!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40, help="samples per row per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--tree", action="append", default=[], help="another checkout whose client/ to time too")
    args = parser.parse_args()
    print(f"memoryctl whole-process benchmark · {conditions()}")
    print(f"  {MEMORYCTL} (console script) · {args.rounds} rounds × {args.runs} runs per row, each a new process")
    work = Path(tempfile.mkdtemp(prefix="mdbc", dir="/tmp"))
    try:
        targets = generate(work, args.mb)
        with daemon(log_level="warning", extra_env={"MEMORYD_EMBEDDING_PROVIDER": "none"}) as (home, env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            ws = rpc.call("workspace.add", {"path": str(work)})["workspace_id"]
            rpc.call("index", {"workspace": ws})
            rpc.close()
            queries = [t.query for t in targets[:50]]
            trees: list[tuple[str, dict[str, str]]] = []
            for tree in [str(Path(__file__).resolve().parent.parent), *args.tree]:
                client = str(Path(tree).resolve() / "client")
                trees.append((tree, {**env, "PYTHONPATH": client}))  # this tree's too: the same path for all
            rows: dict[str, tuple[list[str] | None, dict[str, str]]] = {
                "python -c pass": ([sys.executable, "-c", "pass"], env),
                "python -S -c pass (no site)": ([sys.executable, "-S", "-c", "pass"], env),
            }
            for name, tree_env in trees:
                rows[f"memoryctl search ({name})"] = (None, tree_env)
                rows[f"memoryctl --json search ({name})"] = ([MEMORYCTL, "--json"], tree_env)
            times: dict[str, list[float]] = {name: [] for name in rows}
            for argv, row_env in rows.values():  # warm the page cache and the daemon
                for query in queries[:3]:
                    once(search_argv(argv, query), row_env, work)
            for _ in range(args.rounds):
                for row, (argv, row_env) in rows.items():
                    for n in range(args.runs):
                        times[row].append(once(search_argv(argv, queries[n % len(queries)]), row_env, work))
            for row, values in times.items():
                target = "  (target p50 ≤ 30 ms: {})".format("ok" if pct(values, 0.5) <= 30 else "MISSED")
                print(f"  {row:<48} ms: {summary(values)}{target if 'search' in row else ''}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def search_argv(argv: list[str] | None, query: str) -> list[str]:
    if argv is None:
        return [MEMORYCTL, "search", query]
    if argv[0] == MEMORYCTL:
        return [*argv, "search", query]
    return argv


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    main()
