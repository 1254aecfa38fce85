"""WorkspaceWatcher against real directories, with native notifications and with forced polling.

Every case waits for the expected paths with ``anyio.fail_after(5)`` around an event wait; latencies are
collected and printed at the end of the module (run with ``-s`` to see them), never asserted.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from memoryd.watch import POLLING_ENV, WorkspaceWatcher

LATENCIES: dict[str, list[float]] = {}
SUBTREES = ("memory", "spec/memory", "data/memory/overrides")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", autouse=True)
def _latency_report() -> Iterator[None]:
    yield
    for mode, values in sorted(LATENCIES.items()):
        ms = sorted(v * 1000 for v in values)
        p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
        print(
            f"\nwatch latency [{mode}] n={len(ms)} min={ms[0]:.0f}ms median={statistics.median(ms):.0f}ms "
            f"p95={p95:.0f}ms max={ms[-1]:.0f}ms"
        )


@pytest.fixture(params=["native", "polling"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "polling":
        monkeypatch.setenv(POLLING_ENV, "1")
    else:
        monkeypatch.delenv(POLLING_ENV, raising=False)
    return str(request.param)


@pytest.fixture
def ws() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ws", dir="/tmp"))
    (path / "memory").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write(path: Path, text: str = "x\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


class Recorder:
    """on_change callback that records batches and lets a test wait for paths."""

    def __init__(self, mode: str, fail_first: bool = False) -> None:
        self.mode = mode
        self.batches: list[set[Path]] = []
        self.fail_first = fail_first
        self._changed = anyio.Event()

    async def __call__(self, paths: set[Path]) -> None:
        self.batches.append(set(paths))
        self._changed.set()
        self._changed = anyio.Event()
        if self.fail_first:
            self.fail_first = False
            raise RuntimeError("callback failure (expected by the test)")

    def seen(self, since: int = 0) -> set[Path]:
        return set().union(*self.batches[since:])

    def mark(self) -> tuple[int, float]:
        return len(self.batches), anyio.current_time()

    async def wait_for(self, mark: tuple[int, float], *paths: Path) -> list[set[Path]]:
        """Wait until all ``paths`` were reported after ``mark``; return the batches since the mark."""
        since, t0 = mark
        with anyio.fail_after(5):
            while not set(paths) <= self.seen(since):
                await self._changed.wait()
        elapsed = anyio.current_time() - t0
        LATENCIES.setdefault(self.mode, []).append(elapsed)
        case = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0]
        LATENCIES.setdefault(f"case {case}", []).append(elapsed)
        return self.batches[since:]


async def start(tg: anyio.abc.TaskGroup, watcher: WorkspaceWatcher) -> anyio.Event:
    """Start ``watcher.run`` in ``tg`` (returns once armed); the returned event is set when run() returns."""
    done = anyio.Event()

    async def runner(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            await watcher.run(task_status=task_status)
        finally:
            done.set()

    await tg.start(runner)
    return done


@asynccontextmanager
async def watching(
    root: Path, mode: str, subtrees: tuple[str, ...] = SUBTREES, **kwargs: Any
) -> AsyncIterator[tuple[WorkspaceWatcher, Recorder]]:
    rec = Recorder(mode, fail_first=kwargs.pop("fail_first", False))
    watcher = WorkspaceWatcher(root, subtrees, on_change=rec, **kwargs)
    async with anyio.create_task_group() as tg:
        done = await start(tg, watcher)
        try:
            yield watcher, rec
        finally:
            watcher.stop()
            with anyio.fail_after(3):  # run() must return promptly after stop()
                await done.wait()


@pytest.mark.anyio
async def test_editor_atomic_rename(ws: Path, mode: str) -> None:
    note = write(ws / "memory" / "x.md", "old\n")
    async with watching(ws, mode) as (_, rec):
        for i in range(3):
            m = rec.mark()
            tmp = write(ws / "memory" / ".x.md.tmp", f"new {i}\n")
            os.replace(tmp, note)
            await rec.wait_for(m, note)
        assert all(p.name == "x.md" for p in rec.seen())


@pytest.mark.anyio
async def test_append_and_delete(ws: Path, mode: str) -> None:
    note = write(ws / "memory" / "a.md")
    other = write(ws / "memory" / "sub" / "b.yaml")
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        with note.open("a") as f:
            f.write("appended\n")
        await rec.wait_for(m, note)
        m = rec.mark()
        other.unlink()
        await rec.wait_for(m, other)


@pytest.mark.anyio
async def test_rename_within_tree(ws: Path, mode: str) -> None:
    old = write(ws / "memory" / "old.md")
    d1 = ws / "memory" / "d1"
    inner = write(d1 / "deep" / "c.yml")
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        new = old.rename(ws / "memory" / "new.md")
        await rec.wait_for(m, old, new)
        m = rec.mark()
        d2 = d1.rename(ws / "memory" / "d2")
        await rec.wait_for(m, inner, d2 / "deep" / "c.yml")


@pytest.mark.anyio
async def test_new_subdirectories_with_immediate_writes(ws: Path, mode: str) -> None:
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        files = []
        for i in range(5):
            deep = ws / "memory" / f"a{i}" / "b" / "c"
            deep.mkdir(parents=True)  # mkdir -p, then write at once
            files.append(write(deep / f"f{i}.md"))
        await rec.wait_for(m, *files)


@pytest.mark.anyio
async def test_memory_root_deleted_and_recreated(ws: Path, mode: str) -> None:
    a = write(ws / "memory" / "a.md")
    b = write(ws / "memory" / "nested" / "b.yaml")
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        shutil.rmtree(ws / "memory")
        await rec.wait_for(m, a, b)
        m = rec.mark()
        c = write(ws / "memory" / "c.md")
        await rec.wait_for(m, c)
        m = rec.mark()
        d = write(ws / "memory" / "d.md")  # the new root is really watched, not just rescanned once
        await rec.wait_for(m, d)
        # Delete and recreate without pausing: ext4 hands back the same inode.
        m = rec.mark()
        shutil.rmtree(ws / "memory")
        e = write(ws / "memory" / "e.md")
        await rec.wait_for(m, c, d, e)
        for i in range(3):
            m = rec.mark()
            with e.open("a") as f:
                f.write(f"{i}\n")
            await rec.wait_for(m, e)


@pytest.mark.anyio
async def test_spec_memory_tree_deleted_and_recreated(ws: Path, mode: str) -> None:
    old = write(ws / "spec" / "memory" / "profiles" / "KX-100" / "p.yaml")
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        shutil.rmtree(ws / "spec")
        new = write(ws / "spec" / "memory" / "profiles" / "KX-200" / "p.yaml")
        await rec.wait_for(m, old, new)
        m = rec.mark()
        with new.open("a") as f:
            f.write("more: 1\n")
        await rec.wait_for(m, new)


@pytest.mark.anyio
async def test_subtrees_created_after_start(ws: Path, mode: str) -> None:
    (ws / "data" / "memory").mkdir(parents=True)  # parent of the overrides subtree exists, subtree not
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        (ws / "spec" / "memory" / "profiles" / "KX-200").mkdir(parents=True)
        prof = write(ws / "spec" / "memory" / "profiles" / "KX-200" / "profile.yaml")
        over = write(ws / "data" / "memory" / "overrides" / "o.yml")
        await rec.wait_for(m, prof, over)
        m = rec.mark()
        prof.write_text("changed\n")
        await rec.wait_for(m, prof)


@pytest.mark.anyio
async def test_no_subtree_exists_at_start(ws: Path, mode: str) -> None:
    shutil.rmtree(ws / "memory")
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        note = write(ws / "memory" / "first.md")
        await rec.wait_for(m, note)
        m = rec.mark()
        second = write(ws / "memory" / "second.md")
        await rec.wait_for(m, second)


@pytest.mark.anyio
async def test_git_checkout_like_swap(ws: Path, mode: str) -> None:
    mem = ws / "memory"
    kept = [write(mem / f"k{i}.md") for i in range(10)]
    gone = [write(mem / "old" / f"g{i}.yaml") for i in range(10)]
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        write(ws / ".git" / "index.lock")
        for p in gone:
            p.unlink()
        (mem / "old").rmdir()
        for p in kept:  # git unlinks and recreates changed files
            p.unlink()
            write(p, "checked out\n")
        added = [write(mem / "new" / f"n{i}.yml") for i in range(10)]
        (ws / ".git" / "index.lock").unlink()
        batches = await rec.wait_for(m, *kept, *gone, *added)
        assert len(batches) < 10, f"expected a few batches, got {len(batches)}"


@pytest.mark.anyio
async def test_temp_hidden_and_foreign_files_ignored(ws: Path, mode: str) -> None:
    mem = ws / "memory"
    async with watching(ws, mode) as (_, rec):
        m = rec.mark()
        ignored = [
            write(mem / ".x.md.tmp"),
            write(mem / "x.md~"),
            write(mem / ".x.md.swp"),
            write(mem / ".x.md.swx"),
            write(mem / "4913"),
            write(mem / ".hidden.md"),
            write(mem / ".git" / "HEAD.md"),
            write(mem / ".cache" / "a.md"),
            write(mem / "notes.txt"),
            write(ws / "README.md"),
            write(ws / "other" / "memory.md"),
        ]
        sentinel = write(mem / "sentinel.md")
        await rec.wait_for(m, sentinel)
        assert rec.seen().isdisjoint(ignored)


async def watching_steadily(ws: Path, watcher: WorkspaceWatcher, rec: Recorder) -> None:
    """Return once the watcher is in its steady loop: a change made now was reported, and (native mode) its
    backend thread is back inside ``watch()`` (it holds the watcher's one thread token there). A readiness signal,
    where a sleep guessed (issue 19 §5)."""
    m = rec.mark()
    await rec.wait_for(m, write(ws / "memory" / "ready.md"))
    with anyio.fail_after(5):
        while watcher._notify is not None and not (
            watcher._limiter is not None and watcher._limiter.borrowed_tokens == 1
        ):
            await anyio.lowlevel.checkpoint()  # a turn of the loop, not a guess of how long anything takes


@pytest.mark.anyio
async def test_stop_is_prompt(ws: Path, mode: str) -> None:
    rec = Recorder(mode)
    watcher = WorkspaceWatcher(ws, SUBTREES, on_change=rec)
    async with anyio.create_task_group() as tg:
        done = await start(tg, watcher)
        await watching_steadily(ws, watcher, rec)
        t0 = anyio.current_time()
        watcher.stop()
        watcher.stop()  # idempotent
        with anyio.fail_after(3):
            await done.wait()
        LATENCIES.setdefault(f"stop-{mode}", []).append(anyio.current_time() - t0)
    # A stopped watcher's run() returns at once (after reporting started).
    with anyio.fail_after(3):
        async with anyio.create_task_group() as tg:
            await start(tg, watcher)


@pytest.mark.anyio
async def test_cancelling_run_is_prompt(ws: Path, mode: str) -> None:
    rec = Recorder(mode)
    watcher = WorkspaceWatcher(ws, SUBTREES, on_change=rec)
    with anyio.fail_after(8):
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run)
            await watching_steadily(ws, watcher, rec)
            t0 = anyio.current_time()
            tg.cancel_scope.cancel()
    LATENCIES.setdefault(f"cancel-{mode}", []).append(anyio.current_time() - t0)


@pytest.mark.anyio
async def test_callback_exception_does_not_kill_watcher(ws: Path, mode: str) -> None:
    async with watching(ws, mode, fail_first=True) as (_, rec):
        m = rec.mark()
        a = write(ws / "memory" / "a.md")
        await rec.wait_for(m, a)
        m = rec.mark()
        b = write(ws / "memory" / "b.md")
        await rec.wait_for(m, b)


@pytest.mark.anyio
async def test_reconcile_called_and_may_fail(ws: Path, mode: str) -> None:
    calls: list[float] = []
    enough = anyio.Event()

    async def reconcile() -> None:
        calls.append(anyio.current_time())
        if len(calls) >= 3:
            enough.set()
        if len(calls) == 1:
            raise RuntimeError("reconcile failure (expected by the test)")

    async with watching(ws, mode, reconcile=reconcile, reconcile_interval_s=0.2) as (_, rec):
        with anyio.fail_after(5):
            await enough.wait()
        m = rec.mark()
        a = write(ws / "memory" / "a.md")
        await rec.wait_for(m, a)


# -- nothing blocking on the event loop ---------------------------------------------------------------------------

_ON_LOOP: list[str] = []  # file-system calls under _PROBE["prefix"] made on the thread _PROBE["thread"]
_PROBE: dict[str, Any] = {"thread": None, "prefix": None}
_AUDITED = {"os.scandir", "os.listdir", "os.mkdir", "open"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event not in _AUDITED or _PROBE["thread"] != threading.get_ident() or not args:
        return
    if isinstance(args[0], str | bytes | os.PathLike) and os.fsdecode(args[0]).startswith(_PROBE["prefix"]):
        _ON_LOOP.append(f"{event} {os.fsdecode(args[0])}")


@pytest.fixture(scope="module")
def _audit_hook() -> None:
    sys.addaudithook(_audit)  # cannot be removed; inert while _PROBE["thread"] is None


@pytest.mark.anyio
async def test_scans_and_arming_run_off_the_event_loop(ws: Path, mode: str, _audit_hook: None) -> None:
    """os.walk (audited as os.scandir) for the arming rescan, the polling rescans and a new directory's expansion
    never runs on the event-loop thread."""
    for i in range(20):
        write(ws / "memory" / "archive" / f"2026-01-{i + 1:02d}.md")
    _ON_LOOP.clear()
    _PROBE.update(thread=threading.get_ident(), prefix=str(ws))
    try:
        async with watching(ws, mode) as (_, rec):
            m = rec.mark()
            # The test's own writes run in a worker thread, so only the watcher's calls are seen on this thread.
            new = ws / "memory" / "topic" / "deep" / "a.md"  # a new directory: expanded by a walk
            await anyio.to_thread.run_sync(write, new)
            await rec.wait_for(m, new)
            m = rec.mark()
            rule = ws / "spec" / "memory" / "profiles" / "m" / "r.yaml"  # a root appears: re-arm + rescan
            await anyio.to_thread.run_sync(write, rule)
            await rec.wait_for(m, rule)
    finally:
        _PROBE.update(thread=None, prefix=None)
    assert _ON_LOOP == []
