"""Memory files arrive by git clone: whatever they hold, reading and merging them takes time linear in their size.
Each case is a shape that made (or would make) some step quadratic — a regular expression that rescans a line, a
slice per comment, difflib on runs of equal lines; at these sizes quadratic means hours, so the test's timeout
catches it. No timing is asserted."""

from __future__ import annotations

from memorysections import bullet_key, bullets, merge, merge3, parse, render, title_key

MB = 1_000_000


def _roundtrip_and_merges(text: str) -> None:
    doc = parse(text)
    assert render(doc) == text
    for section in doc.all_sections():
        assert section.blocks is not None  # every section read into blocks
    bullets(text)
    merged = merge(text, "## Added\n- one more\n")
    assert merged.text.startswith(text.rstrip("\n")[:1000])
    assert merge3(text, text + "\n## Ours\n- o\n", text + "\n## Theirs\n- t\n").count("## ") >= 2


def test_a_line_of_a_million_comment_openers() -> None:
    _roundtrip_and_merges("## A\n- " + "<!--" * (MB // 4) + "\n")
    _roundtrip_and_merges("<!--" * (MB // 4))


def test_a_bullet_ending_in_a_quarter_million_comments() -> None:
    line = "- x" + " <!---->" * (MB // 8)
    assert bullet_key(line[2:]) == "x"
    _roundtrip_and_merges("## A\n" + line + "\n")


def test_headings_made_to_backtrack() -> None:
    hashes = "## " + "# " * (MB // 2) + "x\n- a\n"
    brackets = "## a" + " " * MB + "[\n- a\n"
    replaces = "## " + "[replace" * (MB // 8) + "\n- a\n"
    for text in (hashes, brackets, replaces):
        _roundtrip_and_merges(text)
        title_key(parse(text).sections[0].title)


def test_fences_and_comments_that_never_close() -> None:
    _roundtrip_and_merges("```\n" * (MB // 8))
    _roundtrip_and_merges("## A\n" + "<!-- open\n" * (MB // 10))
    _roundtrip_and_merges("## A\n" + "- x ```\n" * (MB // 8))


def test_runs_of_equal_lines_changed_on_both_sides() -> None:
    """difflib's SequenceMatcher compares every pair of equal units: 50,000 blank lines against 50,000 is 2.5e9."""
    blank = "\n" * 50_000
    base = "## A\n- a\n" + blank + "- z\n"
    ours = "## A\n- a\n- ours\n" + blank + "x\n" + blank + "- z\n"
    theirs = "## A\n- a\n" + blank + "y\n" + blank + "- theirs\n- z\n"
    result = merge3(base, ours, theirs)
    keys = {b.key for b in parse(result).sections[0].bullets}
    assert {"a", "ours", "theirs", "z"} <= keys


def test_many_sections_of_one_title() -> None:
    text = "## Same\n- a\n" * (MB // 12)
    _roundtrip_and_merges(text)
    assert merge(text, "## same\n- b\n").added == [("Same", "b")]
