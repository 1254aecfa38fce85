"""memorysections: parse/render is the identity on any text; the section structure it finds; the keys; the section
merge of an update into a memory file (union, duplicates, seen markers, [replace], kept sections, new sections)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from memorysections import bullet_key, bullets, merge, parse, render, title_key

from tests.sections_text import markdown

MEMORY = """# Memory

Notes the agent keeps. <!-- edited by hand -->

## User Preferences
- 用中文回答
- Use pnpm, never npm.
  (the lockfile is pnpm-lock.yaml)

## Project
- KX-200 talks 115200 baud

```text
## not a section
- not a bullet
```

## Empty

## Tools
- ripgrep <!-- seen: 2026-01-10 -->
"""


# --- parse / render ---------------------------------------------------------------------------------------------


@settings(max_examples=400)
@given(markdown())
def test_render_of_parse_is_the_identity_on_markdownish_text(text: str) -> None:
    assert render(parse(text)) == text


@settings(max_examples=300)
@given(st.text())
def test_render_of_parse_is_the_identity_on_any_text(text: str) -> None:
    assert render(parse(text)) == text


@settings(max_examples=300)
@given(markdown())
def test_each_section_read_alone_is_itself(text: str) -> None:
    """The headings found at once (parse) and the lines read one by one (a section's blocks) agree: a section's
    text parses to that one section, with nothing left open but at the end of the file."""
    doc = parse(text)
    for i, section in enumerate(doc.all_sections()):
        alone = parse(section.raw)
        assert len(alone.sections) == (0 if section.heading is None else 1)
        if i < len(doc.sections):
            assert alone.open_at_end == ""
        assert render(alone) == section.raw
        assert [b.raw for b in alone.all_sections()[-1].blocks] == [b.raw for b in section.blocks]


def _reference(text: str) -> tuple[list[str], str]:
    """The headings and what is left open at the end, read line by line as the format says (independently of
    parse's str.find scan): a fence or comment opens on a line that is not a heading (a bullet's text after its
    marker), a fence closes on a line of its character, at least as long; a comment on its first ``-->``."""
    headings, fence, comment = [], "", False
    lines = text.split("\n")
    for i, line in enumerate(lines):
        body = line.removesuffix("\r").removeprefix("\ufeff" if i == 0 else "")
        if fence:
            s = body.strip(" \t")
            fence = "" if len(s) >= len(fence) and set(s) == {fence[0]} else fence
        elif comment:
            if "-->" in body:
                rest = body[body.index("-->") + 3 :]
                comment = "<!--" in rest and "-->" not in rest[rest.rindex("<!--") + 4 :]
        elif re.match(r" {0,3}##([ \t]|$)", body):
            headings.append(line + ("\n" if i < len(lines) - 1 else ""))
        else:
            content = body[2:] if body[:2] in ("- ", "-\t", "* ", "*\t", "+ ", "+\t") else body
            opener = re.match(r"[ \t]*(`{3,}|~{3,})(.*)", content)
            if opener and not (opener.group(1)[0] == "`" and "`" in opener.group(2)):
                fence = opener.group(1)
            elif "<!--" in content:
                comment = "-->" not in content[content.rindex("<!--") + 4 :]
    return headings, fence or ("-->" if comment else "")


@settings(max_examples=500)
@given(markdown(max_lines=40))
def test_the_headings_are_those_a_line_by_line_reading_finds(text: str) -> None:
    doc = parse(text)
    assert ([s.heading for s in doc.sections], doc.open_at_end) == _reference(text)


def test_the_structure_found() -> None:
    doc = parse(MEMORY)
    assert [s.title for s in doc.sections] == ["User Preferences", "Project", "Empty", "Tools"]
    assert [b.lines[0] for b in doc.preamble.blocks] == [
        "# Memory\n",
        "\n",
        "Notes the agent keeps. <!-- edited by hand -->\n",
        "\n",
    ]
    prefs = doc.sections[0]
    assert [b.text for b in prefs.bullets] == ["用中文回答", "Use pnpm, never npm.\n  (the lockfile is pnpm-lock.yaml)"]
    project = doc.sections[1]
    assert [b.text for b in project.bullets] == ["KX-200 talks 115200 baud"]  # the fenced lines are lines
    assert [len(b.lines) for b in project.blocks if not b.bullet] == [1, 4, 1]  # the fence is one block
    assert doc.sections[2].blocks == [] or all(not b.bullet for b in doc.sections[2].blocks)
    assert doc.sections[3].bullets[0].seen == "2026-01-10"
    assert bullets(MEMORY)[0] == ("User Preferences", "用中文回答")
    assert len(bullets(MEMORY)) == 4


def test_crlf_bom_and_no_final_newline() -> None:
    text = "\ufeff## 偏好\r\n- 中文\r\n- tabs\r\n\r\n## Other\r\n- x"
    doc = parse(text)
    assert [s.title for s in doc.sections] == ["偏好", "Other"]
    assert [b.text for b in doc.sections[0].bullets] == ["中文", "tabs"]
    assert doc.sections[1].bullets[0].text == "x"
    assert doc.eol == "\r\n"
    assert render(doc) == text


def test_what_is_not_a_section_heading() -> None:
    text = "# one\n### three\n    ## four spaces\n##no space\n<!--\n## in a comment\n-->\n~~~\n## in a fence\n~~~\n"
    assert parse(text).sections == []
    assert [s.title for s in parse("##\n## x ##\n##\tt\n   ## y\n").sections] == ["", "x", "t", "y"]


def test_a_bullet_keeps_indented_lines_blank_lines_before_them_and_its_own_fence() -> None:
    text = "## A\n- one\n\n  more of one\n- two\n  ```\n## not a heading\n- nor a bullet\n  ```\n\nprose\n- three\n"
    section = parse(text).sections[0]
    assert [b.text.split("\n")[0] for b in section.bullets] == ["one", "two", "three"]
    assert section.bullets[0].text == "one\n\n  more of one"
    assert "## not a heading" in section.bullets[1].text


def test_duplicate_and_empty_sections_are_kept_apart() -> None:
    doc = parse("## A\n- a\n## a\n- b\n## B\n")
    assert [s.title for s in doc.sections] == ["A", "a", "B"]
    assert doc.sections[0].key == doc.sections[1].key
    assert doc.sections[2].blocks == []


def test_keys() -> None:
    assert (
        title_key("User Preferences") == title_key("user  preferences:") == title_key("ＵＳＥＲ Ｐｒｅｆｅｒｅｎｃｅｓ")
    )
    assert title_key("项目 约定") == title_key("项目约定")
    assert bullet_key("Use pnpm.") == bullet_key("use   pnpm") == bullet_key("USE PNPM <!-- seen: 2026-01-01 -->")
    assert bullet_key("用中文回答。") == bullet_key("用中文回答") == bullet_key(" 用中文回答 ")
    assert bullet_key("使用 pnpm，不用 npm") == bullet_key("使用 pnpm,不用 npm")
    assert bullet_key("Äpfel") != bullet_key("äpfel")  # case is folded for ASCII only
    assert bullet_key("a <!-- x --> b") != bullet_key("a b")  # a comment in the middle is text


# --- merge ------------------------------------------------------------------------------------------------------


def test_union_with_duplicates_and_sections_left_out_kept_byte_for_byte() -> None:
    m = merge(MEMORY, "## user preferences\n- 用中文回答。\n- 回答要简短\n")
    assert m.added == [("User Preferences", "回答要简短")]
    assert m.duplicates == 1 and m.removed == [] and m.new_sections == []
    assert m.kept_sections == ["Project", "Empty", "Tools"]
    assert m.text == MEMORY.replace(
        "  (the lockfile is pnpm-lock.yaml)\n", "  (the lockfile is pnpm-lock.yaml)\n- 回答要简短\n"
    )


def test_an_update_that_leaves_every_section_out_changes_nothing() -> None:
    assert merge(MEMORY, "").text == MEMORY
    assert merge(MEMORY, "## Brand new\n- x\n").text.startswith(MEMORY)
    assert merge(MEMORY, MEMORY).text == MEMORY


def test_a_duplicate_takes_the_newer_seen_marker_only() -> None:
    newer = merge(MEMORY, "## Tools\n- ripgrep <!-- seen: 2026-02-01 -->\n")
    assert newer.refreshed == 1 and newer.added == []
    assert "- ripgrep <!-- seen: 2026-02-01 -->\n" in newer.text
    older = merge(MEMORY, "## Tools\n- ripgrep <!-- seen: 2025-02-01 -->\n")
    assert older.text == MEMORY and older.refreshed == 0 and older.duplicates == 1
    marked = merge(MEMORY, "## Project\n- KX-200 talks 115200 baud. <!-- seen: 2026-03-03 -->\n")
    assert "- KX-200 talks 115200 baud <!-- seen: 2026-03-03 -->\n" in marked.text


def test_replace_is_explicit_and_its_mark_is_not_written() -> None:
    m = merge(MEMORY, "## User Preferences [replace]\n- 用中文回答\n- 新的偏好\n")
    assert m.replaced == ["User Preferences"]
    assert m.removed == [("User Preferences", "Use pnpm, never npm.\n  (the lockfile is pnpm-lock.yaml)")]
    assert m.added == [("User Preferences", "新的偏好")]
    assert "[replace]" not in m.text
    assert "## User Preferences\n- 用中文回答\n- 新的偏好\n\n## Project" in m.text
    new = merge(MEMORY, "## Fresh ［REPLACE］\n- a\n")
    assert new.new_sections == ["Fresh"] and new.text.endswith("\n## Fresh\n- a\n")


def test_new_sections_are_appended_in_the_update_order_with_titles_matched_across_widths() -> None:
    m = merge(MEMORY, "## Zeta\n- z\n## ＰＲＯＪＥＣＴ\n- new fact\n## Alpha\n- a\n- a.\n")
    assert m.new_sections == ["Zeta", "Alpha"]
    assert m.duplicates == 1
    assert m.text.endswith("- ripgrep <!-- seen: 2026-01-10 -->\n\n## Zeta\n- z\n\n## Alpha\n- a\n")
    assert "- KX-200 talks 115200 baud\n- new fact\n\n```text" in m.text


def test_crlf_file_gets_crlf_lines_and_a_missing_final_newline_is_handled() -> None:
    m = merge("## A\r\n- a", "## A\n- b\n## B\n- c\n")
    assert m.text == "## A\r\n- a\r\n- b\r\n\r\n## B\r\n- c\r\n"
    assert merge("", "## A\n- a\n").text == "## A\n- a\n"
    assert merge("just prose", "- loose\n").text == "just prose\n- loose\n"


def test_fences_left_open_never_swallow_what_is_merged() -> None:
    m = merge("## A\n- a\n```\n## B\n", "## C\n- c\n")
    assert [s.title for s in parse(m.text).sections] == ["A", "C"]
    u = merge("## A\n- a\n", "## A\n- b\n  ```\n## C\n- c\n")
    assert [b.text.split("\n")[0] for b in parse(u.text).sections[0].bullets] == ["a", "b"]
    assert [s.title for s in parse(u.text).sections] == ["A"]


def test_ignored_lines_and_empty_bullets() -> None:
    m = merge(MEMORY, "# Long-term memory\n\n## Project\nSome prose.\n- \n- new\n")
    assert m.ignored == 3 and m.added == [("Project", "new")]
    assert "Some prose." not in m.text


def test_duplicate_headings_in_the_file_and_in_the_update() -> None:
    m = merge("## A\n- a\n\n## a\n- b\n", "## A\n- b\n- c\n## a\n- c\n- d\n")
    assert m.text == "## A\n- a\n- c\n- d\n\n## a\n- b\n"
    assert m.duplicates == 2


@settings(max_examples=300)
@given(markdown(), markdown())
def test_merge_properties(current: str, update: str) -> None:
    m = merge(current, update)
    assert merge(current, update) == m  # deterministic
    doc, upd, out = parse(current), parse(update.removeprefix("\ufeff")), parse(m.text)
    replaced = {s.key for s in upd.sections if s.replace}
    keys_out: dict[str | None, set[str]] = {}
    for s in out.all_sections():
        keys_out.setdefault(s.key, set()).update(b.key for b in s.bullets)
    for s in doc.all_sections():  # nothing the file holds is lost, but by [replace]
        if s.key not in replaced:
            assert {b.key for b in s.bullets} <= keys_out[s.key], s.title
    for s in upd.all_sections():  # every bullet of the update is there
        assert {b.key for b in s.bullets if b.key} <= keys_out.get(s.key, set()), s.title
    kept = {s.key for s in doc.sections} - {s.key for s in upd.sections} - {None}
    for s in doc.sections:  # sections left out: byte for byte (the last one may gain a line ending)
        if s.key in kept and s is not doc.sections[-1]:
            assert s.raw.removeprefix("\ufeff") in m.text
    again = merge(m.text, update)
    assert again.text == m.text and again.added == []  # a second merge of the same update changes nothing
