"""INSIGHTS.md bullets past their TTL come out line by line; every other byte of the file stays (hypothesis)."""

from __future__ import annotations

from datetime import date

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.curate.insights import expire, lines_of, seen_day

CUTOFF = date(2026, 1, 1)
OLD = " <!-- seen: 2025-12-31 -->"
NEW = " <!-- seen: 2026-01-01 -->"

pieces = st.sampled_from(
    [
        "## 标题\n",
        "- 串口 bullet" + OLD + "\n",
        "- fresh bullet" + NEW + "\n",
        "* star" + OLD + "\r\n",
        "  continued line\n",
        "    - nested" + NEW + "\n",
        "\n",
        "```\n",
        "~~~\n",
        "<!-- a comment -->\n",
        "plain text\n",
        "- no mark\n",
        "-not a bullet" + OLD + "\n",
        "\t- tab nested\n",
        "\u2028odd separator\n",
        "- last" + OLD,
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_lines_of_is_lossless(text: str) -> None:
    assert "".join(lines_of(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_nothing_expires_before_the_first_day_so_any_text_stays(text: str) -> None:
    assert expire(text, date.min) == (text, [])


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, max_size=30))
def test_only_stale_bullets_go_and_the_rest_stays_in_order(parts: list[str]) -> None:
    text = "".join(parts)
    kept, expired = expire(text, CUTOFF)
    for e in expired:  # each removed block is a bullet last seen before the cutoff
        assert e.seen < CUTOFF and seen_day(lines_of(e.text)) == e.seen
        assert e.text[0] in "-*+" and e.text[1] in " \t"
        assert e.bytes == len(e.text.encode("utf-8"))
    lines = lines_of(kept)  # put the removed blocks back where they were: the original, byte for byte
    for e in expired:
        lines[e.line - 1 : e.line - 1] = lines_of(e.text)
    assert "".join(lines) == text
    assert expire(kept, CUTOFF) == (kept, [])  # nothing stale is left


def test_a_fenced_bullet_a_bad_date_and_the_latest_mark_of_a_wrapped_bullet() -> None:
    text = (
        "```\n- fenced" + OLD + "\n```\n"
        "- bad <!-- seen: 2025-02-30 -->\n"
        "- wrapped" + OLD + "\n  and confirmed later" + NEW + "\n"
        "- 过期" + OLD + "\n  续行\n"
        "tail\n"
    )
    kept, expired = expire(text, CUTOFF)
    assert [e.line for e in expired] == [7]
    assert expired[0].text == "- 过期" + OLD + "\n  续行\n"
    assert kept == text.replace("- 过期" + OLD + "\n  续行\n", "")
    assert seen_day(["x <!-- seen: 2025-01-01 --> y <!-- seen:2025-03-01-->"]) == date(2025, 3, 1)
