"""Dates and relative times in a question, read as a time window on entry dates rather than as words.

"what did we decide about the CDN on 2026-02-24", "2月3日 支付回调改了什么", "What broke last Tuesday?", "昨天的发布",
"上周", "last month": :func:`window` finds the expression, says which days it means (relative to ``today``) and gives
the question back without it, so "2026-02-24" no longer pulls up another note's "24 h". Search then prefers the
entries whose heading date (``## 2026-02-24 09:30 — decision``) or daily file (``memory/2026-02-24.md``) falls in the
window. Plain functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

MONTHS = {
    name: n
    for n, names in enumerate(
        (
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ),
        1,
    )
    for name in names
}
WEEKDAYS_EN = {
    name: n
    for n, names in enumerate(
        (
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thur", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        )
    )
    for name in names
}
WEEKDAYS_ZH = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
ZH_NUMBERS = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_WEEKDAY = "|".join(sorted(WEEKDAYS_EN, key=len, reverse=True))
_ISO = re.compile(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_EN_MONTH_DAY = re.compile(rf"\b(?:on\s+)?({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(\d{{4}}))?\b", re.I)
_EN_DAY_MONTH = re.compile(
    rf"\b(?:on\s+)?(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\b\.?(?:,?\s+(\d{{4}}))?", re.I
)
_ZH_DATE = re.compile(r"(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
_EN_WEEKDAY = re.compile(rf"\b(?:(last|this|on)\s+)?({_WEEKDAY})\b\.?", re.I)
_ZH_WEEKDAY = re.compile(r"(上+|这|本)?(?:周|星期|礼拜)([一二三四五六日天])")
_EN_AGO = re.compile(r"\b(\d{1,3})\s+days?\s+ago\b", re.I)
_ZH_AGO = re.compile(r"(\d{1,3}|[一两二三四五六七八九十])\s*天前")
_RELATIVE = [
    (re.compile(r"\bthe\s+day\s+before\s+yesterday\b", re.I), "day", -2),
    (re.compile(r"\byesterday\b", re.I), "day", -1),
    (re.compile(r"\btoday\b", re.I), "day", 0),
    (re.compile(r"大前天"), "day", -3),
    (re.compile(r"前天"), "day", -2),
    (re.compile(r"昨天|昨日"), "day", -1),
    (re.compile(r"今天|今日"), "day", 0),
    (re.compile(r"\blast\s+week\b", re.I), "week", -1),
    (re.compile(r"\bthis\s+week\b", re.I), "week", 0),
    (re.compile(r"上+(?:个)?(?:周|星期|礼拜)(?![一二三四五六日天])"), "week", -1),
    (re.compile(r"(?:这|本)(?:个)?(?:周|星期|礼拜)(?![一二三四五六日天])"), "week", 0),
    (re.compile(r"\blast\s+month\b", re.I), "month", -1),
    (re.compile(r"\bthis\s+month\b", re.I), "month", 0),
    (re.compile(r"上+个?月"), "month", -1),
    (re.compile(r"(?:这|本)个?月"), "month", 0),
]


@dataclass(frozen=True, slots=True)
class Window:
    since: date  # first day, inclusive
    until: date  # last day, inclusive
    rest: str  # the question without the expression

    def holds(self, day: date | None) -> bool:
        return day is not None and self.since <= day <= self.until


# What every expression :func:`window` reads holds one of (lower case): four digits and a date's separator and a
# digit (an ISO date: the only expression that is digits alone), a month's or weekday's first three letters, "day",
# "week", "ago", or one of these characters. A question with none of them — most, error codes and versions
# included — is not read further (twenty-odd patterns cost the event loop ~10-20 µs a search; this test ~2 µs).
_CUES = tuple(
    dict.fromkeys(
        [
            *(name[:3] for name in MONTHS),
            *(name[:3] for name in WEEKDAYS_EN),
            "day",
            "week",
            "ago",
            *"年月日号周天",
            "星期",
            "礼拜",
        ]
    )
)
_ISO_CUE = re.compile(r"\d{4}[-/.]\d")


def may_hold(folded: str) -> bool:
    """Whether ``folded`` (a lower-cased question) can hold an expression :func:`window` reads (the quick test)."""
    return _ISO_CUE.search(folded) is not None or any(cue in folded for cue in _CUES)


def window(question: str, today: date) -> Window | None:
    """The days a date or relative time in ``question`` means (the first one found), or None."""
    folded = question.lower()
    if not may_hold(folded):
        return None
    for find in (_iso, _zh_date, _en_date, _ago, _relative, _weekday):
        found = find(question, today)
        if found is not None:
            (since, until), (start, end) = found
            rest = " ".join((question[:start] + " " + question[end:]).split())
            return Window(since, until, rest)
    return None


_Found = tuple[tuple[date, date], tuple[int, int]] | None


def _day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _iso(question: str, today: date) -> _Found:
    m = _ISO.search(question)
    if m is None:
        return None
    day = _day(int(m[1]), int(m[2]), int(m[3]))
    return None if day is None else ((day, day), m.span())


def _without_year(month: int, day_of_month: int, today: date) -> date | None:
    """The latest such day not after ``today`` (a question about the past), else this year's."""
    this_year = _day(today.year, month, day_of_month)
    if this_year is not None and this_year <= today:
        return this_year
    return _day(today.year - 1, month, day_of_month) or this_year


def _zh_date(question: str, today: date) -> _Found:
    m = _ZH_DATE.search(question)
    if m is None:
        return None
    day = _day(int(m[1]), int(m[2]), int(m[3])) if m[1] else _without_year(int(m[2]), int(m[3]), today)
    return None if day is None else ((day, day), m.span())


def _en_date(question: str, today: date) -> _Found:
    for pattern, month_at, day_at in ((_EN_MONTH_DAY, 1, 2), (_EN_DAY_MONTH, 2, 1)):
        m = pattern.search(question)
        if m is None:
            continue
        month, day_of_month = MONTHS[m[month_at].lower()], int(m[day_at])
        day = _day(int(m[3]), month, day_of_month) if m[3] else _without_year(month, day_of_month, today)
        if day is not None:
            return (day, day), m.span()
    return None


def _ago(question: str, today: date) -> _Found:
    for pattern in (_EN_AGO, _ZH_AGO):
        m = pattern.search(question)
        if m is not None:
            days = int(m[1]) if m[1].isdigit() else ZH_NUMBERS[m[1]]
            day = today - timedelta(days=days)
            return (day, day), m.span()
    return None


def _relative(question: str, today: date) -> _Found:
    for pattern, unit, offset in _RELATIVE:
        m = pattern.search(question)
        if m is None:
            continue
        if unit == "day":
            day = today + timedelta(days=offset)
            return (day, day), m.span()
        if unit == "week":
            monday = today - timedelta(days=today.weekday()) + timedelta(weeks=offset)
            return (monday, min(monday + timedelta(days=6), today)), m.span()
        first = today.replace(day=1)
        if offset < 0:
            last = first - timedelta(days=1)
            return (last.replace(day=1), last), m.span()
        return (first, today), m.span()
    return None


def _weekday(question: str, today: date) -> _Found:
    m = _EN_WEEKDAY.search(question)
    if m is not None:
        target = WEEKDAYS_EN[m[2].lower()]
        back = (today.weekday() - target) % 7 or 7  # the most recent such day before today
        if (m[1] or "").lower() == "this":
            back = (today.weekday() - target) % 7
        day = today - timedelta(days=back)
        return (day, day), m.span()
    m = _ZH_WEEKDAY.search(question)
    if m is not None:
        target = WEEKDAYS_ZH[m[2]]
        weeks_back = len(m[1]) if m[1] and m[1].startswith("上") else 0
        monday = today - timedelta(days=today.weekday()) - timedelta(weeks=weeks_back)
        day = monday + timedelta(days=target)
        if not weeks_back and day > today:  # 周二 said on a Monday: last week's
            day -= timedelta(weeks=1)
        return (day, day), m.span()
    return None


_HEADING_DATE = re.compile(r"^#*\s*(\d{4})-(\d{2})-(\d{2})")
_FILE_DATE = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})\.md$")


def entry_date(path: str, heading: str) -> date | None:
    """The day an entry belongs to: its heading's date (``## 2026-02-24 09:30 — decision``), else its daily file's
    (``memory/2026-02-24.md``); None for undated text (MEMORY.md, rules)."""
    m = _HEADING_DATE.match(heading) or _FILE_DATE.search(path)
    return None if m is None else _day(int(m[1]), int(m[2]), int(m[3]))
