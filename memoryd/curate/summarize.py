"""One JSONL summarizer driven by configuration (seed 002 §3.10, R1 ``JsonlMetricsSummarizer``): a metric is a
:class:`MetricSpec` — which file, which rows, grouped by what, which fields tallied and summed, which rates — and
:func:`summarize` does the same reading, filtering, grouping and counting for all of them. A new metric is a new
spec in ``memoryd/curate/metrics.py``, never a new function.

Rows come from :func:`memoryd.curate.observe.read_rows` (bounded, hostile lines already skipped); here a row that
lacks a field the spec needs, or holds it with the wrong type, is skipped too and counted as ``wrong_shape``. Every
tally is bounded: at most :data:`MAX_VALUES` distinct values per field (the rest under ``(other)``), so a crafted file
of a million distinct reasons cannot blow up the answer. Pure functions, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memoryd.curate.observe import parse_ts

MAX_VALUES = 50  # distinct values tallied per field; the rest are counted under OTHER
MAX_SUM_KEYS = 50  # keys of one summed object (sanitize's ``dropped``)
OTHER = "(other)"
NONE = "(none)"

Scalar = str | int | float | bool | None


# --- conditions on a row's fields ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OneOf:
    values: tuple[Scalar, ...]

    def test(self, value: object) -> bool:
        return _scalar(value) and value in self.values


@dataclass(frozen=True, slots=True)
class Prefix:
    prefix: str

    def test(self, value: object) -> bool:
        return isinstance(value, str) and value.startswith(self.prefix)


@dataclass(frozen=True, slots=True)
class Above:
    """A number greater than ``limit`` (booleans are not numbers here)."""

    limit: float

    def test(self, value: object) -> bool:
        return _number(value) and float(value) > self.limit  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Not:
    cond: Cond

    def test(self, value: object) -> bool:
        return not self.cond.test(value)


Cond = OneOf | Prefix | Above | Not
Match = Mapping[str, Cond]  # dotted field → condition; every one must hold


def one_of(*values: Scalar) -> OneOf:
    return OneOf(tuple(values))


# --- the configuration ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rate:
    """``numerator`` rows over ``denominator`` rows (None: every row of the group), both among the metric's rows."""

    name: str
    numerator: Match
    denominator: Match | None = None


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    file: str  # workspace-relative
    title: str  # a person's words for it (the Markdown report's heading)
    shape: Mapping[str, tuple[type, ...]]  # dotted field → the types it must have: a row otherwise is wrong_shape
    where: Match = field(default_factory=dict)  # the rows this metric counts (others are someone else's)
    group_by: tuple[str, ...] = ()  # dotted fields, the first present one is the group ("" groups are NONE)
    tally: tuple[str, ...] = ()  # fields whose values are counted
    sums: tuple[str, ...] = ()  # numeric fields summed; an object's numeric values are summed key by key
    rates: tuple[Rate, ...] = ()


# --- the answer -----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    rows: int = 0
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    rates: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (numerator, denominator)

    def rate(self, name: str) -> float | None:
        num, den = self.rates.get(name, (0, 0))
        return num / den if den else None


@dataclass(slots=True)
class Summary:
    spec: MetricSpec
    total: Tally = field(default_factory=Tally)
    groups: dict[str, Tally] = field(default_factory=dict)
    wrong_shape: int = 0
    first: datetime | None = None
    last: datetime | None = None


# --- summarizing ----------------------------------------------------------------------------------------------


def summarize(
    spec: MetricSpec, rows: Iterable[Mapping[str, Any]], since: datetime | None = None, until: datetime | None = None
) -> Summary:
    """The summary of ``rows`` (one file's, parsed) under ``spec``, counting those with ``since <= ts < until``."""
    out = Summary(spec)
    for row in rows:
        moment = parse_ts(row.get("ts"))
        if moment is None or not _shaped(row, spec.shape):
            out.wrong_shape += 1
            continue
        if not _matches(row, spec.where):
            continue
        if (since is not None and moment < since) or (until is not None and moment >= until):
            continue
        out.first = moment if out.first is None else min(out.first, moment)
        out.last = moment if out.last is None else max(out.last, moment)
        _count(out.total, spec, row)
        if spec.group_by:
            key = _group_key(row, spec.group_by)
            if key not in out.groups and len(out.groups) >= MAX_VALUES:
                key = OTHER
            _count(out.groups.setdefault(key, Tally()), spec, row)
    return out


def _count(tally: Tally, spec: MetricSpec, row: Mapping[str, Any]) -> None:
    tally.rows += 1
    for name in spec.tally:
        counter = tally.counts.setdefault(name, Counter())
        key = _label(get(row, name))
        counter[key if key in counter or len(counter) < MAX_VALUES else OTHER] += 1
    for name in spec.sums:
        _add(tally.sums, name, get(row, name))
    for rate in spec.rates:
        num, den = tally.rates.get(rate.name, (0, 0))
        if rate.denominator is None or _matches(row, rate.denominator):
            den += 1
            num += _matches(row, rate.numerator)
        tally.rates[rate.name] = (num, den)


def _add(sums: dict[str, float], name: str, value: object) -> None:
    if _number(value):
        sums[name] = sums.get(name, 0) + float(value)  # type: ignore[arg-type]
    elif isinstance(value, dict):
        for key, inner in list(value.items())[:MAX_SUM_KEYS]:
            if _number(inner) and isinstance(key, str):
                label = f"{name}.{key}"
                if label in sums or len(sums) < MAX_SUM_KEYS:
                    sums[label] = sums.get(label, 0) + float(inner)


def get(row: Mapping[str, Any], dotted: str) -> object:
    """The value at ``dotted`` (``counts.added``), or None."""
    value: object = row
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _group_key(row: Mapping[str, Any], fields: tuple[str, ...]) -> str:
    for name in fields:
        value = get(row, name)
        if value is not None and value != "":
            return _label(value)
    return NONE


def _label(value: object) -> str:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value[:100] if value else NONE
    if isinstance(value, int | float):
        return str(value)
    return "?"


def _shaped(row: Mapping[str, Any], shape: Mapping[str, tuple[type, ...]]) -> bool:
    for name, types in shape.items():
        value = get(row, name)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return False
    return True


def _matches(row: Mapping[str, Any], match: Match) -> bool:
    return all(cond.test(get(row, name)) for name, cond in match.items())


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
