"""answer — settle an open question curation left to the user (a preference conflict under
curate_conflict_resolution ask_user; docs/reference/curation.md). Thin: the domain is memoryd/curate/questions.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from memoryd.curate import questions
from memoryd.methods.services import Ctx, Handlers, services
from memoryd.models import Wire, WorkspaceRef
from memoryd.rules.api import PlannedWrite


class AnswerParams(Wire):
    workspace: str = WorkspaceRef
    question_id: str = Field(pattern=questions.QUESTION_ID, description="From context's dynamic.questions.")
    answer: Literal["old", "new", "both"] = Field(
        description="old: keep what the file holds; new: the proposed value replaces it; both: keep both, marked "
        "<!-- conflict: key -->."
    )


class AnswerResult(Wire):
    question_id: str
    answer: Literal["old", "new", "both"]
    applied: bool = Field(
        description="False when the file no longer holds the old bullet (edited since): only the answer was recorded."
    )
    run_id: str | None = Field(
        default=None, description="The change that wrote the answer into the file (`restore` undoes it); None: none."
    )
    writes: list[PlannedWrite] = Field(default_factory=list)


def register(d: Handlers) -> None:
    @d.register("answer", AnswerParams, AnswerResult, writes=True)
    async def answer(ctx: Ctx, p: AnswerParams) -> AnswerResult:
        """Settle an open question (a preference conflict a consolidation left to the user): the question leaves
        context's dynamic part; `new` or `both` changes the file as one recorded change. MEMORY_QUESTION_NOT_FOUND
        when it is not open."""
        app = services(ctx)
        ws = await app.workspace(p.workspace, write=True)
        done = await app.rules.locked(ws, lambda wr: questions.answer(wr.root, p.question_id, p.answer))
        writes = [PlannedWrite(path=done.path, action="update")] if done.path else []
        result = AnswerResult(
            question_id=done.question_id, answer=done.answer, applied=done.applied, run_id=done.run_id, writes=writes
        )
        return await app.runtime.wrote(ws, result)
