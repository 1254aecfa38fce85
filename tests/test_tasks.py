"""The last resort for background tasks: a failure ends or restarts that task, never its task group."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
import structlog

from memoryd import tasks

pytestmark = pytest.mark.anyio


async def test_a_failing_background_task_is_logged_and_restarted_and_the_group_lives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tasks, "RESTART_FIRST_S", 0.001)
    runs: list[int] = []
    neighbour_done = anyio.Event()

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise RuntimeError("disk gone")

    async def once() -> None:
        raise ValueError("bad state")

    async def neighbour() -> None:
        await anyio.lowlevel.checkpoint()
        neighbour_done.set()

    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(tasks.task("flaky", flaky, restart=True, workspace_id="w1"))
            tg.start_soon(tasks.task("once", once))
            tg.start_soon(neighbour)
    assert runs == [0, 1, 2] and neighbour_done.is_set()
    failed = [e for e in logs if e["event"] == "task_failed"]
    assert sorted((e["task"], e.get("workspace_id") or "") for e in failed) == [
        ("flaky", "w1"),
        ("flaky", "w1"),
        ("once", ""),
    ]


async def test_cancellation_passes_through() -> None:
    started = anyio.Event()

    async def forever() -> None:
        started.set()
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(tasks.task("forever", forever, restart=True))
        await started.wait()
        tg.cancel_scope.cancel()
    assert started.is_set()
