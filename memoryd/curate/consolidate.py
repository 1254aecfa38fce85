"""Consolidation through the compile exchange: the curator the rules service calls (memoryd/rules/extension.py).

prepare: the daily entries not consolidated yet, in chunks of ``entries_per_chunk`` (and ``request_daily_chars``);
each request carries MEMORY.md's and INSIGHTS.md's sections (whole bullets, bounded), its entries, the open
questions and the routing mode; a progress record is written before each chunk is handed out.

apply: the answer's ``memory_update``, ``daily_sections``, ``history_entry`` and ``insights_update`` through the
pipeline (memoryd/curate/steps.py: normalize → route → sanitize → guard → merge), then the write step here: every
file in the SAME change as the rules (one ``journal.commit``, one run_id, one history line of kind
``consolidate``): MEMORY.md, INSIGHTS.md, today's daily file, HISTORY.md (appended), curated.jsonl (the bullets'
items), consolidated.json (the entries marked, only now) — restorable by ``restore`` — and progress.json
(bookkeeping). After the commit: one outcome row per target, the sanitize row, one routing row.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from memoryd import ids
from memoryd.curate import compact, entries, policy, replay, rows, sectionmerge, state, steps
from memoryd.curate import curated as curated_items
from memoryd.errors import AppError
from memoryd.notes import items
from memoryd.rules import journal
from memoryd.rules.extension import CuratorPlan
from memoryd.rules.models import ConsolidationMaterial, DailyNote, MemorySection
from memoryd.rules.workspace import WorkspaceRules
from memoryd.settings import CurateSettings

MEMORY_FILE = "memory/MEMORY.md"
INSIGHTS_FILE = "memory/INSIGHTS.md"
HISTORY_FILE = "memory/HISTORY.md"
FILE_MAX_BYTES = 16 * 1024 * 1024
OPEN_QUESTIONS_MAX = 50
FIELDS = ("memory_update", "daily_sections", "history_entry", "insights_update")
TARGET_FILES: dict[steps.Target, str] = {"memory": MEMORY_FILE, "insights": INSIGHTS_FILE}


def text_of(root: Path, rel: str) -> str:
    """A memory file's text ('' when absent); one that is not UTF-8 or not a regular file is refused."""
    data = journal.read_bytes(root, rel, FILE_MAX_BYTES)
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AppError("MEMORY_FILE_REFUSED", f"{rel} is not UTF-8 text; nothing was merged into it") from exc


def bounded_sections(text: str, budget: int) -> tuple[list[MemorySection], set[str]]:
    """A file's sections as a request shows them — whole bullets, at most ``budget`` characters — and the keys
    of the sections it could not show whole."""
    grouped: dict[str, list[str]] = {}
    for title, bullet in sectionmerge.bullets(text):
        grouped.setdefault(title, []).append(bullet)
    shown: list[MemorySection] = []
    partial: set[str] = set()
    used = 0
    for title, bullets in grouped.items():
        kept = []
        for bullet in bullets:
            if used + len(bullet) + len(title) > budget:
                break
            kept.append(bullet)
            used += len(bullet)
        if len(kept) < len(bullets):
            partial.add(steps.title(title))
        if kept:
            shown.append(MemorySection(title=title, bullets=kept))
            used += len(title)
    return shown, partial


def _composite(entry: entries.Entry) -> str:
    return f"{entry.path}#{entry.entry_id}"


def _consolidated(root: Path) -> set[str]:
    """The entries a consolidation has covered, as :func:`_composite` names them."""
    return {f"{p}#{i}" for p, ids_ in state.load_consolidated(root).items() for i in ids_}


@dataclass(slots=True)
class Consolidator:
    settings: CurateSettings
    replay_keep: int = 200  # observability_replay_keep: the prompts the replay check replays
    # workspace root → (the stats of the files every count depends on, {daily file → (its stat, its count)})
    _counts: dict[Path, tuple[object, dict[str, tuple[object, int]]]] = field(
        default_factory=dict, init=False, repr=False
    )

    def unconsolidated(self, wr: WorkspaceRules) -> int:
        """How many daily entries no consolidation has covered yet (:meth:`select`'s, counted). Status asks on every
        call (the Stop hook's nudge, the status line), and counting reads the window's daily files (~0.4 s of CPU at
        50 MB of notes), so each file's count is kept while the file, the consolidation state and the tombstones are
        unchanged (a stat each): a remember recounts its own day's file only."""
        root = wr.root
        shared = entries.signature(root, (state.CONSOLIDATED_FILE, items.FORGOTTEN_FILE))  # (ids name, not count)
        kept, counts = self._counts.get(root, (None, {}))
        if kept != shared:
            counts = {}
        done: set[str] | None = None
        hidden: dict[str, set[tuple[str, str]]] = {}
        fresh: dict[str, tuple[object, int]] = {}
        start = entries.window_start(date.today(), self.settings.recent_days)
        daily = entries.daily_files(root, since=start)
        for rel, stat in zip(daily, entries.signature(root, tuple(daily)), strict=True):
            if rel in counts and counts[rel][0] == stat:
                fresh[rel] = counts[rel]
                continue
            if done is None:
                done = _consolidated(root)
                hidden = items.hidden(root)
            waiting = sum(1 for e in entries.visible(root, rel, hidden) if _composite(e) not in done)
            fresh[rel] = (stat, waiting)
        if len(self._counts) > 1024:
            self._counts.clear()
        self._counts[root] = (shared, fresh)
        return sum(count for _, count in fresh.values())

    # --- prepare ------------------------------------------------------------------------------------------

    def select(self, wr: WorkspaceRules, taken: set[str], since: datetime | None) -> list[list[str]]:
        root = wr.root
        start = since.date() if since is not None else entries.window_start(date.today(), self.settings.recent_days)
        done = _consolidated(root)
        picked = [
            e
            for e in entries.scan(root, since=start)
            if _composite(e) not in taken and (since is not None or _composite(e) not in done)
        ]
        chunks: list[list[str]] = []
        size = 0
        for e in picked:
            weight = len(entries.for_request(e))
            if (
                not chunks
                or len(chunks[-1]) >= self.settings.entries_per_chunk
                or (chunks[-1] and size + weight > self.settings.request_daily_chars)
            ):
                chunks.append([])
                size = 0
            chunks[-1].append(_composite(e))
            size += weight
        return chunks

    def material(self, wr: WorkspaceRules, record: dict[str, Any]) -> ConsolidationMaterial | None:
        root = wr.root
        wanted = defaultdict(set)
        for composite in record.get("entries", []):
            path, _, entry = composite.partition("#")
            wanted[path].add(entry)
        notes = []
        by_key = entries.item_ids(root)
        for path in sorted(wanted):
            text = entries.read(root, path) if path.startswith("memory/") else None
            for e in entries.parse(path, text or ""):
                if e.entry_id in wanted[path]:
                    e = entries.with_item(e, by_key)
                    notes.append(
                        DailyNote(
                            entry_id=e.entry_id,
                            item_id=e.item_id,
                            path=e.path,
                            heading=e.heading,
                            text=entries.for_request(e),
                        )
                    )
        budget = self.settings.request_memory_chars
        memory, memory_partial = bounded_sections(text_of(root, MEMORY_FILE), budget)
        insights, insights_partial = bounded_sections(text_of(root, INSIGHTS_FILE), budget)
        chunk = state.chunk_of(state.load_progress(root), record)
        return ConsolidationMaterial(
            routing_mode=self.settings.routing_mode,
            today=date.today().isoformat(),
            memory=memory,
            memory_truncated=bool(memory_partial),
            insights=insights,
            insights_truncated=bool(insights_partial),
            daily_notes=notes,
            open_questions=self._open_questions(wr),
            retry=chunk.get("retry") if chunk.get("status") == "retry" else None,
            compact=record.get("compact"),
        )

    def _open_questions(self, wr: WorkspaceRules) -> list[str]:
        found = [f"{q.key}: keep {q.old!r} or change to {q.new!r}?" for q in policy.questions.open_questions(wr.root)]
        start = entries.window_start(date.today(), self.settings.recent_days)
        prefix = "- Open Questions: "
        for rel in entries.daily_files(wr.root, since=start):
            for line in (entries.read(wr.root, rel) or "").splitlines():
                if line.startswith(prefix) and line[len(prefix) :].strip() not in found:
                    found.append(line[len(prefix) :].strip())
        return found[-OPEN_QUESTIONS_MAX:]

    def started(self, wr: WorkspaceRules, request_id: str, record: dict[str, Any]) -> None:
        progress = state.load_progress(wr.root)
        chunk = progress["chunks"].get(request_id, {})
        if chunk.get("status") in ("retry", "applied") and progress.get("batch_id") == record["batch_id"]:
            return  # the retry reason stays until an answer is applied
        state.chunk_record(progress, request_id, record, "handed_out", ids.iso(datetime.now()))
        state.write_progress(wr.root, progress)

    # --- apply --------------------------------------------------------------------------------------------

    def plan(
        self,
        wr: WorkspaceRules,
        raw: dict[str, Any],
        request_id: str,
        record: dict[str, Any],
        now: str,
        dry_run: bool,
    ) -> CuratorPlan | None:
        if not record.get("entries") and all(raw.get(f) is None for f in FIELDS):
            return None
        root = wr.root
        progress = state.load_progress(root)
        chunk = progress["chunks"].get(request_id, {})
        used = (raw.get("provenance_summary") or {}).get("observation_ids_used") or []
        run = steps.Run(
            raw=raw,
            now=datetime.now(),
            mode=self.settings.routing_mode,
            retried=chunk.get("status") == "retry",
            cited=[i for i in used if isinstance(i, str)],
            unseen={},
            policy=self.settings,
        )
        budget = self.settings.request_memory_chars
        steps.normalize(run)
        for target, update in run.updates.items():
            update.current = text_of(root, TARGET_FILES[target])
            run.unseen[target] = bounded_sections(update.current, budget)[1]
        if record.get("compact"):  # archived days into HISTORY.md: no daily sections, a history line needed
            _compact_check(run)
        else:
            steps.route(run)
        if run.refused is not None:
            self._refuse_routing(wr, run, request_id, record, dry_run)
        steps.sanitize(run)
        steps.guard(run)
        held = [{"target": u.target, "outcome": u.outcome, "reason": u.held} for u in run.updates.values() if u.held]
        if held:
            if not dry_run:
                run.daily_entries, run.history = [], None  # held: nothing of it is written
                rows.write(root, ids.new_id("held"), run, [])
            raise AppError(
                "MEMORY_GUARD_HELD",
                f"{held[0]['target']}: {held[0]['reason']}; nothing was written",
                held=held,
            )
        texts = steps.merge(run)
        plan = self._writes(wr, run, texts, request_id, record, progress, now)
        self._replay(wr, run, plan, dry_run)
        plan.answer["counters"] = {step: dict(c) for step, c in sorted(run.counters.items())}
        return plan

    def _replay(self, wr: WorkspaceRules, run: steps.Run, plan: CuratorPlan, dry_run: bool) -> None:
        """The replay check (h-audit's): the recent prompts whose recalled answers were injected, replayed against
        the Markdown files as this change would leave them; an answer found now and not then holds the apply."""
        would_be = {
            w.path: w.content.decode("utf-8") for w in plan.writes if w.path.endswith(".md") and w.content is not None
        }
        if not would_be:
            return
        verdict = replay.replay_check(
            wr.root,
            would_be,
            keep=self.replay_keep,
            top_k=self.settings.replay_top_k,
            enabled=self.settings.replay_check,
        )
        run.count("replay", "checked", verdict.checked)
        if not verdict.held:
            return
        lost = [
            {"query": a.query[:200], "path": a.path, "start_line": a.start_line, "item_id": a.item_id}
            for a in verdict.lost[:20]
        ]
        reason = f"replay check: {len(verdict.lost)} recalled answer(s) would no longer be found"
        for update in run.updates.values():
            update.held, update.outcome = reason, "guard_rejected"
        if not dry_run:
            run.daily_entries, run.history = [], None
            rows.write(wr.root, ids.new_id("held"), run, [])
        raise AppError(
            "MEMORY_GUARD_HELD",
            f"{reason}; nothing was written",
            hint="error.data.lost lists them (prompt, path, line): answer again keeping what they need, or turn "
            "the check off for this workspace with replay_check: false.",
            held=[{"target": "replay", "outcome": "guard_rejected", "reason": reason}],
            lost=lost,
        )

    def _refuse_routing(
        self, wr: WorkspaceRules, run: steps.Run, request_id: str, record: dict[str, Any], dry_run: bool
    ) -> None:
        if not dry_run:
            progress = state.load_progress(wr.root)
            state.chunk_record(progress, request_id, record, "retry", ids.iso(datetime.now()))
            progress["chunks"][request_id]["retry"] = run.refused
            state.write_progress(wr.root, progress)
            rows.routing_row(wr.root, ids.new_id("refused"), run, 0)
        again = " (preferred: the next answer to this request falls back if it lacks them too)"
        raise AppError(
            "MEMORY_DAILY_SECTIONS_REQUIRED",
            f"{run.refused}; routing mode {run.mode}" + (again if run.mode == "preferred" else ""),
            mode=run.mode,
            reason=run.refused,
        )

    def _writes(
        self,
        wr: WorkspaceRules,
        run: steps.Run,
        texts: dict[steps.Target, str],
        request_id: str,
        record: dict[str, Any],
        progress: dict[str, Any],
        now: str,
    ) -> CuratorPlan:
        """The write step: every file of the consolidation as FileWrites of one change."""
        root = wr.root
        plan = CuratorPlan()
        for target, text in texts.items():
            plan.writes.append(journal.FileWrite(TARGET_FILES[target], text.encode("utf-8"), {"target": target}))
        marked: dict[str, list[str]] = defaultdict(list)
        for composite in record.get("entries", []):
            path, _, entry = composite.partition("#")
            marked[path].append(entry)
        daily_rel = f"memory/{run.today}.md"
        if run.daily_text:
            current = entries.read(root, daily_rel) if journal.read_bytes(root, daily_rel, FILE_MAX_BYTES) else None
            content = entries.appended(current, run.today, run.daily_text)
            plan.writes.append(journal.FileWrite(daily_rel, content.encode("utf-8"), {"target": "daily"}))
            marked[daily_rel] += [entries.entry_id(daily_rel, h, t) for h, t in run.daily_entries]
        compacted = [str(p) for p in record.get("compact") or []]
        if run.history is not None:
            history = text_of(root, HISTORY_FILE)
            if history and not history.endswith("\n"):
                history += "\n"
            days = f"(archive {_day(compacted[0])} … {_day(compacted[-1])}) " if compacted else ""
            line = f"- [{run.now.strftime('%Y-%m-%d %H:%M')}] {days}{run.history}\n"
            plan.writes.append(journal.FileWrite(HISTORY_FILE, (history + line).encode("utf-8"), {"target": "history"}))
        curated = curated_items.write(root, run, request_id, now)
        if curated is not None:
            plan.writes.append(curated)
        existing = {rel for rel in entries.daily_files(root, since=None)} | {daily_rel}
        consolidated = state.consolidated_write(state.load_consolidated(root), marked, existing)
        if consolidated != journal.read_bytes(root, state.CONSOLIDATED_FILE, state.MAX_BYTES):
            plan.writes.append(journal.FileWrite(state.CONSOLIDATED_FILE, consolidated, {"target": "bookkeeping"}))
        if compacted:
            done = compact.load_compacted(root)
            plan.writes.append(
                journal.FileWrite(
                    compact.COMPACTED_FILE, compact.compacted_write(done, compacted), {"target": "compact"}
                )
            )
        state.chunk_record(progress, request_id, record, "applied", now)
        progress["chunks"][request_id].pop("retry", None)
        plan.bookkeeping.append(journal.FileWrite(state.PROGRESS_FILE, state.dumps(progress), record=False))
        outcomes = rows.outcomes(run)
        entry_count = sum(len(v) for v in marked.values()) - len(run.daily_entries)
        plan.entry = {
            "kind": "compact" if compacted else "consolidate",
            "entries": entry_count,
            "routing": run.routing,
            "outcomes": {t: o["outcome"] for t, o in outcomes.items()},
        }
        plan.answer = {
            "targets": outcomes,
            "routing": {"mode": run.mode, "result": run.routing, "sections": len(run.daily_entries)},
            "entries_consolidated": entry_count,
            "counters": {step: dict(c) for step, c in sorted(run.counters.items())},
        }
        if compacted:
            plan.entry["files"] = compacted
            files = [{"path": p, "bytes": len(journal.read_bytes(root, p, FILE_MAX_BYTES) or b"")} for p in compacted]

            def after(run_id: str) -> None:
                rows.write(root, run_id, run, [], outcomes)
                compact.row(root, run_id, False, files)

            plan.after = after
        else:
            plan.after = lambda run_id: rows.write(root, run_id, run, run.daily_entries, outcomes)
        return plan


def _day(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".md")


def _compact_check(run: steps.Run) -> None:
    """A compaction's answer must carry the history line it exists for."""
    if run.history is None:
        raise AppError(
            "MEMORY_COMPILE_INVALID",
            "1 violation(s); nothing was written",
            violations=[{"pointer": "/history_entry", "reason": "a compaction's answer needs a history_entry"}],
            count=1,
        )
