"""Open questions: preference conflicts left to the user (``curate.conflict_resolution: ask_user``;
docs/reference/curation.md, "Conflicts").

``data/memory/observability/questions.jsonl`` is append-only: an ``asked`` row when a consolidation met the
conflict (the key and both values: the one file here that keeps memory text, because the question must say it),
an ``answered`` row when ``memoryctl answer <question_id> old|new|both`` settled it. A question is open from its
``asked`` row to its ``answered`` row; ``context.dynamic`` shows the open ones. Its id comes from the key and the
two values, so meeting the same conflict again asks nothing new (also after an answer: the user has said).

The file is read within ``READ_MAX_BYTES`` (a larger one: its last ``READ_MAX_BYTES``), line by line; a line that
is not a valid row (torn, crafted) is skipped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

import orjson
import structlog
from pydantic import Field, ValidationError

from memoryd import fsio, ids
from memoryd.curate import conflicts, patterns
from memoryd.curate.outcomes import OBSERVABILITY_DIR, RUN_ID, Row, Target, utc_now
from memoryd.errors import AppError
from memoryd.models import Wire
from memoryd.notes.daily import strip_private
from memoryd.rules import journal

log = structlog.get_logger("memoryd.curate")

QUESTIONS_FILE = f"{OBSERVABILITY_DIR}/questions.jsonl"
READ_MAX_BYTES = 4 * 1024 * 1024
OPEN_MAX = 20  # open questions kept (the newest); context shows at most SHOWN_MAX of them
SHOWN_MAX = 3
VALUE_MAX = 300  # characters of a key or value a question keeps
FILES: dict[str, str] = {"memory": "memory/MEMORY.md", "insights": "memory/INSIGHTS.md"}
QUESTION_ID = r"^q_[0-9a-f]{12}$"
Answer = Literal["old", "new", "both"]


class QuestionRow(Row):
    """One line of ``questions.jsonl``."""

    ts: str = Field(default_factory=utc_now)
    kind: Literal["asked", "answered"]
    question_id: str = Field(pattern=QUESTION_ID)
    run_id: str | None = Field(None, pattern=RUN_ID, description="asked: the consolidation; answered: its change.")
    target: Target = "memory"
    key: str = Field("", max_length=VALUE_MAX)
    old: str = Field("", max_length=VALUE_MAX)
    new: str = Field("", max_length=VALUE_MAX)
    answer: Answer | None = None


class OpenQuestion(Wire):
    """A preference conflict waiting for the user (context.dynamic shows it)."""

    question_id: str
    target: Target = Field(description="The file the preference is in: memory (MEMORY.md) or insights.")
    key: str
    old: str = Field(description="The value the file holds (kept until the answer).")
    new: str = Field(description="The value a consolidation proposed.")


def question_id(key: str, old: str, new: str) -> str:
    seed = "\x00".join((conflicts.norm_key(key), conflicts.norm_value(old), conflicts.norm_value(new)))
    return "q_" + hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def rows(root: Path) -> list[QuestionRow]:
    """The valid rows of the workspace's questions.jsonl, oldest first ([] when it is missing or unreadable)."""
    path = fsio.member(root, QUESTIONS_FILE)
    try:
        data = fsio.read_regular(path, READ_MAX_BYTES, root=root)
    except fsio.FileTooLarge as exc:
        data = fsio.read_range(path, exc.size - READ_MAX_BYTES, READ_MAX_BYTES, root=root)
        data = data[data.find(b"\n") + 1 :]  # the first line is cut: skipped
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:  # a FIFO, a symlink, a directory a clone put there: no questions, logged
        log.warning("questions_unreadable", error=type(exc).__name__)
        return []
    out: list[QuestionRow] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            out.append(QuestionRow.model_validate(orjson.loads(line)))
        except (orjson.JSONDecodeError, ValidationError, TypeError):
            continue
    return out


def open_questions(root: Path) -> list[OpenQuestion]:
    """Asked and not answered, newest last (at most OPEN_MAX)."""
    asked: dict[str, QuestionRow] = {}
    answered: set[str] = set()
    for row in rows(root):
        if row.kind == "asked":
            asked.setdefault(row.question_id, row)
        else:
            answered.add(row.question_id)
    waiting = [r for qid, r in asked.items() if qid not in answered][-OPEN_MAX:]
    return [OpenQuestion(question_id=r.question_id, target=r.target, key=r.key, old=r.old, new=r.new) for r in waiting]


def ask(root: Path, run_id: str, target: Target, asked: list[conflicts.Conflict]) -> list[str]:
    """Record the ask_user conflicts of one update as questions; returns the ids of those new (one never asked
    before). A value that looks like a secret (or is too long to ask about) is not recorded."""
    known = {row.question_id for row in rows(root) if row.kind == "asked"}
    added: list[str] = []
    for c in asked:
        key, old, new = (strip_private(v).strip() for v in (c.key, c.old, c.new))
        if not (key and old and new) or any(len(v) > VALUE_MAX or patterns.has_secret(v) for v in (key, old, new)):
            continue
        qid = question_id(key, old, new)
        if qid in known:
            continue
        known.add(qid)
        row = QuestionRow(kind="asked", question_id=qid, run_id=run_id, target=target, key=key, old=old, new=new)
        _append(root, row)
        added.append(qid)
    return added


@dataclass(frozen=True, slots=True)
class Answered:
    question_id: str
    answer: Answer
    run_id: str | None  # the change that wrote the answer into the file (None: no file changed)
    path: str | None  # that file
    applied: bool  # False: the old bullet is no longer in the file (edited since): only the answer is recorded


def answer(root: Path, qid: str, choice: Answer) -> Answered:
    """Settle an open question: ``old`` keeps the file as it is; ``new`` puts the proposed value in the old one's
    place; ``both`` keeps both, marked ``<!-- conflict: key -->``. A file change is one recorded change (its
    run_id: ``restore`` undoes it); the ``answered`` row closes the question either way. Run it holding the
    workspace's write lock."""
    question = next((q for q in open_questions(root) if q.question_id == qid), None)
    if question is None:
        raise AppError("MEMORY_QUESTION_NOT_FOUND", f"No open question {qid}")
    run_id = path = None
    applied = choice == "old"
    if choice != "old":
        path = FILES[question.target]
        before = journal.read_bytes(root, path)
        after = None if before is None else _answered_text(before.decode("utf-8", "replace"), question, choice)
        if before is not None and after is not None:
            run_id = ids.new_id("answer")
            entry = {"op": "answer", "ts": ids.iso(datetime.now()), "question_id": qid, "answer": choice}
            journal.commit(root, run_id, entry, [journal.FileWrite(path, after.encode("utf-8"), {"question": qid})])
            applied = True
    _append(root, QuestionRow(kind="answered", question_id=qid, run_id=run_id, answer=choice))
    return Answered(qid, choice, run_id, path if run_id else None, applied)


def _answered_text(text: str, q: OpenQuestion, choice: Answer) -> str | None:
    """The file with the answer in it, None when its bullet ``key: old`` is not there any more."""
    found = next(
        (
            p
            for p in conflicts.preferences(text, (q.key,))
            if conflicts.norm_value(p.value) == conflicts.norm_value(q.old)
        ),
        None,
    )
    if found is None:
        return None
    lines = text.split("\n")
    at = found.line - 1
    line = lines[at]
    where = line.rfind(found.value)
    proposed = line[:where] + q.new + line[where + len(found.value) :] if where >= 0 else f"- {q.key}: {q.new}"
    if choice == "new":
        lines[at] = proposed
    else:
        lines[at] = conflicts.marked(line, q.key)
        lines.insert(at + 1, conflicts.marked(proposed, q.key))
    return "\n".join(lines)


def _append(root: Path, row: QuestionRow) -> None:
    fsio.append_line(fsio.member(root, QUESTIONS_FILE), orjson.dumps(row.model_dump(mode="json")), root=root)
