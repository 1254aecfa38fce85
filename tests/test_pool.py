"""The search thread pool: a cancelled caller stops waiting at once, close() waits for calls still running, and
the caller's log bindings (context variables) reach the thread."""

from __future__ import annotations

import contextvars
import threading

import anyio
import anyio.lowlevel
import pytest

from memoryd.pool import ThreadPool

pytestmark = pytest.mark.anyio

_bound: contextvars.ContextVar[str] = contextvars.ContextVar("_bound", default="unset")


async def test_runs_in_a_pool_thread_with_the_callers_context() -> None:
    pool = ThreadPool(2, "test-pool")
    _bound.set("request-7")
    name, bound = await pool.run(lambda: (threading.current_thread().name, _bound.get()))
    await pool.close()
    assert name.startswith("test-pool") and bound == "request-7"


async def test_a_cancelled_caller_returns_and_close_waits_for_the_running_call() -> None:
    pool = ThreadPool(1, "test-pool")
    entered, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def slow() -> str:
        entered.set()
        release.wait(30)
        finished.append("done")
        return "answer"

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.run, slow)
            await anyio.to_thread.run_sync(entered.wait, 30)
            scope.cancel()  # the caller goes away while the call runs
    assert scope.cancel_called and finished == []  # it did not wait for the thread

    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.close)
        await anyio.lowlevel.checkpoint()  # close() is now waiting in its thread
        assert finished == []
        release.set()
    assert finished == ["done"]  # close() returned only after the running call ended
    with pytest.raises(RuntimeError):  # and the pool takes no more calls
        await pool.run(lambda: None)


async def test_submit_from_a_thread_runs_beside_it_with_its_context() -> None:
    """A search thread hands the query's embedding to the pool and reads the words' side meanwhile: the two run
    at once (each waits for the other to have started), and the bindings travel."""
    pool = ThreadPool(1, "test-pool")
    started, answered = threading.Event(), threading.Event()

    def beside() -> tuple[str, str]:
        started.set()
        assert answered.wait(5)  # the submitting thread is still working: not one after the other
        return threading.current_thread().name, _bound.get()

    def search() -> tuple[str, str]:
        _bound.set("request-8")
        future = pool.submit(beside)
        assert started.wait(5)
        answered.set()
        return future.result(5)

    name, bound = await anyio.to_thread.run_sync(search)
    await pool.close()
    assert name.startswith("test-pool") and bound == "request-8"
