"""Hook benchmark (issue 13 item 9): whole-process time of `memoryctl hook …`, start → exit, as a host runs it.

Each sample starts the installed `memoryctl` console script (the one a plugin's hooks.json points at) with the hook
JSON on standard input and waits for it to exit; nothing is warm in the process, the daemon is. Measured:
- UserPromptSubmit with the daemon up (recall for a prompt over a ~1 MB workspace)     target p50 ≤ 60 ms
- SessionStart (stable part, session snapshot reused) and PostToolUse (observe), daemon up
- the fail-open path with the daemon down (the socket path points nowhere)             target p50 ≤ 30 ms
- a daemon that never answers: each event ends by its own deadline                   target p50 ≤ deadline + 300 ms
- for scale: the bare interpreter (`python -c pass`) and `python -S -c pass`

Run: .venv/bin/python bench/bench_hooks.py [--runs 100] [--mb 1] [--vectors]
(--vectors keeps the embedding provider's default, waiting until the backlog is embedded; without it the daemon
runs with MEMORYD_EMBEDDING_PROVIDER=none, words only.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import Rpc, conditions, daemon, pct, summary, wait_embedded
from corpus import generate
from memoryctl.hooks import DEADLINES

MEMORYCTL = str(Path(sys.executable).parent / "memoryctl")


def run(argv: list[str], env: dict[str, str], payload: bytes) -> tuple[float, bytes]:
    started = time.perf_counter()
    out = subprocess.run(argv, env=env, input=payload, capture_output=True, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if out.returncode != 0:
        raise RuntimeError(f"{argv} exited {out.returncode}: {out.stderr!r}")
    return elapsed, out.stdout


def sample(
    name: str, argv: list[str], env: dict[str, str], payloads: list[bytes], runs: int, target: float | None
) -> list[bytes]:
    for payload in payloads[:5]:  # warm the page cache and the daemon's caches
        run(argv, env, payload)
    times, outputs = [], []
    for n in range(runs):
        elapsed, stdout = run(argv, env, payloads[n % len(payloads)])
        times.append(elapsed)
        outputs.append(stdout)
    verdict = ""
    if target is not None:
        verdict = f"  (target p50 ≤ {target:g} ms: {'ok' if pct(times, 0.5) <= target else 'MISSED'})"
    printed = sum(1 for o in outputs if o)
    print(f"  {name:<44} ms: {summary(times)}{verdict}; printed JSON {printed}/{runs}")
    return outputs


@contextlib.contextmanager
def mute_socket(path: Path) -> Iterator[Path]:
    """A listening Unix socket that accepts every connection and never answers (tests/test_hooks.py's)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def embedded_state(rpc: Rpc, ws: str) -> str:
    problem, total, _took = wait_embedded(rpc, ws, timeout=600)
    return f"{total} passages embedded" if problem is None else f"no vectors ({problem})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--vectors", action="store_true", help="keep the default embedding provider")
    args = parser.parse_args()
    print(f"hook benchmark · {conditions()}")
    print(f"  {MEMORYCTL} (console script) · {args.runs} runs per row, each a new process")
    work = Path(tempfile.mkdtemp(prefix="mdbh", dir="/tmp"))
    extra = {} if args.vectors else {"MEMORYD_EMBEDDING_PROVIDER": "none"}
    try:
        targets = generate(work, args.mb)
        memory = "# Long-term memory\n\n" + "".join(
            f"## Convention {n}\n- keep the uart retry budget at {n * 10} ms\n\n" for n in range(40)
        )
        (work / "memory" / "MEMORY.md").write_text(memory, encoding="utf-8")
        with daemon(log_level="warning", extra_env=extra) as (home, env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            ws = rpc.call("workspace.add", {"path": str(work)})["workspace_id"]
            rpc.call("index", {"workspace": ws})
            state = embedded_state(rpc, ws) if args.vectors else "words only (MEMORYD_EMBEDDING_PROVIDER=none)"
            rpc.close()
            size = sum(p.stat().st_size for p in (work / "memory").glob("*.md")) / 1024 / 1024
            print(f"  daemon up: workspace of {size:.2f} MB of memory files, {state}")

            def payload(**fields: Any) -> bytes:
                return json.dumps({"session_id": "bench-session", "cwd": str(work), **fields}).encode()

            prompts = [payload(prompt=t.query) for t in targets[:50]]
            outs = sample(
                "UserPromptSubmit (recall), daemon up",
                [MEMORYCTL, "hook", "claude", "UserPromptSubmit"],
                env,
                prompts,
                args.runs,
                60,
            )
            sizes = sorted(len(o) for o in outs if o)
            if sizes:
                print(f"    answer sizes: median {sizes[len(sizes) // 2]} bytes")
            sample(
                "SessionStart (snapshot reused), daemon up",
                [MEMORYCTL, "hook", "claude", "SessionStart"],
                env,
                [payload(source="resume")],
                args.runs,
                None,
            )
            tool = payload(tool_name="Bash", tool_input={"command": "make test"}, tool_response={"stdout": "ok " * 300})
            sample(
                "PostToolUse (observe), daemon up",
                [MEMORYCTL, "hook", "claude", "PostToolUse"],
                env,
                [tool],
                args.runs,
                None,
            )
            sample(
                "Stop (status; under the threshold), daemon up",
                [MEMORYCTL, "hook", "claude", "Stop"],
                {**env, "MEMORYD_CONSOLIDATE_AFTER": str(10 * args.runs + 100)},
                [payload(stop_hook_active=False)],
                args.runs,
                None,
            )
        down = {**env, "MEMORYD_SOCKET": str(work / "nowhere.sock")}
        print("  daemon down (the socket path points nowhere):")
        sample(
            "UserPromptSubmit, fail-open",
            [MEMORYCTL, "hook", "claude", "UserPromptSubmit"],
            down,
            prompts,
            args.runs,
            30,
        )
        sample("PostToolUse, fail-open", [MEMORYCTL, "hook", "claude", "PostToolUse"], down, [tool], args.runs, None)
        print("  a daemon that never answers (a socket that accepts and stays mute): each hook's own deadline")
        with mute_socket(work / "mute.sock") as mute:
            silent_env = {**env, "MEMORYD_SOCKET": str(mute), "MEMORYD_CONSOLIDATE_AFTER": "1"}
            for event, body in (
                ("SessionStart", payload(source="startup")),
                ("UserPromptSubmit", prompts[0]),
                ("PostToolUse", tool),
                ("Stop", payload(stop_hook_active=False)),
            ):
                deadline_ms = DEADLINES[event] * 1000
                sample(
                    f"{event}, deadline {deadline_ms:g} ms",
                    [MEMORYCTL, "hook", "claude", event],
                    silent_env,
                    [body],
                    min(args.runs, 10),
                    deadline_ms + 300,  # the deadline, plus the interpreter's start and exit
                )
        print("  for scale:")
        sample("python -c pass", [sys.executable, "-c", "pass"], down, [b""], args.runs, None)
        sample("python -S -c pass (no site)", [sys.executable, "-S", "-c", "pass"], down, [b""], args.runs, None)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
