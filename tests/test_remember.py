"""The write path of remember through the real daemon: forged structure, private spans, appends that cost the
same on a large daily file, concurrent writers grouped into one write, and index rows equal to a rebuild's."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from memoryd.notes import chunker, daily
from tests.conftest import Daemon

# Each spelling wraps the word SECRET; what follows the closing tag must stay.
PRIVATE_SPELLINGS = [
    ("<private>", "</private>"),
    ("<PRIVATE>", "</PRIVATE>"),
    ("<Private>", "</pRiVaTe>"),
    ("< private >", "</private>"),
    ("<private >", "</private >"),
    ("<private\n>", "</private\n>"),
    ("<private>", "</ private>"),
    ("<private>", "< / private >"),
    ('<private class="x">', "</private>"),
    ("<private\tnote='a b'>", "</private>"),
    ("<private><private>inner</private>", "</private>"),  # nested: the outer span runs to its own end
    ("\uff1cprivate\uff1e", "\uff1c/private\uff1e"),  # full-width brackets
    ("<private/>", "</private>"),
]
UNCLOSED = ["<private>", "< PRIVATE >", '<private id="1">', "<private\n>", "\uff1cprivate\uff1e"]


def today_file(ws_path: Path) -> Path:
    return ws_path / "memory" / f"{datetime.now().astimezone():%Y-%m-%d}.md"


@pytest.mark.parametrize("field", ["text", "reason", "followup"])
def test_private_spans_in_any_spelling_are_never_stored(
    daemon: Daemon, workspace: tuple[Path, str], field: str
) -> None:
    path, ws = workspace
    for n, (opening, closing) in enumerate(PRIVATE_SPELLINGS):
        value = f"kept{n}a {opening}SECRET{n} 机密{closing} kept{n}b"
        params = {"workspace": ws, "text": f"entry {n}", field: value}
        daemon.call("remember", params)
        stored = today_file(path).read_text()
        assert f"SECRET{n}" not in stored and "机密" not in stored, (opening, closing)
        assert f"kept{n}a" in stored and f"kept{n}b" in stored, (opening, closing)
        assert "private" not in stored.lower() and "\uff1c" not in stored
    for n, opening in enumerate(UNCLOSED):
        daemon.call("remember", {"workspace": ws, "text": f"open{n} ok", field: f"lead{n} {opening}TAIL{n}\nmore"})
        stored = today_file(path).read_text()
        assert f"lead{n}" in stored and f"TAIL{n}" not in stored and "\nmore" not in stored.split(f"lead{n}")[1]


def test_private_spans_in_any_spelling_are_never_observed(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    for n, (opening, closing) in enumerate(PRIVATE_SPELLINGS):
        daemon.call(
            "observe",
            {"workspace": ws, "kind": "log", "source": "pytest", "text": f"seen{n} {opening}SECRET{n}{closing} end"},
        )
    stored = (path / "data/memory/observations.jsonl").read_text()
    records = [json.loads(line) for line in stored.splitlines()]
    assert [r["text"] for r in records] == [f"seen{n}  end" for n in range(len(PRIVATE_SPELLINGS))]
    assert "SECRET" not in stored


def test_lookalike_tags_are_text() -> None:
    for text in ["<privately>x</privately>", "<privacy>", "a < private b", "private>", "<pri vate>x"]:
        assert daily.strip_private(text) == text


# Lines Markdown would read as a heading, a fence or a setext underline (each also after up to three spaces).
FORGED = [
    "## 2020-01-01 00:00 — decision",
    "# top",
    "### three",
    "###### six",
    "##",
    "## ",
    "##\tTab",
    " ## one space",
    "  ## two spaces",
    "   ## three spaces",
    "\t## tab",
    "```",
    "```python",
    "~~~",
    "~~~~ tilde",
    "   ```",
    "---",
    "===",
    "=",
    "-",
    "- ## in a bullet",
    "## 2020-01-01 — 中文标题",
]


def _structure(text: str) -> list[str]:
    """Headings the chunker finds, and lines a CommonMark reader would take as structure inside our bullets."""
    headings = [chunk.heading for chunk in chunker.chunk_markdown(text) if chunk.heading]
    suspicious = []
    for line in text.splitlines():
        body = line[2:] if line.startswith(("- ", "  ")) else line
        if line.startswith("## "):
            continue  # ours, checked by validate
        indent = len(body) - len(body.lstrip(" \t"))
        stripped = body.lstrip(" \t")
        if len(body[:indent].expandtabs(4)) < 4 and re.match(r"#{1,6}(?:[ \t]|$)|`{3}|~{3}|[=-]+\s*$", stripped):
            suspicious.append(line)
        if line.startswith("- ") and re.match(r"#{1,6}(?:[ \t]|$)|`{3}|~{3}", stripped):
            suspicious.append(line)
    return headings + suspicious


@pytest.mark.parametrize("position", ["first", "continuation", "reason"])
def test_forged_structure_is_stored_as_text(daemon: Daemon, workspace: tuple[Path, str], position: str) -> None:
    path, ws = workspace
    for n, forged in enumerate(FORGED):
        if position == "first":
            params = {"text": f"{forged} word{n}x\nafter{n}"}
        elif position == "continuation":
            params = {"text": f"intro{n}\n{forged} word{n}x\nafter{n}"}
        else:
            params = {"text": f"intro{n}", "reason": f"why{n}\n{forged} word{n}x\nafter{n}"}
        daemon.call("remember", {"workspace": ws, **params})
    text = today_file(path).read_text()
    headings = [c.heading for c in chunker.chunk_markdown(text) if c.heading]
    assert len(headings) == len(FORGED) + 1
    assert all(daily.ENTRY_HEADING.match(h) or daily.DAY_HEADING.match(h) for h in headings), headings
    assert [line for line in _structure(text) if not line.startswith("## ")] == []
    problems = daemon.call("validate", {"workspace": ws})["reports"][0]["problems"]
    assert [p for p in problems if p["path"].endswith(today_file(path).name)] == []
    for n in range(len(FORGED)):  # still searchable by its words, under the entry's own heading
        hits = daemon.call("search", {"workspace": ws, "query": f"word{n}x"})["hits"]
        assert hits and all(daily.ENTRY_HEADING.match(h["heading"]) for h in hits), (n, hits)


def test_escaping_keeps_the_text_readable() -> None:
    planned = daily.plan_entry(
        now=datetime(2026, 1, 2, 3, 4).astimezone(),
        kind="note",
        text="first\n## not a heading\n```\ncode",
        reason=None,
        followup=None,
        file_exists=True,
    )
    assert "\n  \\## not a heading\n  \\```\n  code\n" in planned.entry
