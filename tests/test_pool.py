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


async def test_an_exception_reaches_the_caller_and_the_thread_serves_the_next_call() -> None:
    pool = ThreadPool(1, "test-pool")

    def fails() -> None:
        raise ValueError("no such passage")

    with pytest.raises(ValueError, match="no such passage"):
        await pool.run(fails)
    with pytest.raises(ValueError, match="no such passage"):
        await anyio.to_thread.run_sync(lambda: pool.submit(fails).result(5))
    assert await pool.run(lambda: 42) == 42
    await pool.close()


async def test_one_callers_calls_run_in_the_thread_that_ran_the_last_one() -> None:
    """Each search thread has its own read connection and warm caches: calls one after another stay on one thread,
    and a second thread starts only for a call that finds the first busy."""
    pool = ThreadPool(2, "test-pool")
    names = {await pool.run(lambda: threading.current_thread().name) for _ in range(20)}
    assert len(names) == 1
    entered, release = threading.Event(), threading.Event()

    def busy() -> str:
        entered.set()
        release.wait(30)
        return threading.current_thread().name

    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.run, busy)
        await anyio.to_thread.run_sync(entered.wait, 30)
        other = await pool.run(lambda: threading.current_thread().name)
        release.set()
    assert other not in names
    # both threads now exist: calls one after another still stay on the first (they alternated with a shared queue)
    assert {await pool.run(lambda: threading.current_thread().name) for _ in range(20)} == names
    await pool.close()
