"""The lifecycle of daily files and insights: archive and TTL, each run one recorded change (docs/howto/lifecycle.md).

- **archive** moves the daily files ``memory/YYYY-MM-DD.md`` dated (by their name, never their mtime) more than N
  days before today to ``memory/archive/YYYY-MM-DD.md``, byte for byte.
- **ttl** deletes the archived daily files dated more than the archive TTL before today, and removes the
  ``INSIGHTS.md`` bullets last seen more than the insights TTL before today (:mod:`memoryd.curate.insights`).

A run is planned first — every file it touches, with its bytes and what happens to it (``create``, ``update``,
``delete``): the risk summary a dry run answers, touching nothing. A real run writes the plan as ONE
``journal.commit`` (pre-images under ``data/memory/backups/<run_id>/``, the intent journal, the files, one history
line with ``kind`` ``archive`` or ``ttl``), so a crash at any point is finished or undone at the next start, and
``restore {run_id}`` puts every file back byte-identical. Either way one row goes to
``data/memory/observability/lifecycle.jsonl``.

What a run never does: follow a symlink, read a FIFO or a device, read a file over the size limit, move a file
that is not UTF-8 (the intent journal holds text), or overwrite an archived copy that differs — such files are
named in ``skipped`` with the reason and left as they are. A run touches at most ``max_files`` files and writes at
most ``max_bytes`` (the intent journal holds every byte written); ``remaining`` counts what waits for the next run.

Blocking: called under the workspace's change lock from a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Literal

import orjson

from memoryd import fsio, ids
from memoryd.curate import insights
from memoryd.errors import AppError
from memoryd.notes.daily import ARCHIVE_DIR, DAILY_NAME
from memoryd.rules import journal
from memoryd.settings import LifecycleSettings

MEMORY_DIR = "memory"
INSIGHTS_FILE = "memory/INSIGHTS.md"
ROWS_FILE = "data/memory/observability/lifecycle.jsonl"

LifecycleAction = Literal["archive", "ttl"]
FileAction = Literal["create", "update", "delete"]


@dataclass(frozen=True, slots=True)
class Touched:
    """One file a run touches: ``bytes`` is the file's size for a create or a delete, the bytes removed for an
    update (INSIGHTS.md); ``bullets`` the bullets an update removes."""

    path: str
    bytes: int
    action: FileAction
    bullets: int | None = None


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str
    reason: str


@dataclass(slots=True)
class Plan:
    action: LifecycleAction
    today: date
    days: dict[str, int]  # the thresholds used: archive_after_days, or archive_ttl_days and insights_ttl_days
    files: list[Touched] = field(default_factory=list)
    writes: list[journal.FileWrite] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    remaining: int = 0
    written: int = 0  # bytes the writes carry (the intent journal's size)


@dataclass(frozen=True, slots=True)
class Outcome:
    run_id: str
    action: LifecycleAction
    dry_run: bool
    recorded: bool  # a change is in history under run_id (False: a dry run, or nothing to do)
    files: list[Touched]
    skipped: list[Skipped]
    remaining: int
    days: dict[str, int]

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def _day_of(name: str) -> date | None:
    match = DAILY_NAME.match(name)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:  # 2026-02-31.md: named like a day, not one
        return None


def _dailies(root: Path, rel_dir: str, cutoff: date, plan: Plan) -> list[tuple[str, str]]:
    """(name, kind) of the entries of ``rel_dir`` named like a daily file dated before ``cutoff``, oldest first.
    Entries that are not regular files are skipped (a symlink is never followed, a FIFO never opened)."""
    out = []
    for name, kind in sorted(fsio.list_dir(root / rel_dir, root=root)):
        day = _day_of(name)
        if day is None or day >= cutoff:
            continue
        if kind != "file":
            what = {"link": "a symlink", "dir": "a directory"}.get(kind, "not a regular file")
            plan.skipped.append(Skipped(f"{rel_dir}/{name}", f"{what}: left as it is"))
            continue
        out.append((name, kind))
    return out


def _read(root: Path, rel: str, plan: Plan) -> bytes | None:
    """A file's bytes, or None after noting why it is skipped (refused, gone, not UTF-8)."""
    try:
        data = journal.read_bytes(root, rel)
    except AppError as exc:
        plan.skipped.append(Skipped(rel, exc.message))
        return None
    if data is None:
        plan.skipped.append(Skipped(rel, "gone meanwhile"))
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        plan.skipped.append(Skipped(rel, "not UTF-8: left as it is (fix its encoding, then run again)"))
        return None
    return data


def _fits(plan: Plan, limits: LifecycleSettings, files: int, written: int) -> bool:
    """Whether ``files`` more files writing ``written`` more bytes stay within one run's limits; else counted as
    remaining."""
    if len(plan.files) + files > limits.max_files or plan.written + written > limits.max_bytes:
        plan.remaining += 1
        return False
    return True


def plan_archive(root: Path, limits: LifecycleSettings, today: date, older_than_days: int | None) -> Plan:
    days = older_than_days if older_than_days is not None else limits.archive_after_days
    plan = Plan("archive", today, {"archive_after_days": days})
    cutoff = today - timedelta(days=days)
    for name, _kind in _dailies(root, MEMORY_DIR, cutoff, plan):
        rel, target = f"{MEMORY_DIR}/{name}", f"{ARCHIVE_DIR}/{name}"
        data = _read(root, rel, plan)
        if data is None:
            continue
        try:
            existing = journal.read_bytes(root, target)
        except AppError as exc:
            plan.skipped.append(Skipped(rel, f"{target}: {exc.message}"))
            continue
        if existing is not None and existing != data:
            plan.skipped.append(
                Skipped(rel, f"{target} exists with other content: left as it is (merge the two by hand)")
            )
            continue
        copy = existing is None
        if not _fits(plan, limits, 2 if copy else 1, len(data) if copy else 0):
            continue
        plan.writes.append(journal.FileWrite(rel, None, {"moved_to": target}))
        plan.files.append(Touched(rel, len(data), "delete"))
        if copy:  # an identical copy already archived (a run cut short by hand): only the daily file goes
            plan.writes.append(journal.FileWrite(target, data, {"moved_from": rel}))
            plan.files.append(Touched(target, len(data), "create"))
            plan.written += len(data)
    return plan


def plan_ttl(root: Path, limits: LifecycleSettings, today: date, older_than_days: int | None) -> Plan:
    """``older_than_days`` replaces both TTLs (archived files and insights) for this run."""
    archive_days = older_than_days if older_than_days is not None else limits.archive_ttl_days
    insights_days = older_than_days if older_than_days is not None else limits.insights_ttl_days
    plan = Plan("ttl", today, {"archive_ttl_days": archive_days, "insights_ttl_days": insights_days})
    for name, _kind in _dailies(root, ARCHIVE_DIR, today - timedelta(days=archive_days), plan):
        rel = f"{ARCHIVE_DIR}/{name}"
        data = _read(root, rel, plan)
        if data is None or not _fits(plan, limits, 1, 0):
            continue
        plan.writes.append(journal.FileWrite(rel, None, {"expired": "archive_ttl"}))
        plan.files.append(Touched(rel, len(data), "delete"))
    try:
        exists = journal.read_bytes(root, INSIGHTS_FILE) is not None
    except AppError as exc:
        plan.skipped.append(Skipped(INSIGHTS_FILE, exc.message))
        return plan
    data = _read(root, INSIGHTS_FILE, plan) if exists else None
    if data is None:
        return plan
    kept, expired = insights.expire(data.decode("utf-8"), today - timedelta(days=insights_days))
    if expired and _fits(plan, limits, 1, len(kept.encode("utf-8"))):
        content = kept.encode("utf-8")
        meta = {"expired": "insights_ttl", "bullets": len(expired)}
        plan.writes.append(journal.FileWrite(INSIGHTS_FILE, content, meta))
        plan.files.append(Touched(INSIGHTS_FILE, len(data) - len(content), "update", bullets=len(expired)))
        plan.written += len(content)
    return plan


def run(
    root: Path,
    plan: Plan,
    *,
    dry_run: bool,
    run_id: str | None = None,
    progress: journal.Progress | None = None,
) -> Outcome:
    """Carry out ``plan`` (nothing when ``dry_run``) and write its row in lifecycle.jsonl."""
    run_id = run_id or ids.new_id(plan.action)
    recorded = False
    if not dry_run and plan.writes:
        entry = {
            "op": f"lifecycle.{plan.action}",
            "kind": plan.action,
            "ts": ids.iso(datetime.now()),
            "today": plan.today.isoformat(),
            **plan.days,
        }
        recorded = journal.commit(root, run_id, entry, plan.writes, progress=progress) is not None
    outcome = Outcome(run_id, plan.action, dry_run, recorded, plan.files, plan.skipped, plan.remaining, dict(plan.days))
    record(root, outcome)
    return outcome


def utc_now() -> str:
    """ISO-8601 UTC with a ``Z``, as every observability row says when (docs/reference/files.md)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def record(root: Path, outcome: Outcome) -> None:
    """One row per run in lifecycle.jsonl (counts only, never memory text)."""
    row = {
        "ts": utc_now(),
        "run_id": outcome.run_id,
        "action": outcome.action,
        "dry_run": outcome.dry_run,
        "files": len(outcome.files),
        "bytes": outcome.bytes,
        "skipped": len(outcome.skipped),
        "remaining": outcome.remaining,
    }
    fsio.append_line(root / ROWS_FILE, orjson.dumps(row), root=root)
