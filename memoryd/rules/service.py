"""Evidence to rules per workspace: observe, compile prepare/apply, resolve, audit and review (seed 000).

One ``WorkspaceRules`` per registered workspace: its evidence store, its rule set (with the resolve cache) and a
write lock. Nothing here touches another workspace. Every multi-file change goes through ``journal.commit`` (backups,
intent journal, atomic writes, history), so a crash at any point is repaired on the next start. Blocking work runs in
worker threads. This module holds the lifecycle, observe, resolve, status and validate; the bodies of the changing
methods live in ``changes``, those of the read-only review methods in ``review``.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc
import orjson
import structlog

from memoryd import ids
from memoryd.errors import AppError
from memoryd.fsio import append_line, member
from memoryd.notes.api import ValidationProblem
from memoryd.notes.daily import strip_private, strip_private_value
from memoryd.rules import api as m
from memoryd.rules import apply as compile_apply
from memoryd.rules import candidates as candidate_moves
from memoryd.rules import changeview, handedit, journal, review, undo
from memoryd.rules import compile as comp
from memoryd.rules import prepare as compile_prepare
from memoryd.rules.evidence import EvidenceStore, file_of
from memoryd.rules.extension import Curator
from memoryd.rules.fwrange import FwRangeError
from memoryd.rules.models import Observation, unrecommended
from memoryd.rules.ruleset import RuleSet
from memoryd.rules.workspace import WorkspaceRules
from memoryd.settings import RulesSettings
from memoryd.tasks import task
from memoryd.workspaces import Workspace

_T = TypeVar("_T")
log = structlog.get_logger("memoryd.rules")


_LINE = re.compile(r"line (\d+): ")
Severity = Literal["error", "warning"]


class RulesService:
    def __init__(self, settings: RulesSettings, *, watched: bool) -> None:
        """``watched``: a watcher reports hand edits of rule files (the watch setting); without one, resolve looks
        at the files every time."""
        self.settings = settings
        self.watched = watched
        self._by_id: dict[str, WorkspaceRules] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    def attach(self, ws: Workspace, *, recover: bool = True) -> WorkspaceRules:
        """Keep this workspace's rules and evidence; open them (in the background once started): finish what a
        crash left in the intent journal when ``recover`` (this daemon holds the write lock), then load."""
        existing = self._by_id.get(ws.id)
        if existing is not None:
            return existing
        wr = WorkspaceRules(ws, EvidenceStore(ws.path), RuleSet(ws.path, self.settings.max_file_bytes))
        wr.recover_on_open = recover
        self._by_id[ws.id] = wr
        if self._tg is not None:
            self._tg.start_soon(task("rules_open", self._open, wr, workspace_id=ws.id))
        return wr

    def detach(self, ws: Workspace) -> None:
        self._by_id.pop(ws.id, None)

    async def _open(self, wr: WorkspaceRules) -> None:
        """Finish changes a crash interrupted, then load rules and evidence."""

        def work() -> None:
            if wr.recover_on_open:
                wr.recovered = journal.recover(wr.root)
            wr.rules.reload()
            wr.evidence.refresh()

        try:
            async with wr.lock:
                await anyio.to_thread.run_sync(work)
        except Exception as exc:
            wr.open_error = type(exc).__name__
            log.exception("rules_open_failed", workspace_id=wr.ws.id)
        finally:
            wr.opened.set()

    async def recover(self, ws: Workspace) -> None:
        """This daemon just took the workspace's write lock over: finish what a crashed holder left in its
        intent journal before the first write."""
        wr = await self._ready(ws)
        async with wr.lock:
            recovered = await anyio.to_thread.run_sync(journal.recover, wr.root)
            if recovered:
                wr.recovered += recovered
                await anyio.to_thread.run_sync(wr.rules.reload)

    async def _ready(self, ws: Workspace) -> WorkspaceRules:
        wr = self._by_id.get(ws.id) or self.attach(ws)
        if self._tg is None and not wr.opened.is_set():
            await self._open(wr)
        await wr.opened.wait()
        if wr.open_error is not None:
            raise AppError(
                "MEMORY_READ_FAILED",
                f"The rules of this workspace could not be loaded ({wr.open_error})",
                hint="See the daemon log; check permissions of spec/memory and data/memory.",
            )
        return wr

    async def files_changed(self, ws: Workspace, paths: list[str] | None) -> float | None:
        """The watcher saw rule files change (a hand edit, git): reload them now, so resolve is current.
        None: a rescan of every rule file (the periodic safety net, and once the watcher is armed); it waits for
        the rules' first load, which may have read the tree before files the watcher never reported arrived.
        Hand edits are recorded (history and a backup; the file is left as it was saved). Answers in how many seconds
        to look again when some edits were too fresh to record (a person saving twice in a row makes one revision),
        else None."""
        wr = self._by_id.get(ws.id)
        if wr is not None and paths is None and self._tg is not None:
            await wr.opened.wait()  # set by _open, which the task group runs, whatever happens
        if wr is None or not wr.opened.is_set() or wr.open_error:
            return None
        changed = await anyio.to_thread.run_sync(wr.rules.reload, paths)
        log.info(
            "rules_reloaded",
            workspace_id=ws.id,
            paths=None if paths is None else paths[:50],
            changed=changed,
            generation=wr.rules.generation,
        )
        if not wr.rules.hand_edits:
            return None
        # recorded in history only: the file is as the person saved it, and the watcher's report indexed that
        await self._locked(ws, lambda w: handedit.record(w, handedit.QUIET_S))
        return handedit.QUIET_S if wr.rules.hand_edits else None

    async def locked(self, ws: Workspace, work: Callable[[WorkspaceRules], _T]) -> _T:
        """Run ``work`` (blocking: journal writes) in a worker thread holding the workspace's write lock: for a
        change another domain makes through the journal (curation: an answered question, a lifecycle run) — one
        change at a time per workspace. ``wr.reporter(op)`` gives ``journal.commit`` a progress status shows."""
        return await self._locked(ws, work)

    async def _locked(self, ws: Workspace, work: Callable[[WorkspaceRules], _T]) -> _T:
        wr = await self._ready(ws)
        async with wr.lock:
            try:
                return await anyio.to_thread.run_sync(work, wr)
            except OSError as exc:  # a full disk, a read-only file system: the journal finishes or undoes it
                log.warning("change_failed", workspace_id=ws.id, error=errno.errorcode.get(exc.errno or 0, "?"))
                raise AppError(
                    "MEMORY_WRITE_FAILED",
                    f"Cannot write the change: {exc.strerror or exc}",
                    hint="Free space (or fix permissions) and run it again: a change cut short is finished or "
                    "undone from its journal before the next one.",
                ) from exc
            finally:
                wr.progress = None

    # --- observe ------------------------------------------------------------------------------------------

    async def observe(
        self,
        ws: Workspace,
        kind: str,
        text: str,
        source: str,
        *,
        run_id: str | None = None,
        model_id: str | None = None,
        fw_version: str | None = None,
        tags: list[str] | None = None,
        data: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> m.ObserveResult:
        text = strip_private(text)
        if not text.strip():
            raise AppError("MEMORY_EMPTY")
        observation_id = ids.new_id("obs")
        record = Observation(
            observation_id=observation_id,
            ts=ids.iso(ids.id_time(observation_id)),
            kind=kind,
            text=text,
            source=strip_private(source),
            run_id=run_id,
            model_id=model_id,
            fw_version=fw_version,
            tags=None if tags is None else [strip_private(t) for t in tags],
            data=None if data is None else strip_private_value(data),
        )
        line = orjson.dumps(record.model_dump(exclude_none=True)) + b"\n"
        if len(line) > self.settings.observe_max_bytes:
            raise AppError(
                "MEMORY_TOO_LARGE",
                f"Observation is {len(line)} bytes; the limit is {self.settings.observe_max_bytes}",
                limit=self.settings.observe_max_bytes,
            )
        rel = file_of(run_id)
        if dry_run:
            return m.ObserveResult(observation_id=observation_id, ts=record.ts, path=rel, dry_run=True)
        wr = await self._ready(ws)

        def write() -> None:
            target = member(wr.root, rel)
            try:
                append_line(target, line, root=wr.root)
            except OSError as exc:
                raise AppError("MEMORY_WRITE_FAILED", f"Cannot append to {rel}: {exc.strerror}") from exc

        await anyio.to_thread.run_sync(write)
        log.info("observed", workspace_id=ws.id, path=rel, kind=kind, text_length=len(text))
        return m.ObserveResult(observation_id=observation_id, ts=record.ts, path=rel)

    # --- compile.prepare and compile.apply ----------------------------------------------------------------

    async def prepare(
        self,
        ws: Workspace,
        *,
        run_id: str | None = None,
        model_id: str | None = None,
        since: str | None = None,
        restart: bool = False,
        curator: Curator | None = None,
    ) -> m.PrepareResult:
        return await self._locked(
            ws,
            lambda wr: compile_prepare.prepare(
                self.settings, wr, run_id=run_id, model_id=model_id, since=since, restart=restart, curator=curator
            ),
        )

    async def apply(
        self,
        ws: Workspace,
        *,
        response: dict[str, Any] | None = None,
        path: str | None = None,
        dry_run: bool = False,
        curator: Curator | None = None,
    ) -> m.ApplyResult:
        return await self._locked(
            ws,
            lambda wr: compile_apply.apply(
                self.settings, wr, response=response, path=path, dry_run=dry_run, curator=curator
            ),
        )

    # --- forget / restore -------------------------------------------------------------------------------

    async def forget(self, ws: Workspace, item_id: str, reason: str | None = None) -> m.ForgetResult:
        result = await self._locked(ws, lambda wr: undo.forget(wr, item_id, reason))
        log.info("item_forgotten", workspace_id=ws.id, run_id=result.run_id)
        return result

    async def restore(
        self, ws: Workspace, run_id: str, reason: str | None = None, dry_run: bool = False
    ) -> m.RestoreResult:
        result = await self._locked(ws, lambda wr: undo.restore(wr, run_id, reason, dry_run))
        if dry_run:
            return result
        log.info("change_restored", workspace_id=ws.id, run_id=result.run_id, restored=result.restored)
        return result

    # --- resolve ------------------------------------------------------------------------------------------

    async def resolve(
        self, ws: Workspace, model_id: str, fw_version: str, instance_id: str | None = None
    ) -> m.ResolveResult:
        wr = await self._ready(ws)
        rules = wr.rules
        if not self.watched:  # no watcher to report hand edits: look at the files every time
            await anyio.to_thread.run_sync(rules.reload)
        try:
            answer = rules.resolve(model_id, fw_version, instance_id)  # cached per rule-set generation
        except FwRangeError as exc:
            raise AppError("MEMORY_VERSION_INVALID", str(exc)) from exc
        return m.ResolveResult(
            model_id=model_id,
            fw_version=fw_version,
            instance_id=instance_id,
            facts=answer.facts,
            trace=answer.trace,
            rules=answer.rules,
            generation=answer.generation,
            errors=rules.errors(),
        )

    # --- audit and review ---------------------------------------------------------------------------------

    async def _read(self, ws: Workspace, work: Callable[[WorkspaceRules], _T]) -> _T:
        """A read-only review call: in a worker thread (they scan every rule or read files), without the lock.
        It waits for a change under way to finish first: a change writes its history line before the rule set
        reloads, so a read in between would show a rule older than the history that lists its revision."""
        wr = await self._ready(ws)
        async with wr.lock:
            pass
        return await anyio.to_thread.run_sync(work, wr)

    async def search(
        self,
        ws: Workspace,
        *,
        model_id: str | None = None,
        fw_version: str | None = None,
        query: str | None = None,
        layer: m.Layer | None = None,
        limit: int = 50,
    ) -> m.RulesSearchResult:
        return await self._read(
            ws,
            lambda wr: review.search(
                wr, model_id=model_id, fw_version=fw_version, query=query, layer=layer, limit=limit
            ),
        )

    async def show(self, ws: Workspace, rule_id: str, layer: m.Layer | None = None) -> m.RulesShowResult:
        return await self._read(ws, lambda wr: review.show(wr, rule_id, layer))

    async def diff(
        self, ws: Workspace, rule_id: str, from_rev: int, to_rev: int | None = None, layer: m.Layer | None = None
    ) -> m.RulesDiffResult:
        return await self._read(ws, lambda wr: review.diff(wr, rule_id, from_rev, to_rev, layer))

    async def timeline(
        self,
        ws: Workspace,
        *,
        since: str | None = None,
        until: str | None = None,
        run_id: str | None = None,
        limit: int = 50,
        types: Sequence[str] | None = None,
    ) -> m.TimelineResult:
        return await self._read(
            ws, lambda wr: review.timeline(wr, since=since, until=until, run_id=run_id, limit=limit, types=types)
        )

    async def items(self, ws: Workspace, path: str | None, offset: int, limit: int) -> m.ItemsResult:
        return await self._read(ws, lambda wr: changeview.items(wr, path, offset, limit))

    async def show_change(self, ws: Workspace, run_id: str) -> m.ChangeShowResult:
        return await self._read(ws, lambda wr: changeview.show(wr, run_id))

    async def candidates(self, ws: Workspace, model_id: str | None = None) -> m.CandidatesListResult:
        return await self._read(ws, lambda wr: review.candidates(wr, model_id))

    async def move_candidate(
        self,
        ws: Workspace,
        rule_id: str,
        action: Literal["promote", "reject"],
        *,
        model_id: str | None = None,
        reason: str | None = None,
        dry_run: bool = False,
    ) -> m.CandidateMoveResult:
        return await self._locked(
            ws,
            lambda wr: candidate_moves.move(wr, rule_id, action, model_id=model_id, reason=reason, dry_run=dry_run),
        )

    # --- status and validate ------------------------------------------------------------------------------

    async def status(self, ws: Workspace, curator: Curator | None = None) -> m.RulesStatus | None:
        """``curator``: counts the daily notes a consolidation would gather too (the Stop hook's nudge)."""
        wr = self._by_id.get(ws.id) or self.attach(ws)
        with anyio.move_on_after(5):
            await wr.opened.wait()
        if not wr.opened.is_set():
            return None

        def work() -> m.RulesStatus:
            progress = wr.progress
            wr.evidence.refresh()
            state = comp.load_state(journal.read_bytes(wr.root, comp.STATE_FILE))
            layers = {"profile": 0, "override": 0, "candidate": 0}
            for loaded in wr.rules.all():
                layers[loaded.layer] += 1
            return m.RulesStatus(
                profiles=layers["profile"],
                overrides=layers["override"],
                candidates=layers["candidate"],
                observations=len(wr.evidence),
                uncompiled_observations=comp.uncompiled(state, wr.evidence),
                unconsolidated_notes=_unconsolidated(wr, curator),
                outstanding_requests=sum(1 for r in state["requests"].values() if r["status"] == "outstanding"),
                generation=wr.rules.generation,
                errors=wr.rules.errors() + wr.evidence.problems() + journal.history_problems(wr.root),
                recovered=wr.recovered,
                error=wr.open_error,
                change=None
                if progress is None
                else m.ChangeProgress(op=progress[0], done=progress[1], total=progress[2]),
            )

        return await anyio.to_thread.run_sync(work)

    async def validate(self, ws: Workspace) -> list[ValidationProblem]:
        wr = await self._ready(ws)

        def work() -> list[ValidationProblem]:
            wr.rules.reload()
            wr.evidence.refresh()
            problems: list[ValidationProblem] = []

            def add(severity: Severity, path: str, message: str, line: int | None = None) -> None:
                problems.append(ValidationProblem(severity=severity, path=path, line=line, message=message))

            skipped = wr.evidence.problems() + journal.history_problems(wr.root)
            found: list[str]
            severity: Severity
            for severity, found in (("error", wr.rules.errors()), ("warning", skipped)):
                for problem in found:  # "path: what is wrong" or "path: line N: what is wrong"
                    path, _, message = problem.partition(": ")
                    number = _LINE.match(message)
                    if number is not None:
                        add(severity, path, message[number.end() :], int(number.group(1)))
                    else:
                        add(severity, path, message or problem)
            for loaded in wr.rules.all():
                odd = unrecommended(loaded.rule.facts)
                if odd:
                    add(
                        "warning",
                        loaded.path,
                        f"{loaded.rule_id}: facts outside the recommended prefixes: {', '.join(odd)}",
                    )
                for oid in loaded.rule.provenance.observation_ids:
                    if oid not in wr.evidence:
                        add("warning", loaded.path, f"{loaded.rule_id}: provenance cites unknown observation {oid}")
            return problems

        return await anyio.to_thread.run_sync(work)


def _unconsolidated(wr: WorkspaceRules, curator: Curator | None) -> int:
    """Daily entries no consolidation has covered yet — those an outstanding request holds included, as the
    observations are: a request prepared and never applied (refused, declined) is handed out again by the next
    prepare, so the Stop nudge keeps asking until an apply covers them."""
    return 0 if curator is None else curator.unconsolidated(wr)
