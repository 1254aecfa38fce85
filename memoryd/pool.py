"""A fixed pool of threads for short, read-only blocking calls on the hot path (searches).

``anyio.to_thread.run_sync`` costs the event-loop thread ~0.1 ms a call (a capacity limiter, run-variable lookups,
a cancel scope); with eight clients searching, that alone was a sixth of the loop's time per search. A search
needs none of it: it is read-only, bounded, and its answer can be dropped. So it runs here, handed over with the
loop's own ``run_in_executor``.

Cancellation: a cancelled caller stops waiting at once; a call already running finishes in its thread and its
answer is dropped (anyio's default waits for it instead). Only read-only calls belong here for that reason.
``close`` waits for running calls, so the daemon closes its index files only after the last search has left them.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import anyio

T = TypeVar("T")


class ThreadPool:
    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in one of the pool's threads, with the caller's context variables (log bindings)."""
        call = functools.partial(contextvars.copy_context().run, fn)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on asyncio (anyio's trio backend): the portable way
            return await anyio.to_thread.run_sync(call)
        return await loop.run_in_executor(self._executor, call)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """``fn()`` in one of the pool's threads, from a thread (a search overlapping two parts of its work)."""
        return self._executor.submit(contextvars.copy_context().run, fn)

    async def close(self) -> None:
        """Refuse new calls and wait for the running ones to finish."""
        await anyio.to_thread.run_sync(functools.partial(self._executor.shutdown, wait=True))
