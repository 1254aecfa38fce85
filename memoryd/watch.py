"""Watch one workspace's memory subtrees and report the paths that may have changed.

Design and trade-offs
---------------------
* **Watch each existing subtree root directly, never the workspace root.** A recursive watch on the
  workspace root adds one inotify watch per directory under it (``node_modules``, ``.venv``, build
  output ...) even with a ``watch_filter``: it is slow to arm and can exhaust
  ``fs.inotify.max_user_watches``. A subtree nested in another existing subtree is covered by the outer one.
* **Re-arm instead of watching parents.** The backend is closed and re-armed when the set of existing
  roots or their ``(st_dev, st_ino)`` changes, or when an event names a subtree root itself (inotify
  reports DELETE_SELF / MOVE_SELF of a watched root). The inode check alone is not enough: ext4 hands the
  same inode back after ``rm -rf memory && mkdir memory``. Roots are stat()ed each time the backend
  returns: at least every 200 ms while a subtree is missing (so ``mkdir -p spec/memory/...`` is noticed
  quickly), every 1 s otherwise. That costs a few stat() calls per tick and no watches outside the subtrees.
* **Snapshots close every gap.** We keep ``(inode, size, mtime_ns)`` of every memory file. After each
  (re-)arm we rescan the roots and report every path whose signature differs, so files written before the
  new watch existed (``mkdir -p x && echo > x/a.yaml``) and changes made during the re-arm window are
  reported. The same map yields the files under a deleted or moved-away directory, for which the backend
  may report only the directory. A directory named in an event is rescanned and all files under it reported
  (events right after ``mkdir -p`` are sometimes lost).
* **Event kinds are ignored.** Atomic replaces show up as ``added``; every event just means "this path may
  have changed"; callers stat the path.
* **We drive** ``watchfiles._rust_notify.RustNotify`` (the documented Rust backend that ``awatch`` is a
  thin loop around) with the same ``debounce``/``step``/``stop_event`` parameters, rather than ``awatch``:
  its constructor arms the watches synchronously, so ``task_status.started()`` and the post-arm snapshot
  are race-free (``awatch`` arms lazily inside its first ``__anext__``); the timeout can vary per call; and
  the blocking ``watch()`` call runs on a private one-thread ``CapacityLimiter`` instead of holding one of
  anyio's 40 shared worker threads per workspace.
* **Nothing blocking on the event loop.** Looking for the roots (stat), arming (RustNotify's constructor adds
  the inotify watches synchronously), rescans (``os.walk`` + stat) and expanding events (stat, walks of new
  directories) all run on that same private thread, one at a time, so the snapshot map needs no lock. With
  polling on a 3,000-file tree the rescan takes tens of milliseconds every 200 ms; on the loop that was the
  worst-case latency of every request. Stopping always goes through ``stop_event`` (checked
  every ``step`` ms), never through thread cancellation, which takes 4-5 s.
* **Polling is ours, not watchfiles'.** notify's poll watcher compares mtimes at one-second resolution and
  misses same-second rewrites (measured: ``echo >> f`` twice in a second, editor replace right after
  creation). When polling is forced we instead rescan the subtrees every 200 ms and diff the
  ``(inode, size, mtime_ns)`` snapshot - the same code that closes the re-arm gap. It costs one walk plus one
  stat() per memory file per tick, fine for memory trees (a few thousand files), and it scans nothing else.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import structlog
from watchfiles._rust_notify import RustNotify

__all__ = ["ChangeCallback", "WorkspaceWatcher"]

ChangeCallback = Callable[[set[Path]], Awaitable[None]]
_Sig = tuple[int, int, int]
_Ident = tuple[int, int]
_T = TypeVar("_T")

log = structlog.get_logger(__name__)

POLLING_ENV = "MEMORYD_WATCH_POLLING"
_TEMP_ENDINGS = ("~", ".swp", ".swx", ".tmp", "4913")
_POLL_TICK_MS = 200  # rescan period when polling, and how often missing subtree roots are looked for
_IDLE_TICK_MS = 1000  # how often existing roots are re-checked when nothing happens


def _ignored(name: str) -> bool:
    """Hidden names (including ``.git``) and editor temp/backup files."""
    return name.startswith(".") or name.endswith(_TEMP_ENDINGS)


def _file_sig(path: Path) -> _Sig | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def _dir_ident(path: Path) -> _Ident | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


async def _set_on_exit(event: anyio.Event) -> None:
    try:
        await anyio.sleep_forever()
    finally:
        event.set()  # run() cancelled from outside: let the backend thread return within one step


class WorkspaceWatcher:
    """Watch ``subtrees`` of ``workspace_root`` and call ``on_change`` with batches of absolute paths.

    Only files ending in ``suffixes`` are reported; hidden names, editor temp files (``*~``, ``*.swp``,
    ``*.swx``, ``*.tmp``, vim's ``4913``) and anything inside ``.git/`` are ignored. Reported paths may
    have been added, modified or deleted. ``on_change`` and ``reconcile`` are awaited one at a time from
    the watch loop (never concurrently); their exceptions are logged and the watcher carries on.
    ``reconcile`` runs every ``reconcile_interval_s`` as a safety net.

    Set the environment variable ``MEMORYD_WATCH_POLLING=1`` to force polling (rescan + diff every 200 ms)
    instead of native notifications, for network, FUSE or container filesystems that deliver no inotify
    events. Polling is also used automatically if native watches cannot be created (inotify watch limit).

    ``stop()`` must be called from the event loop thread; ``run()`` returns within one ``step``
    (<= 50 ms) plus the duration of a callback in flight. Cancelling ``run()`` is prompt as well.
    A stopped watcher cannot be restarted.
    """

    def __init__(
        self,
        workspace_root: Path,
        subtrees: Sequence[str],
        *,
        on_change: ChangeCallback,
        suffixes: tuple[str, ...] = (".md", ".yaml", ".yml"),
        debounce_ms: int = 50,
        reconcile_interval_s: float = 30.0,
        reconcile: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.workspace_root = Path(os.path.abspath(workspace_root))
        roots: list[Path] = []
        for sub in subtrees:
            rel = Path(sub)
            if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                raise ValueError(f"subtree must be a relative path inside the workspace: {sub!r}")
            roots.append(self.workspace_root / rel)
        # Deepest first, so that _wanted() judges a path against its most specific subtree.
        self._subtrees = sorted(set(roots), key=lambda p: len(p.parts), reverse=True)
        self._on_change = on_change
        self._suffixes = suffixes
        self._debounce_ms = max(1, debounce_ms)
        self._step_ms = max(5, min(50, self._debounce_ms // 2))
        self._reconcile_interval_s = reconcile_interval_s
        self._reconcile = reconcile
        self._polling = os.environ.get(POLLING_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
        self._known: dict[str, _Sig] = {}  # keyed by path strings: a Path costs more than its stat()
        self._armed: dict[Path, _Ident] = {}
        self._stop_requested = False
        self._stop_event: anyio.Event | None = None
        self._limiter: anyio.CapacityLimiter | None = None  # created by run(), inside the event loop
        self._notify: RustNotify | None = None
        self._next_reconcile = 0.0

    def stop(self) -> None:
        """Make ``run()`` return promptly. Idempotent; may be called before ``run()``."""
        self._stop_requested = True
        if self._stop_event is not None:
            self._stop_event.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until ``stop()``; ``task_status.started()`` is called once the watches are armed."""
        if self._stop_requested:
            task_status.started()
            return
        stop_event = self._stop_event = anyio.Event()
        self._limiter = anyio.CapacityLimiter(1)
        self._next_reconcile = anyio.current_time() + self._reconcile_interval_s
        async with anyio.create_task_group() as tg:
            tg.start_soon(_set_on_exit, stop_event)
            try:
                first = True
                while not stop_event.is_set():
                    try:
                        roots = await self._off(self._existing_roots)
                        notify = await self._off(self._arm, list(roots))
                        self._armed = roots if notify is not None else {}
                        changed = await self._off(self._resync, roots)
                        if first:
                            first = False
                            task_status.started()
                        else:
                            await self._emit(changed)
                        await self._watch(notify, stop_event)
                    finally:
                        self._close_notify()
            finally:
                tg.cancel_scope.cancel()

    async def _off(self, func: Callable[..., _T], *args: Any) -> _T:
        """Blocking file-system work (stat, os.walk, arming the backend) runs on the watcher's own worker thread,
        never on the event loop."""
        return await anyio.to_thread.run_sync(func, *args, limiter=self._limiter)

    def _close_notify(self) -> None:
        if self._notify is not None:
            self._notify.close()
            self._notify = None

    # -- arming -----------------------------------------------------------------------------------

    def _existing_roots(self) -> dict[Path, _Ident]:
        found = {s: ident for s in self._subtrees if (ident := _dir_ident(s)) is not None}
        return {s: i for s, i in found.items() if not any(o != s and s.is_relative_to(o) for o in found)}

    def _arm(self, roots: list[Path]) -> RustNotify | None:
        """Native watches on ``roots``, or None: no roots, polling mode, or a root vanished meanwhile."""
        if not roots or self._polling:
            return None
        try:
            # Kept on self at once: if run() is cancelled while this runs in its thread, the finally closes it.
            self._notify = RustNotify([str(r) for r in roots], False, False, 0, True, True)
            return self._notify
        except FileNotFoundError:
            return None  # a root vanished since we looked; retried on the next tick
        except Exception as exc:  # e.g. inotify watch limit reached
            log.warning("watch_native_failed_using_polling", workspace=str(self.workspace_root), error=str(exc))
            self._polling = True
            return None

    def _tick_ms(self, notify: RustNotify | None) -> int:
        roots = self._armed
        missing = notify is None or any(not any(s.is_relative_to(r) for r in roots) for s in self._subtrees)
        tick = _POLL_TICK_MS if missing else _IDLE_TICK_MS
        if self._reconcile is not None:
            until = int((self._next_reconcile - anyio.current_time()) * 1000) + 1
            tick = min(tick, until)
        return max(1, tick)  # 0 would mean "wait forever"

    async def _watch(self, notify: RustNotify | None, stop_event: anyio.Event) -> None:
        """Deliver batches until the roots need re-arming or stop is requested."""
        while not stop_event.is_set():
            tick = self._tick_ms(notify)
            if notify is None:
                with anyio.move_on_after(tick / 1000):
                    await stop_event.wait()
                raw: set[tuple[int, str]] | str = "timeout"
            else:
                try:
                    raw = await anyio.to_thread.run_sync(
                        notify.watch, self._debounce_ms, self._step_ms, tick, stop_event, limiter=self._limiter
                    )
                except Exception as exc:  # backend error: back off one tick, then re-arm and resync
                    log.warning("watch_backend_failed", workspace=str(self.workspace_root), error=str(exc))
                    with anyio.move_on_after(_POLL_TICK_MS / 1000):
                        await stop_event.wait()
                    return
            if raw == "stop" or stop_event.is_set():
                return
            rearm = notify is None
            if isinstance(raw, set):
                events = {Path(p) for _, p in raw}
                rearm = rearm or not events.isdisjoint(self._subtrees)
                await self._emit(await self._off(self._expand, events))
            await self._maybe_reconcile()
            if rearm or await self._off(self._existing_roots) != self._armed:
                return

    # -- change expansion -------------------------------------------------------------------------

    def _wanted(self, path: Path) -> bool:
        for root in self._subtrees:
            if path.is_relative_to(root):
                return not any(_ignored(part) for part in path.relative_to(root).parts)
        return False

    def _scan(self, top: Path) -> dict[str, _Sig]:
        """Signatures of the wanted files under ``top`` (symlinked directories are not entered, as os.walk).
        Plain strings and ``os.scandir`` until a file is kept: a polling rescan costs about a third of os.walk's."""
        found: dict[str, _Sig] = {}
        suffixes = self._suffixes
        stack = [os.fspath(top)]
        while stack:
            try:
                entries = os.scandir(stack.pop())
            except OSError:
                continue
            with entries:
                for entry in entries:
                    name = entry.name
                    if _ignored(name):
                        continue
                    try:
                        if entry.is_dir():
                            if not entry.is_symlink():
                                stack.append(entry.path)
                            continue
                        if not name.endswith(suffixes):
                            continue
                        st = entry.stat()
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        found[entry.path] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return found

    def _resync(self, roots: dict[Path, _Ident]) -> set[Path]:
        """Rescan all roots; return the files that differ from what we knew."""
        new: dict[str, _Sig] = {}
        for root in roots:
            new.update(self._scan(root))
        old, self._known = self._known, new
        if old == new:
            return set()
        return {Path(p) for p in old.keys() | new.keys() if old.get(p) != new.get(p)}

    def _expand(self, events: set[Path]) -> set[Path]:
        """Map raw event paths to memory files that may have changed, and update the known-file map."""
        out: set[Path] = set()
        for path in events:
            if not self._wanted(path):
                continue
            if path.name.endswith(self._suffixes):
                out.add(path)
            if str(path) in self._known:
                continue
            try:
                mode: int | None = os.stat(path).st_mode
            except OSError:
                mode = None
            if mode is not None and stat.S_ISREG(mode):
                continue
            if mode is not None and stat.S_ISDIR(mode):
                out.discard(path)
                out.update(map(Path, self._scan(path)))
            prefix = f"{path}{os.sep}"  # deleted / moved / replaced directory: everything we knew under it
            out.update(Path(k) for k in self._known if k.startswith(prefix))
        for path in out:
            if (sig := _file_sig(path)) is None:
                self._known.pop(str(path), None)
            else:
                self._known[str(path)] = sig
        return out

    # -- callbacks --------------------------------------------------------------------------------

    async def _emit(self, paths: set[Path]) -> None:
        if not paths:
            return
        try:
            await self._on_change(paths)
        except Exception:
            log.exception("watch_on_change_failed", workspace=str(self.workspace_root), paths=len(paths))

    async def _maybe_reconcile(self) -> None:
        if self._reconcile is None or anyio.current_time() < self._next_reconcile:
            return
        try:
            await self._reconcile()
        except Exception:
            log.exception("watch_reconcile_failed", workspace=str(self.workspace_root))
        self._next_reconcile = anyio.current_time() + self._reconcile_interval_s
