"""Render the dynamic part of ``context``: recent daily entries, newest first (when the prompt asks about the
past), then recalled passages, best first, within a budget in characters. Pure functions, no I/O."""

from __future__ import annotations

from memoryd.context.api import ContextItem, RecentNote
from memoryd.context.recent import Entry
from memoryd.curate.questions import OpenQuestion
from memoryd.text.passages import MARK

RECENT_SHARE = 60  # percent of the budget recent daily notes may take when there are recalled passages too
ENTRY_MAX = 1200  # characters of one daily entry's body; a longer one ends with "…" (`get` reads the rest)


def shown_in(stable_text: str, snippet: str) -> bool:
    """Whether every line of a recalled passage (its snippet: matched words marked, maybe cut with "…") is already in
    the stable text the host holds, so recalling it would only repeat it."""
    plain = stable_text.replace(MARK, "")
    lines = [line.strip().strip("…").strip() for line in snippet.replace(MARK, "").split("\n")]
    lines = [line for line in lines if line]
    return bool(lines) and all(line in plain for line in lines)


QUESTIONS_INTRO = (
    "A memory consolidation proposed a preference that differs from the one memory holds. Ask the user which "
    "holds, then settle it with `memoryctl answer <id> old|new|both` (old: keep what memory holds; new: replace "
    "it; both: keep both, marked)."
)
QUESTION_MAX = 300  # characters of one question's line


def questions_block(questions: list[OpenQuestion]) -> str:
    """The open questions as the agent reads them: what to ask, and how to record the answer."""
    lines = ["## Open questions for the user (memory)", QUESTIONS_INTRO]
    for q in questions:
        where = "MEMORY.md" if q.target == "memory" else "INSIGHTS.md"
        line = f"- {q.question_id}: {q.key} — {where} holds “{q.old}”, proposed “{q.new}”"
        lines.append(line if len(line) <= QUESTION_MAX else line[: QUESTION_MAX - 1] + "…")
    return "\n".join(lines)


def render(
    items: list[ContextItem], entries: list[Entry], budget: int, questions: str = ""
) -> tuple[str, list[ContextItem], list[RecentNote]]:
    """The text and what it holds: the open questions (``questions``, when they fit), then as many entries, then
    items (those not inside a shown entry), as fit in ``budget`` characters, whole."""
    out: list[str] = []
    used = 0
    if questions and len(questions) <= budget // 2:  # never more than half the room recall has
        out.append(questions)
        used = len(questions)
    shown_items: list[ContextItem] = []
    shown_recent: list[RecentNote] = []

    def add(block: str, limit: int = budget) -> bool:
        nonlocal used
        size = len(block) + (2 if out else 0)
        if used + size > limit:
            return False
        out.append(block)
        used += size
        return True

    # A prompt about the past is answered by the recent days first; recall then adds what they do not hold, in
    # the room RECENT_SHARE leaves it.
    recent_budget = used + (budget - used) * RECENT_SHARE // 100 if items else budget
    if entries and add("## Recent daily notes, newest first", recent_budget):
        for entry in entries:
            body = "\n".join(entry.body)
            if len(body) > ENTRY_MAX:
                body = body[: ENTRY_MAX - 1] + "…"
            if not add(f"### {entry.path}:{entry.start_line} — {entry.heading}\n{body}".rstrip(), recent_budget):
                break
            shown_recent.append(
                RecentNote(path=entry.path, start_line=entry.start_line, lines=entry.lines, heading=entry.heading)
            )
    if out and "\n" not in out[-1]:  # a heading with nothing under it
        used -= len(out.pop()) + (2 if out else 0)
    items = [i for i in items if not any(_inside(i, r) for r in shown_recent)]
    if items and add("## Recalled from memory for this prompt"):
        for item in items:
            heading = item.heading.lstrip("#").strip()
            title = f"### {item.path}:{item.start_line}" + (f" — {heading}" if heading else "")
            if not add(f"{title}\n{item.snippet.rstrip()}"):
                break
            shown_items.append(item)
    if out and "\n" not in out[-1]:
        out.pop()
    return "\n\n".join(out), shown_items, shown_recent


def _inside(item: ContextItem, note: RecentNote) -> bool:
    """Whether the recalled passage lies within a daily entry already shown."""
    return item.path == note.path and note.start_line <= item.start_line < note.start_line + note.lines
