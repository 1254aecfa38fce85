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
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import anyio

T = TypeVar("T")


class ThreadPool:
    """``size`` threads, each with its own queue. A call goes to the first thread with nothing to do (the busy
    counts are kept under a lock, and a call counts as done before its caller is woken), so one caller's calls
    one after another always run in the same thread, with its warm caches and read connection, and a second
    thread works only for a call that finds the first busy. (A shared queue does not keep that: a finished
    thread is marked idle only after its caller has been woken, so a quick next call started a second thread,
    and from then on the calls alternated between the two.)"""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self._slots = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}_{n}") for n in range(size)]
        self._busy = [0] * size
        self._lock = threading.Lock()

    def _submit(self, call: Callable[[], T]) -> Future[T]:
        with self._lock:
            slot = min(range(self.size), key=self._busy.__getitem__)  # the first idle one, else the least busy
            self._busy[slot] += 1
        try:
            future = self._slots[slot].submit(call)
        except BaseException:
            self._done(slot)
            raise
        future.add_done_callback(lambda _: self._done(slot))  # before the caller's own: counted done first
        return future

    def _done(self, slot: int) -> None:
        with self._lock:
            self._busy[slot] -= 1

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in one of the pool's threads, with the caller's context variables (log bindings)."""
        call = functools.partial(contextvars.copy_context().run, fn)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not on asyncio (anyio's trio backend): the portable way
            return await anyio.to_thread.run_sync(call)
        return await asyncio.wrap_future(self._submit(call))

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """``fn()`` in one of the pool's threads, from a thread (a search overlapping two parts of its work)."""
        return self._submit(functools.partial(contextvars.copy_context().run, fn))

    async def close(self) -> None:
        """Refuse new calls and wait for the running ones to finish."""

        def shutdown() -> None:
            for slot in self._slots:
                slot.shutdown(wait=True)

        await anyio.to_thread.run_sync(shutdown)
