"""chunk_markdown: ``## `` blocks, windows for long blocks, fences, line endings; line ranges as an editor shows."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.notes.chunker import CHUNKER_VERSION, Chunk, chunk_markdown, split_lines


def editor_lines(text: str) -> list[str]:
    """An independent oracle: what VS Code / Python's universal newlines number as lines."""
    lines = re.split(r"\r\n|\r|\n", text)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def test_version_is_an_int() -> None:
    assert isinstance(CHUNKER_VERSION, int)


def test_heading_blocks_and_preamble() -> None:
    text = "intro line\n\n## First\n- a\n- b\n\n## Second\n\nbody\n"
    assert chunk_markdown(text) == [
        Chunk(1, 1, "", "intro line"),
        Chunk(3, 5, "## First", "## First\n- a\n- b"),
        Chunk(7, 9, "## Second", "## Second\n\nbody"),
    ]


def test_blank_preamble_and_blank_input_give_no_chunk() -> None:
    assert chunk_markdown("\n\n   \n## H\nx") == [Chunk(4, 5, "## H", "## H\nx")]
    assert chunk_markdown("") == []
    assert chunk_markdown(" \n\t\n") == []


def test_only_level_two_headings_split() -> None:
    text = "# Title\n## A\n### sub\ntext\n#### deeper\n##no-space\n## B"
    chunks = chunk_markdown(text)
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [(1, 1, ""), (2, 6, "## A"), (7, 7, "## B")]


def test_heading_forms() -> None:
    # up to three spaces of indentation, a tab after ##, an empty heading; four spaces is code, not a heading
    text = "x\n   ## indented\na\n##\tTabbed\nb\n##\nc\n    ## code\nd"
    assert [c.heading for c in chunk_markdown(text)] == ["", "## indented", "##\tTabbed", "##"]


def test_headings_inside_fences_do_not_split() -> None:
    text = "\n".join(
        [
            "## Real",
            "```bash",
            "## not a heading",
            "```",
            "~~~~",
            "## still not",
            "~~~",  # too short to close a ~~~~ fence
            "## nor this",
            "~~~~",
            "## Next",
            "x",
        ]
    )
    chunks = chunk_markdown(text)
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [(1, 9, "## Real"), (10, 11, "## Next")]


def test_backtick_fence_closing_rules() -> None:
    # a closing fence must use the same character, be at least as long and carry no info string
    text = "## A\n````\n```\n~~~~\n```` trailing\n## hidden\n````\n## B\n"
    assert [c.heading for c in chunk_markdown(text)] == ["## A", "## B"]
    # an inline code span with backticks in the "info string" is not a fence
    assert [c.heading for c in chunk_markdown("``` a ` b\n## C\n")] == ["", "## C"]


def test_unclosed_fence_runs_to_the_end() -> None:
    assert [c.heading for c in chunk_markdown("## A\n```\n## B\n## C\n")] == ["## A"]


def test_crlf_and_cr_line_endings() -> None:
    text = "pre\r\n## A\r\nline\r\n\r\n## B\rx\r"
    chunks = chunk_markdown(text)
    assert chunks == [Chunk(1, 1, "", "pre"), Chunk(2, 3, "## A", "## A\nline"), Chunk(5, 6, "## B", "## B\nx")]


def test_form_feed_and_unicode_separators_stay_inside_a_line() -> None:
    # str.splitlines would break here; editors do not
    text = "## A\fb\u2028c\x1cd\n## B"
    assert split_lines(text) == ["## A\fb\u2028c\x1cd", "## B"]
    assert [(c.start_line, c.end_line) for c in chunk_markdown(text)] == [(1, 1), (2, 2)]


def test_byte_order_mark_does_not_hide_a_heading() -> None:
    chunks = chunk_markdown("\ufeff## Title\nx\n")
    assert chunks == [Chunk(1, 2, "## Title", "\ufeff## Title\nx")]
    assert chunk_markdown("\ufeff\n\n") == []


def test_long_block_is_windowed_keeping_its_heading() -> None:
    lines = ["## Long"] + [f"- item {i}" for i in range(1, 100)]
    chunks = chunk_markdown("\n".join(lines), max_lines=40)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 40), (41, 80), (81, 100)]
    assert {c.heading for c in chunks} == {"## Long"}
    assert chunks[1].text.splitlines()[0] == "- item 40"


def test_windows_prefer_a_paragraph_break() -> None:
    lines = ["## P"] + [f"line {i}" for i in range(2, 31)] + [""] + [f"line {i}" for i in range(32, 61)]
    chunks = chunk_markdown("\n".join(lines), max_lines=40)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 30), (32, 60)]


def test_max_lines_must_be_positive() -> None:
    with pytest.raises(ValueError):
        chunk_markdown("x", max_lines=0)


def test_daily_file_shape() -> None:
    text = (
        "## 2026-02-01\n\n"
        "## 2026-02-01 09:30 — decision\n- 结论：jobs store 放到 ~/.config\n- 原因：daemon 可恢复\n\n"
        "## 2026-02-01 14:20 — event\n- 发生：imsg rpc send 临时不可用\n"
    )
    chunks = chunk_markdown(text)
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [
        (1, 1, "## 2026-02-01"),
        (3, 5, "## 2026-02-01 09:30 — decision"),
        (7, 8, "## 2026-02-01 14:20 — event"),
    ]


# --- properties -------------------------------------------------------------------------------------------

LINE = st.one_of(
    st.sampled_from(
        ["", " ", "\t", "## H", "##", "### h3", "# h1", "```", "~~~", "````py", "   ## x", "    ## code", "\ufeff"]
    ),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12),
    st.builds(lambda s: "## " + s, st.text(alphabet="ab 串口", max_size=5)),
)
DOCUMENT = st.tuples(st.lists(LINE, max_size=60), st.sampled_from(["\n", "\r\n", "\r"]), st.booleans()).map(
    lambda t: t[1].join(t[0]) + (t[1] if t[2] else "")
)


@settings(max_examples=400, deadline=None)
@given(DOCUMENT, st.integers(min_value=1, max_value=12))
def test_chunks_cover_every_non_blank_line_once_in_order(text: str, max_lines: int) -> None:
    lines = editor_lines(text)
    assert split_lines(text) == lines
    chunks = chunk_markdown(text, max_lines=max_lines)
    covered: list[int] = []
    previous_end = 0
    for chunk in chunks:
        assert previous_end < chunk.start_line <= chunk.end_line <= len(lines)
        assert chunk.end_line - chunk.start_line + 1 <= max_lines
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        assert chunk.text.strip("\ufeff").strip(), "blank chunk"
        assert lines[chunk.start_line - 1].replace("\ufeff", "").strip()  # trimmed: starts and ends on content
        assert lines[chunk.end_line - 1].replace("\ufeff", "").strip()
        assert chunk.heading == "" or chunk.heading.startswith("##")
        covered.extend(range(chunk.start_line, chunk.end_line + 1))
        previous_end = chunk.end_line
    non_blank = [n for n, line in enumerate(lines, 1) if line.replace("\ufeff", "").strip()]
    assert [n for n in covered if n in set(non_blank)] == non_blank


@settings(max_examples=200, deadline=None)
@given(DOCUMENT)
def test_a_chunk_that_starts_at_a_heading_is_named_after_it(text: str) -> None:
    lines = editor_lines(text)
    chunks = chunk_markdown(text, max_lines=1000)
    for chunk in chunks:
        first = lines[chunk.start_line - 1].removeprefix("\ufeff")
        if chunk.heading:
            # without windowing, every heading block starts at its heading line
            assert first.strip() == chunk.heading
        else:
            assert chunk is chunks[0]  # only the preamble has no heading
