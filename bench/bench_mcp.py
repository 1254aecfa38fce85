"""`memoryctl mcp`: server start to first answer, and a tool call's round trip after start (the SDK's stdio client,
both handshake eras). Target: tool call round trip p50 ≤ 5 ms after start.

    .venv/bin/python bench/bench_mcp.py [--calls 200]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio
from common import Rpc, conditions, daemon, pct
from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def measure(env: dict[str, str], root: Path, mode: str, calls: int) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "memoryctl", "mcp"], env=env, cwd=root)
    started = time.perf_counter()
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        await client.list_tools()
        first = (time.perf_counter() - started) * 1000
        for tool, args in (
            ("memory_search", {"query": "ERR_UART_TIMEOUT_0x3F"}),
            ("memory_get", {"path": "memory/MEMORY.md"}),
        ):
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                result = await client.call_tool(tool, args)
                times.append((time.perf_counter() - t) * 1000)
                assert not result.is_error or tool == "memory_get", result.content
            print(f"  {mode:<6} {tool:<14} round trip p50 {pct(times, 0.5):.2f} ms, p99 {pct(times, 0.99):.2f} ms")
    print(f"  {mode:<6} server start to first answer (tools/list): {first:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(f"# bench_mcp · {conditions()}")
    work = Path(tempfile.mkdtemp(prefix="mdmc", dir="/tmp"))
    try:
        with daemon(log_level="warning", extra_env={"MEMORYD_EMBEDDING_PROVIDER": "none"}) as (_home, env):
            rpc = Rpc(str(_home / "run" / "memoryd.sock"))
            ws = rpc.call("workspace.add", {"path": str(work)})["workspace_id"]
            rpc.call(
                "remember",
                {"workspace": ws, "type": "decision", "text": "串口 ERR_UART_TIMEOUT_0x3F：开启硬件流控后消失"},
            )
            (work / "memory" / "MEMORY.md").write_text("## Devices\n- KX-200 bench 3\n", encoding="utf-8")
            rpc.close()
            for mode in ("legacy", "auto"):
                anyio.run(measure, env, work, mode, args.calls)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
