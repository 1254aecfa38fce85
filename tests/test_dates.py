"""Dates and relative times in a question read as a window of days (memoryd/text/dates.py)."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.text import dates
from memoryd.text.dates import entry_date, window

NOW = date(2026, 3, 6)  # a Friday


@pytest.mark.parametrize(
    ("question", "since", "until", "rest"),
    [
        ("what did we decide about the CDN on 2026-02-24?", date(2026, 2, 24), date(2026, 2, 24), "CDN"),
        ("2月3日 支付回调改了什么", date(2026, 2, 3), date(2026, 2, 3), "支付回调"),
        ("1月20日值班时发生了什么？", date(2026, 1, 20), date(2026, 1, 20), "值班"),
        ("What did we agree on for the mobile release on Jan 8?", date(2026, 1, 8), date(2026, 1, 8), "mobile"),
        ("release notes from 8 March", date(2025, 3, 8), date(2025, 3, 8), "release"),  # not yet this year
        ("What broke in production last Tuesday?", date(2026, 3, 3), date(2026, 3, 3), "production"),
        ("what happened on Friday", date(2026, 2, 27), date(2026, 2, 27), "happened"),
        ("昨天的发布出了什么问题？", date(2026, 3, 5), date(2026, 3, 5), "发布"),
        ("yesterday's deploy", date(2026, 3, 5), date(2026, 3, 5), "deploy"),
        ("上周关于推荐模型做了什么决定？", date(2026, 2, 23), date(2026, 3, 1), "推荐模型"),
        ("what did we do last week", date(2026, 2, 23), date(2026, 3, 1), "what"),
        ("上周二的值班", date(2026, 2, 24), date(2026, 2, 24), "值班"),
        ("What did we decide about database migrations last month?", date(2026, 2, 1), date(2026, 2, 28), "migrations"),
        ("上个月的发布", date(2026, 2, 1), date(2026, 2, 28), "发布"),
        ("3 days ago", date(2026, 3, 3), date(2026, 3, 3), ""),
        ("三天前的会议", date(2026, 3, 3), date(2026, 3, 3), "会议"),
    ],
)
def test_a_date_or_relative_time_is_a_window(question: str, since: date, until: date, rest: str) -> None:
    found = window(question, NOW)
    assert found is not None and (found.since, found.until) == (since, until), found
    assert rest in found.rest and found.holds(since) and not found.holds(until.replace(year=until.year + 1))


@pytest.mark.parametrize(
    "question", ["how do we rotate the TLS certificates", "固件 1.2.3 的波特率", "ERR_0x3F on 2026-13-45"]
)
def test_no_date_no_window(question: str) -> None:
    assert window(question, NOW) is None


def test_an_entry_is_dated_by_its_heading_then_its_file() -> None:
    assert entry_date("memory/2026-02-24.md", "2026-02-23 23:59 — note") == date(2026, 2, 23)
    assert entry_date("memory/2026-02-24.md", "Devices") == date(2026, 2, 24)
    assert entry_date("memory/MEMORY.md", "Devices") is None


_TOKENS = [
    *[
        "上",
        "这",
        "本",
        "个",
        "前",
        "大",
        "昨",
        "今",
        "月",
        "日",
        "号",
        "周",
        "天",
        "星期",
        "礼拜",
        "年",
        "两",
        "三",
        "一",
        "十",
        "的",
        "决定",
    ],
    *[
        "last",
        "this",
        "on",
        "the",
        "day",
        "before",
        "yesterday",
        "today",
        "week",
        "month",
        "ago",
        "days",
        "of",
        "8th",
        "1st",
        "24",
        "2026",
        "03",
        "1",
        "12",
    ],
    *[
        "Jan",
        "January",
        "Sept",
        "Tue",
        "Tues",
        "Thursday",
        "Sunday",
        "Monday",
        "mon",
        "what",
        "did",
        "we",
        "decide",
        "about",
        "uart",
    ],
    "-",
    "/",
    ".",
    ",",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=8), st.sampled_from(["", " "]))
def test_the_cue_test_never_hides_a_date(tokens: list[str], sep: str) -> None:
    """A question the quick test passes over holds no expression any pattern reads."""
    question = sep.join(tokens)
    if not dates.may_hold(question.lower()):
        finders = (dates._iso, dates._zh_date, dates._en_date, dates._ago, dates._relative, dates._weekday)
        assert all(find(question, date(2026, 3, 4)) is None for find in finders), question
