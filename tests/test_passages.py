"""Passages: the lines of a section that answer a query — never a cut bullet or code block, ranked by the rare word,
marked in the snippet, and served by a real daemon as hits that `get` reads back line for line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.text import passages
from memoryd.text.chunker import fence_blocks

SECTION = [
    "## 2026-11-23 10:00 — event",  # 0
    "",
    "- Alice: the bootloader prints nothing",  # 2
    "  after the reset, on the KX-200 only",  # 3 (continuation)
    "- Bob: UART at 115200 times out now and then",  # 4
    "- Alice: we enabled RTS/CTS flow control",  # 5
    "",
    "```sh",  # 7
    "- Alice: this bullet is code",
    "## and so is this heading",
    "```",  # 10
    "",
    "A plain paragraph about timeouts",  # 12
]


def test_a_bullet_keeps_its_continuation_lines_and_a_fence_stays_whole() -> None:
    spans = [(s, e) for s, e, _ in passages.units(SECTION)]
    assert spans == [(2, 4), (4, 5), (5, 6), (7, 11), (12, 13)]
    best = passages.rank(SECTION, ["reset"])[0]
    assert (best.start, best.end) == (2, 4)  # the bullet with the line that says it
    code = passages.rank(SECTION, ["heading"])[0]
    assert (code.start, code.end) == (7, 11)  # the whole fenced block, not its "## " line


def test_the_rare_word_wins_over_the_word_every_line_says() -> None:
    ranked = passages.rank(SECTION, ["alice", "flow"])
    assert (ranked[0].start, ranked[0].matched) == (5, ("alice", "flow"))
    assert sorted(p.start for p in ranked[1:]) == [2, 7]  # Alice alone (the shorter passage first: BM25)


def test_plural_and_case_and_chinese_and_identifiers_match() -> None:
    lines = ["- 串口超时在开启流控后消失", "- ERR_UART_TIMEOUT_0x3F seen twice", "- Timeouts everywhere", "- nothing"]
    assert passages.rank(lines, ["流控"])[0].start == 0
    assert passages.rank(lines, ["err_uart_timeout_0x3f"])[0].start == 1
    assert passages.rank(lines, ["timeout"])[0].start == 2
    assert passages.rank(lines, ["ago"]) == []  # "go" inside a word is not the word
    assert passages.rank(["- we go now"], ["go"])[0].start == 0


def test_a_long_paragraph_is_cut_at_lines_but_a_long_bullet_is_not() -> None:
    paragraph = [f"line {n} of the paragraph" for n in range(20)]
    paragraph[15] = "the needle is here"
    best = passages.rank(paragraph, ["needle"])[0]
    assert best.start <= 15 < best.end and best.end - best.start <= passages.MAX_LINES
    bullet = ["- a long bullet"] + [f"  continued {n}" for n in range(20)] + ["  with the needle"]
    best = passages.rank(bullet, ["needle"])[0]
    assert (best.start, best.end) == (0, len(bullet))


def test_a_strong_line_in_a_weaker_section_beats_a_weak_line_in_the_best_one() -> None:
    first = ["## one", "- flow mentioned once, nothing else"] + [f"- filler {n}" for n in range(6)]
    second = ["## two", "- flow control on the UART, RTS/CTS"] + [f"- other {n}" for n in range(6)]
    words = ["uart", "flow", "control"]
    out = passages.ranked([(10.0, first), (9.0, second)], words, 5)
    assert [(n, p.start) for n, p, _ in out] == [(1, 1), (0, 1)]
    assert out[0][2] > out[1][2]


def test_a_section_without_a_matching_line_comes_back_whole() -> None:
    section = ["## KX-200 bootloader", "- nothing here says it"]
    out = passages.ranked([(3.0, section)], ["bootloader"], 5)
    assert [(n, p.start, p.end) for n, p, _ in out] == [(0, 0, 2)]


def test_snippet_marks_the_matched_words_and_keeps_to_its_length() -> None:
    assert passages.snippet(["- UART timeouts at 115200"], ("timeout", "uart"), 200) == (
        "- **UART** **timeouts** at 115200"
    )
    assert passages.snippet(["- 串口超时"], ("串口", "超时"), 200) == "- **串口超时**"
    long = ["x" * 50 for _ in range(30)] + ["- the needle line"]
    text = passages.snippet(long, ("needle",), 100)
    assert text.startswith("…") and "**needle**" in text
    assert len(text) <= 100


_LINE = st.one_of(
    st.sampled_from(["", "- bullet alpha", "* bullet beta", "1. numbered gamma", "  continued alpha", "plain beta"]),
    st.sampled_from(["```", "~~~", "```py", "## heading gamma", "# title", "    indented code"]),
    st.text(alphabet="ab -#`~\t串口", max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINE, max_size=40), words=st.lists(st.sampled_from(["alpha", "beta", "gamma", "串口", "a"])))
def test_a_passage_never_starts_or_ends_inside_a_bullet_or_a_code_block(lines: list[str], words: list[str]) -> None:
    blocks = fence_blocks(lines)
    unit_spans = passages.units(lines)
    starts = {s for s, _, _ in unit_spans}
    for p in passages.rank(lines, words):
        assert 0 <= p.start < p.end <= len(lines)
        if blocks[p.start]:  # a code block: from its opening fence to its end, whole
            assert p.start == 0 or blocks[p.start - 1] != blocks[p.start]
            assert p.end == len(lines) or blocks[p.end] != blocks[p.start]
        else:
            unit = next(u for u in unit_spans if u[0] <= p.start < u[1])
            if not unit[2]:  # a bullet: whole
                assert (p.start, p.end) == (unit[0], unit[1])
            else:  # a paragraph: cut only at line boundaries inside it
                assert p.end <= unit[1] and (p.start in starts or p.start > unit[0])
        assert p.matched and p.score > 0


_SNIPPET_LINE = st.one_of(
    st.sampled_from(["- UART timeouts at 115200", "串口超时 again 串口", "needle", "- needle needle needle", ""]),
    st.text(alphabet="abn edl串口超时\n-", max_size=80),
)


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(_SNIPPET_LINE, max_size=60),
    words=st.lists(st.sampled_from(["timeout", "uart", "串口", "超时", "needle", "a", "e"]), max_size=4),
    max_chars=st.integers(min_value=20, max_value=4000),
)
def test_a_snippet_never_exceeds_its_setting_and_never_cuts_a_marker(
    lines: list[str], words: list[str], max_chars: int
) -> None:
    text = passages.snippet(lines, tuple(words), max_chars)
    assert len(text) <= max_chars
    assert text.count(passages.MARK) % 2 == 0  # the lines hold no "*": every marker opened is closed
    for run in text.split(passages.MARK)[1::2]:
        assert run and passages.MARK not in run and "…" not in run


def test_a_snippet_full_of_matches_stays_within_the_default_cap() -> None:
    """Issue 19 §4: the cap was applied before the markers were added (704 and 1,096 characters at 700)."""
    lines = [" ".join(["needle"] * 10) for _ in range(40)]
    text = passages.snippet(lines, ("needle",), 700)
    assert len(text) <= 700 and text.endswith("…") and text.startswith("**needle**")
    assert text.count(passages.MARK) % 2 == 0


_VOCABULARY = [
    "timeout",
    "Timeouts",
    "uart",
    "UART",
    "ing",
    "set",
    "setting",
    "串口",
    "超时",
    "串口超时",
    "flow",
    "x",
    "a",
]
_PIECES = st.sampled_from(
    [
        "timeout",
        "timeouts",
        "TIMEOUTED",
        "uart",
        "Uarts",
        "setting",
        "settings",
        "resetting",
        "串口",
        "超时",
        "流控",
        "flow",
        "flowing",
        "x",
        "xs",
        "a",
        " ",
        " ",
        "\n",
        "-",
        "_",
        ".",
        "9",
        "é",
        "ß",
        "İ",
        "Σ",
        "ing",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_PIECES, max_size=40).map("".join),
    st.lists(st.sampled_from(_VOCABULARY), min_size=1, max_size=4, unique=True).map(tuple),
    st.integers(0, 30),
    st.integers(0, 200),
    st.sampled_from([0, 0, 600, 3000]),
)
def test_word_spans_are_what_the_pattern_finds(
    text: str, matched: tuple[str, ...], pos: int, width: int, pad: int
) -> None:
    text = "y " * pad + text  # a padded text: the first word lies past the first read's size, which grows to it
    pos = min(pos, len(text))
    endpos = min(len(text), pos + width)
    pattern = passages._pattern(matched)
    assert pattern is not None
    expected = [m.span() for m in passages._matches(pattern, text, pos, endpos)]
    assert passages.word_spans(text, matched, pos, endpos) == expected
    first = next(passages._matches(pattern, text), None)
    assert passages._first_word(text, matched) == (None if first is None else first.start())


def test_word_spans_mark_words_by_their_stem_and_longest_first() -> None:
    text = "UART timeouts; the timeoutx, a 串口超时 and resetting"
    assert [
        text[a:b] for a, b in passages.word_spans(text, ("timeout", "uart", "串口", "串口超时", "超时", "set"))
    ] == [
        "UART",
        "timeouts",
        "串口超时",
    ]
