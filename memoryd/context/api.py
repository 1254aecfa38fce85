"""The context domain's answer: what ``context`` returns. Pydantic models defined in the domain (the service builds
them; ``methods/context.py`` registers the wire result made of them, so the generated schemas come from here)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from memoryd.curate.questions import OpenQuestion
from memoryd.models import Degraded, Wire


class StableSource(Wire):
    kind: Literal["rules", "memory"]
    path: str | None = Field(default=None, description="memory: the file, relative to the workspace.")
    rules: list[str] = Field(default_factory=list, description="rules: the matching rules, lowest precedence first.")
    sha256: str = Field(description="Of the source as read: the file's bytes, or the resolved facts as sorted JSON.")
    cut: bool = Field(description="True when some of this source was left out to fit the budget.")


class StableContext(Wire):
    text: str = Field(
        description="Resolved rules, then long-term memory (memory/MEMORY.md), rendered deterministically: the same "
        "files give the same bytes, whatever the prompt. At most the budget in characters; when something was left "
        "out, the last line says what."
    )
    sha256: str = Field(description="SHA-256 of text as UTF-8 (hex).")
    sources: list[StableSource]
    truncated: bool
    snapshot: Literal["none", "created", "reused"] = Field(
        default="none",
        description="With session_id: 'created' (rendered now and kept for the session) or 'reused' (the "
        "session's earlier bytes, whatever changed since); without: 'none'.",
    )


class ContextItem(Wire):
    path: str
    start_line: int
    lines: int
    heading: str
    snippet: str
    score: float


class RecentNote(Wire):
    path: str = Field(description="A daily file, memory/YYYY-MM-DD.md.")
    start_line: int
    lines: int
    heading: str = Field(description="The entry's heading (## YYYY-MM-DD HH:MM — type).")


class DynamicContext(Wire):
    text: str = Field(
        description="Open questions for the user (whatever the prompt), then recent daily notes and recalled "
        "passages (for query_text); empty without either."
    )
    items: list[ContextItem] = Field(description="The recalled passages, best first.")
    recent: list[RecentNote] = Field(
        default_factory=list, description="Daily entries added because the prompt asks about the past, newest first."
    )
    asks_about_past: bool = Field(default=False, description="What the past-reference trigger said of query_text.")
    degraded: Degraded | None = Field(
        default=None, description="Recall was incomplete or failed; stable is unaffected."
    )
    questions: list[OpenQuestion] | None = Field(
        default=None,
        description="Preference conflicts a consolidation left to the user (curate_conflict_resolution ask_user), "
        "oldest first, at most 3: text asks the agent to put them to the user and settle each with `memoryctl "
        "answer <question_id> old|new|both`. Absent when there are none.",
    )


class ContextResult(Wire):
    stable: StableContext
    dynamic: DynamicContext
