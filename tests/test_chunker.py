"""chunk_spans (through a local chunk_markdown that builds the texts): ``## `` blocks, windows for long blocks, fences, line endings; line ranges as an editor shows."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.text.chunker import (
    CHUNKER_VERSION,
    MAX_FACT_KEYS,
    Chunk,
    RuleKind,
    chunk_rules,
    chunk_spans,
    split_lines,
)


def chunk_markdown(text: str, *, max_lines: int = 40) -> list[Chunk]:
    """The chunks the index stores for ``text``: chunk_spans' line ranges (1-based) and the lines between."""
    lines = split_lines(text)
    return [
        Chunk(lo + 1, hi, heading, "\n".join(lines[lo:hi]))
        for lo, hi, heading in chunk_spans(lines, max_lines=max_lines)
    ]


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


def test_spans_are_the_chunks_without_texts() -> None:
    text = "intro\n\n## A\n- a\n\n## B\nb\n"
    assert chunk_spans(split_lines(text)) == [(0, 1, ""), (2, 4, "## A"), (5, 7, "## B")]


# --- rule files -------------------------------------------------------------------------------------------

KINDS: tuple[RuleKind, ...] = ("profile", "candidate", "override")
PROFILE = """\
rule_id: uart-flow-control
model_id: KX-200
fw_range: '>=1.2.0 <1.3.0'
summary: "needs RTS/CTS \\u4E32\\u53E3"
facts:
  transport.uart.baud: 921600
  transport: {parity: even}
  gpio:
    reset:
      pin: 4

"""


def test_a_profile_or_candidate_file_is_one_chunk() -> None:
    (chunk,) = chunk_rules(PROFILE, "profile", "uart-flow-control")
    assert (chunk.start_line, chunk.end_line, chunk.heading) == (
        1,
        10,
        "rule uart-flow-control · KX-200 >=1.2.0 <1.3.0",
    )
    assert chunk.text == PROFILE.strip() and chunk.summary == "needs RTS/CTS 串口"
    keys = ["gpio.reset.pin", "transport.parity", "transport.uart.baud"]  # nested mappings flattened
    assert chunk.identifiers == (*keys, *(f"facts.{k}" for k in keys), "uart-flow-control", "KX-200")
    (candidate,) = chunk_rules(PROFILE + "status: candidate\n", "candidate", "uart-flow-control")
    assert candidate.heading == "candidate rule uart-flow-control · KX-200 >=1.2.0 <1.3.0"
    # scalars are taken as written: a model id YAML would read as a number is still a name
    assert chunk_rules("rule_id: r\nmodel_id: 200\nfw_range: 1.2\n", "profile", "r")[0].heading == "rule r · 200 1.2"


def test_an_override_file_is_one_chunk_per_rule_with_its_own_lines() -> None:
    text = "\r\n".join(
        [
            "rules:",
            "  - rule_id: first",  # 2
            "    model_id: KX-200",
            "    fw_range: '1.2.*'",
            "    summary: >",
            "      folded",
            "      summary",  # 7
            "",
            "  # about the second",
            "  - {rule_id: second, model_id: KX-200, fw_range: '*', facts: {a.b: 1}}",  # 10
            "# trailing comment",
        ]
    )
    chunks = chunk_rules(text, "override", "bench-3")  # no instance_id: the file's name
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [
        (2, 7, "override bench-3 rule first · KX-200 1.2.*"),
        (10, 10, "override bench-3 rule second · KX-200 *"),
    ]
    assert chunks[0].summary == "folded summary\n"
    assert chunks[1].identifiers == ("a.b", "facts.a.b", "second", "KX-200", "bench-3")
    assert chunk_rules("instance_id: bench-4\nrules: []\n", "override", "bench-3") == []


@pytest.mark.parametrize(
    "text",
    [
        "rule_id: x\nfacts: [unclosed\n",  # not YAML
        "- a list\n- of things\n",  # not a mapping
        "rule_id: x\nmodel_id: m\n",  # no fw_range
        "rule_id: x\nmodel_id: m\nfw_range: '*'\nfacts: [1, 2]\n",  # facts not a mapping
        "rule_id: x\nmodel_id: [200]\nfw_range: '*'\n",  # model_id not a scalar
        "instance_id: b\nrules: {a: 1}\n",  # rules not a list
        "instance_id: b\nrules:\n- just a string\n",  # an item that is no rule
        "rules:\n- rule_id: x\n  model_id: m\n  fw_range: '*'\n  summary: a\u2028b\n",  # YAML's own line breaks
        "rule_id: x\nmodel_id: m\nfw_range: '*'\nfacts: {? [a]: 1}\n",  # a key that is a list
        "a: b\n---\nc: d\n",  # two documents
        "\x00\x01",  # not printable
    ],
)
def test_what_is_not_rules_is_text_in_windows(text: str) -> None:
    for kind in KINDS:
        chunks = chunk_rules(text, kind, "b")
        lines = split_lines(text)
        assert chunks == [Chunk(1, len(lines), "", "\n".join(lines).strip("\n"))] or not text.strip()


def test_aliases_cannot_make_endless_keys() -> None:
    # 2**30 dotted keys from 30 lines: a file with aliases is indexed as plain text, never expanded
    levels = ["l0: &l0 {a: 1, b: 2}"] + [f"l{n}: &l{n} {{a: *l{n - 1}, b: *l{n - 1}}}" for n in range(1, 31)]
    text = "\n".join([*levels, "rule_id: x", "model_id: m", "fw_range: '*'", "facts: *l30"])
    chunks = chunk_rules(text, "profile", "x")
    assert [c.heading for c in chunks] == [""] and chunks[0].identifiers == ()
    assert chunk_rules("rule_id: x\nfacts: &f {loop: *f}\n", "profile", "x")[0].heading == ""  # a cycle: text
    # without the alias, the same rule is a rule; many keys stay bounded
    keys = "\n".join(f"  k{n}: {n}" for n in range(3 * MAX_FACT_KEYS))
    (chunk,) = chunk_rules(f"rule_id: x\nmodel_id: m\nfw_range: '*'\nfacts:\n{keys}\n", "profile", "x")
    assert chunk.heading == "rule x · m *"
    assert 2 < len(chunk.identifiers) <= 2 * MAX_FACT_KEYS + 2


def test_nesting_deep_enough_to_crash_libyaml_is_plain_text() -> None:
    deep = 100_000  # libyaml's composer recurses in C: a segmentation fault, not an exception
    text = "rule_id: x\nmodel_id: m\nfw_range: '*'\nfacts:\n  x: " + "[" * deep + "]" * deep + "\n"
    assert [c.heading for c in chunk_rules(text, "profile", "x")] == [""]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("rules:- _idmoel{}[],'\"&*!\n #\t\r\x85"), max_size=80))
def test_any_rule_file_gives_chunks_inside_the_file(text: str) -> None:
    lines = split_lines(text)
    for kind in KINDS:
        for chunk in chunk_rules(text, kind, "n", max_lines=5):
            assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
            assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])


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


def reading_line_by_line(lines: list[str]) -> list[int]:
    """An independent oracle for where ``## `` blocks start: each line read in turn, fences tracked as CommonMark
    does (a fence closes on the same character, at least as long, with nothing after it)."""
    starts: list[int] = []
    fence = ""
    for number, line in enumerate(lines):
        if number == 0:
            line = line.removeprefix("\ufeff")
        indent = len(line) - len(line.lstrip(" "))
        if indent > 3:
            continue
        rest = line[indent:]
        marker = rest[:1] * (len(rest) - len(rest.lstrip(rest[:1]))) if rest[:1] in ("`", "~") else ""
        if len(marker) >= 3:
            info = rest[len(marker) :]
            if not fence:
                if not (marker[0] == "`" and "`" in info):
                    fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence) and not info.strip():
                fence = ""
        elif not fence and rest.startswith("##") and (len(rest) == 2 or rest[2] in " \t"):
            starts.append(number)
    return starts


FENCED_LINE = st.one_of(
    st.sampled_from(
        [
            *("```", "````", "```py", "``` a`b", "~~~", "~~~~ x", "~~~ `", "  ```", "    ```", " ~~~", "``", "~~"),
            *("## a", "##", "##\tb", "###", "#", "   ## c", "    ## d", "\ufeff## e", "##x", " ", "", "text `"),
        ]
    ),
    st.text(alphabet=st.sampled_from("#`~ \tx\ufeff"), max_size=8),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(FENCED_LINE, max_size=40))
def test_blocks_start_where_a_line_by_line_reading_says(lines: list[str]) -> None:
    spans = chunk_spans(lines, max_lines=1000)  # no windows: each heading's block is one chunk starting at it
    assert [lo for lo, _hi, heading in spans if heading] == reading_line_by_line(lines)
