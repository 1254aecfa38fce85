"""memorysections.merge3, the three-way merge git runs on memory files: never conflict markers, never a lost bullet
but one deliberately deleted, commutative on disjoint sections, and the identities git relies on."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from memorysections import merge3, parse

from tests.sections_text import BULLETS, documents, markdown, write

Doc = list[tuple[str, list[str]]]


def _pairs(text: str) -> dict[tuple[str | None, str], set[str]]:
    """(section title key, bullet key) → the bullet's raw texts."""
    out: dict[tuple[str | None, str], set[str]] = {}
    for section in parse(text).all_sections():
        for b in section.bullets:
            out.setdefault((section.key, b.key), set()).add(b.raw.removeprefix("\ufeff").rstrip("\r\n"))
    return out


def _lines(text: str) -> set[str]:
    """The lines of a text, and the lines a merge may add: a blank line before a section that now follows what
    ended a side's file, the line that closes a fence or a comment a side left open."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return {line.rstrip("\r").removeprefix("\ufeff") for line in lines} | CLOSERS


CLOSERS = {"", "```", "````", "~~~", "-->", "  ```", "  ````", "  ~~~", "  -->"}


def _check_nothing_lost(base: str, ours: str, theirs: str, result: str) -> None:
    """Every bullet of ours and theirs is in the result (in its section, by key), unless the other side deleted it
    and this side left it as the base had it. (A bullet may gain lines: an indented line of the other side that
    the merge puts right after it reads as the bullet's; its own lines are all still there, first.)"""
    b, o, t, r = _pairs(base), _pairs(ours), _pairs(theirs), _pairs(result)
    for side, other in ((o, t), (t, o)):
        for pair, raws in side.items():
            deliberately = pair in b and pair not in other and raws <= b[pair]
            grown = any(
                got.startswith(raw)
                for (title, _), gots in r.items()
                if title == pair[0]
                for got in gots
                for raw in raws
            )
            assert pair in r or deliberately or grown, pair


@settings(max_examples=300)
@given(markdown(), markdown())
def test_identities(base: str, x: str) -> None:
    assert merge3(base, x, x) == x
    assert merge3(base, base, x) == x
    assert merge3(base, x, base) == x


@settings(max_examples=400)
@given(markdown(max_lines=15), markdown(max_lines=15), markdown(max_lines=15))
def test_no_bullet_lost_and_no_line_invented(base: str, ours: str, theirs: str) -> None:
    result = merge3(base, ours, theirs)
    _check_nothing_lost(base, ours, theirs, result)
    assert _lines(result) <= _lines(ours) | _lines(theirs)  # so never a conflict marker of its own
    assert merge3(base, ours, theirs) == result  # deterministic


def _suffixed(text: str, suffix: str) -> str:
    """The bullet's first line with ``suffix`` (a fence's closing line must stay as it is)."""
    first, sep, rest = text.partition("\n")
    return first + suffix + sep + rest


@st.composite
def _edit(draw: st.DrawFn, doc: Doc, mine: set[str]) -> Doc:
    """The sections named in ``mine`` edited (bullets added, removed, changed; the section maybe deleted)."""
    out: Doc = []
    for title, items in doc:
        if title not in mine:
            out.append((title, list(items)))
            continue
        action = draw(st.sampled_from(["add", "remove", "change", "delete", "mixed"]))
        if action == "delete":
            continue
        items = list(items)
        if action in ("remove", "mixed") and items:
            del items[draw(st.integers(0, len(items) - 1))]
        if action in ("change", "mixed") and items:
            i = draw(st.integers(0, len(items) - 1))
            items[i] = _suffixed(items[i], " (changed)")
        if action in ("add", "mixed") or not items:
            items.insert(draw(st.integers(0, len(items))), _suffixed(draw(BULLETS), f" {title}"))
        out.append((title, items))
    return out


@settings(max_examples=300)
@given(st.data(), documents())
def test_commutative_on_disjoint_sections(data: st.DataObject, base_doc: Doc) -> None:
    titles = [t for t, _ in base_doc]
    ours_titles = set(data.draw(st.lists(st.sampled_from(titles), unique=True))) if titles else set()
    theirs_titles = set(titles) - ours_titles
    ours_doc = data.draw(_edit(base_doc, ours_titles))
    theirs_doc = data.draw(_edit(base_doc, theirs_titles))
    if data.draw(st.booleans()):
        ours_doc.append(("New on ours", ["fresh 新"]))
    base, ours, theirs = write(base_doc), write(ours_doc), write(theirs_doc)
    result = merge3(base, ours, theirs)
    assert result == merge3(base, theirs, ours)
    # and it is what applying both sides' edits gives
    mine = {t: items for t, items in ours_doc}
    other = {t: items for t, items in theirs_doc}
    expected: Doc = []
    for title, items in base_doc:
        side = mine if title in ours_titles else other if title in theirs_titles else None
        if side is None:
            expected.append((title, items))
        elif title in side:
            expected.append((title, side[title]))
    expected += [(t, items) for t, items in ours_doc if t not in dict(base_doc)]
    assert [s.title for s in parse(result).sections] == [t for t, _ in expected]
    assert result == write(expected)
    _check_nothing_lost(base, ours, theirs, result)


BASE = """# Memory

## Preferences
- 用中文回答
- use pnpm

## Project
- KX-200 talks 115200 baud
- the old flashing tool is gone
"""


def test_a_deliberate_forget_travels_and_an_edit_survives_a_delete() -> None:
    ours = BASE.replace("- the old flashing tool is gone\n", "")  # forgotten here
    theirs = BASE.replace("- use pnpm\n", "- use pnpm 9\n")  # edited there
    result = merge3(BASE, ours, theirs)
    assert "the old flashing tool" not in result and "- use pnpm 9\n" in result
    # deleted on one side, changed on the other: the change is kept
    changed = BASE.replace("- the old flashing tool is gone\n", "- the old flashing tool is gone (v2 still works)\n")
    assert "(v2 still works)" in merge3(BASE, ours, changed)


def test_both_sides_add_to_the_same_section_and_the_same_new_section() -> None:
    ours = BASE.replace("- use pnpm\n", "- use pnpm\n- 缩进用两个空格\n") + "\n## Tools\n- ripgrep\n"
    theirs = BASE.replace("- use pnpm\n", "- use pnpm\n- tabs in Makefiles\n") + "\n## tools\n- fd\n- ripgrep\n"
    result = merge3(BASE, ours, theirs)
    assert "- use pnpm\n- 缩进用两个空格\n- tabs in Makefiles\n" in result
    assert result.endswith("## Tools\n- ripgrep\n- fd\n")
    assert "<<<<<<<" not in result and "=======" not in result


def test_daily_files_both_appended() -> None:
    base = "## 2026-03-02\n\n## 2026-03-02 09:00 — note\n- started\n"
    ours = base + "\n## 2026-03-02 10:41 — decision\n- 串口超时改为重试三次\n"
    theirs = base + "\n## 2026-03-02 11:05 — event\n- flashed bench-3\n"
    result = merge3(base, ours, theirs)
    assert result == base + "\n## 2026-03-02 10:41 — decision\n- 串口超时改为重试三次\n" + (
        "\n## 2026-03-02 11:05 — event\n- flashed bench-3\n"
    )
    # both created the file (no base): one file with both entries, the day's heading once
    added = merge3("", "## 2026-03-03\n- a\n", "## 2026-03-03\n- b\n")
    assert added == "## 2026-03-03\n- a\n- b\n"


def test_line_endings_and_a_missing_final_newline() -> None:
    base = "## A\r\n- a\r\n"
    result = merge3(base, "## A\r\n- a\r\n- o", "## A\r\n- a\r\n- t\r\n")
    assert result == "## A\r\n- a\r\n- o\r\n- t\r\n"
    assert merge3("", "", "## B\n- b\n") == "## B\n- b\n"


def test_a_section_deleted_on_one_side_and_edited_on_the_other_is_kept() -> None:
    ours = BASE.replace("## Project\n- KX-200 talks 115200 baud\n- the old flashing tool is gone\n", "")
    theirs = BASE.replace("- KX-200 talks 115200 baud\n", "- KX-200 talks 921600 baud\n")
    result = merge3(BASE, ours, theirs)
    assert "921600" in result and "## Project" in result
    untouched = merge3(BASE, ours, BASE.replace("- 用中文回答\n", "- 用中文回答，简短\n"))
    assert "## Project" not in untouched and "简短" in untouched
