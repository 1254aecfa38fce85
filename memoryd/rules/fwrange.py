"""Firmware versions and version ranges (``fw_range``) for rules.

``resolve {model_id, fw_version}`` keeps the rules whose ``fw_range`` contains the firmware version, and when
several apply, a narrower range beats a wider one.

Versions
--------
``[v|V]RELEASE[-PRERELEASE][+BUILD]``, surrounding ASCII whitespace stripped, at most 64 characters.

- ``RELEASE``: 1 to 6 dot-separated non-negative decimal integers (``1``, ``1.2``, ``1.2.3.4``). No sign; leading
  zeros are allowed and ignored (``01.2`` is ``1.2``).
- ``PRERELEASE``: dot-separated identifiers of ``[0-9A-Za-z-]+`` (``rc.1``, ``beta-2``). An all-digit identifier is
  numeric, leading zeros ignored (``rc.01`` is ``rc.1``).
- ``BUILD``: dot-separated identifiers of ``[0-9A-Za-z-]+``; parsed and ignored (``1.2.3+a`` equals ``1.2.3+b``).

Anything else (empty, ``1..2``, ``1.2.``, ``-1``, ``1.2.3.4.5.6.7``, non-ASCII digits, control characters) is
rejected with ``FwRangeError``.

Order:

- Releases compare component by component, numerically, the shorter padded with zeros:
  ``1.2 == 1.2.0 == 1.2.0.0 < 1.2.0.1 < 1.10``.
- A pre-release sorts before its release: ``1.3.0-rc.1 < 1.3.0``, and after every lower release:
  ``1.2.99 < 1.3.0-alpha``.
- Pre-releases of the same release compare as in SemVer 2.0 §11: identifier by identifier, numeric identifiers
  numerically, numeric before alphanumeric, alphanumeric in ASCII order (``RC`` < ``rc``), and when all shared
  identifiers are equal the longer list is greater:
  ``1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-alpha.beta < 1.0.0-beta < 1.0.0-beta.2 < 1.0.0-beta.11 < 1.0.0-rc.1 < 1.0.0``.

Ranges
------
At most 140 characters (each version in it at most 64), surrounding ASCII whitespace stripped. One of:

- ``*`` (also ``x``, ``X``): every version.
- Wildcard ``1.*``, ``1.2.*``, ``1.2.x``, ``v1.2.X`` (1 to 5 numeric components, then ``*``/``x``/``X`` as the
  last component only): every version whose zero-padded release starts with those components, pre-releases
  included. ``1.2.*`` contains ``1.2``, ``1.2.0-rc.1`` and ``1.2.9.1``; not ``1.3.0-rc.1`` nor ``1.20.0``.
- Exact ``1.2.3`` or ``=1.2.3``: versions equal to it in the order above (``1.2.3.0`` and ``1.2.3+build`` match,
  ``1.2.3-rc.1`` does not). ``1.2.3-rc.1`` matches that pre-release only.
- Comparators ``>=V``, ``>V``, ``<=V``, ``<V`` (whitespace allowed after the operator), one or two of them
  separated by whitespace and/or one comma, meaning their intersection: ``>=1.2.0 <1.3.0``, ``>=1.2.0,<1.3.0``,
  ``<2``. At most one lower bound (``>=``/``>``) and one upper bound (``<=``/``<``); a range that no version can
  satisfy (``>=2.0 <1.0``, ``>1.0 <1.0.0``, ``<0``) is an error. ``=`` cannot be combined with a comparator.

Pre-releases at bounds. A bound written *without* a pre-release treats the release together with its
pre-releases as one block, so ``>=1.2.0 <1.3.0`` selects exactly the versions ``1.2.*`` does:

- ``>=X`` includes X's pre-releases (``>=1.3.0`` contains ``1.3.0-rc.1``);
- ``<X`` excludes X's pre-releases (``<1.3.0`` does not contain ``1.3.0-rc.1``);
- ``>X`` excludes X and its pre-releases;
- ``<=X`` includes X and its pre-releases.

A bound written *with* a pre-release compares exactly: ``>=1.3.0-rc.2`` contains ``1.3.0-rc.10`` and ``1.3.0``,
not ``1.3.0-rc.1``; ``<1.3.0-rc.1`` contains ``1.3.0-beta`` and ``1.2.9``.

Normalised text. ``FwRange.text`` drops ``v``, ``=``, build metadata and leading zeros, writes wildcards with
``*``, and writes comparators as ``lower upper`` separated by one space: ``V1.2`` -> ``1.2``, ``1.2.x`` -> ``1.2.*``,
``<1.3.0, >=1.2.0`` -> ``>=1.2.0 <1.3.0``, ``x`` -> ``*``. Trailing zero components are kept (``1.2`` stays ``1.2``),
so two texts can select the same versions (``1.2.*`` and ``>=1.2 <1.3``).

Width (narrowness). ``FwRange.width()`` is ``(unbounded sides, span)``; smaller is narrower:

- unbounded sides: ``*`` has 2, ``>=1.0`` and ``<2`` have 1, other wildcards, exact versions and two-sided
  intervals 0. No version is below ``0-0``, so a lower bound there bounds nothing and counts as unbounded:
  ``>=0`` has 2 like ``*``; ``>=0 <2`` has 1 like ``<2``; ``0.*`` and ``0.0.*`` have 1 (else ``<=0``, which has
  no lower bound, would be wider than ``0.*``, which contains it);
- span: each bound is read as a number, the release as 6 digits in base 2**32 (components of 2**32 - 1 or more
  saturate), times two, plus one just above a release's pre-releases; span is upper minus lower, an unbounded side
  counting as the end of the number line. An exact version has span 0.

If range A selects a subset of range B's versions, ``A.width() <= B.width()``. Ties between different ranges are
possible (``1.2.*`` and ``>=1.2 <1.3``; ``1.3.0-alpha`` and ``1.3.0-beta`` as bounds): callers break them.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["FwRange", "FwRangeError", "Version", "parse_range", "parse_version"]

MAX_VERSION_LENGTH: Final = 64
MAX_RANGE_LENGTH: Final = 140
MAX_COMPONENTS: Final = 6

_WS: Final = " \t\n\r\f\v"
_IDENT = r"[0-9A-Za-z-]+"
_VERSION_RE: Final = re.compile(
    rf"[vV]?(?P<release>[0-9]+(?:\.[0-9]+){{0,{MAX_COMPONENTS - 1}}})"
    rf"(?:-(?P<pre>{_IDENT}(?:\.{_IDENT})*))?"
    rf"(?:\+{_IDENT}(?:\.{_IDENT})*)?",
    re.ASCII,
)
_ANY_RE: Final = re.compile(r"[*xX]")
_WILDCARD_RE: Final = re.compile(rf"[vV]?(?P<prefix>[0-9]+(?:\.[0-9]+){{0,{MAX_COMPONENTS - 2}}})\.[*xX]", re.ASCII)
# One or two comparators; an empty version is captured so '>=' gets a precise message.
_CMP = r"(>=|<=|>|<|=)\s*([^\s,<>=]*)"
_COMPARATORS_RE: Final = re.compile(rf"{_CMP}(?:(?:\s*,\s*|\s+){_CMP})?", re.ASCII)
_DIGITS_RE: Final = re.compile(r"[0-9]+", re.ASCII)
_IDENT_RE: Final = re.compile(_IDENT, re.ASCII)

_RANGE_HINT: Final = "expected a version like 1.2.3, a wildcard like 1.2.*, or comparators like '>=1.2.0 <1.3.0'"
_VERSION_HINT: Final = (
    "expected a version like 1.2.3 or v1.2.3-rc.1+build.5 "
    "(1 to 6 numeric components, optional -prerelease, optional +build)"
)

# Sort keys: (r0, ..., r5, state, ids), release zero-padded to 6 components.
# state 0 = pre-release (ids = ((0, n) | (1, s), ...)), state 1 = release (ids = ()).
# Bound-only keys that no version has:
#   FLOOR(r) = (r0, ..., r5)              just below r's pre-releases
#   CEIL(r)  = (r0, ..., r5, 2)           just above r
#   SUCC(p)  = (r0, ..., r5, 0, ids + ((-1,),))  just above pre-release p
Key = tuple[Any, ...]
_BOTTOM: Final[Key] = ()  # below every key
_TOP: Final[Key] = (math.inf,)  # above every key
_SUCC_MARK: Final = (-1,)  # sorts before every identifier (0, n) / (1, s)
_MIN_PRE: Final = ((0, 0),)  # the smallest pre-release: '-0'
_LOWEST: Final[Key] = (*(0,) * MAX_COMPONENTS, 0, _MIN_PRE)  # the lowest version: 0-0

_RADIX: Final = 2**32
_SATURATE: Final = _RADIX - 1
_NUM_TOP: Final = 2 * _RADIX**MAX_COMPONENTS  # above every bound number


class FwRangeError(ValueError):
    """A version or version range that does not parse, or a range no version can satisfy."""


def _quote(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _ident_key(ident: int | str) -> tuple[int, int] | tuple[int, str]:
    return (0, ident) if isinstance(ident, int) else (1, ident)


@dataclass(frozen=True, slots=True, order=False)
class Version:
    """A parsed version. Equality and hashing follow the version order (``1.2 == 1.2.0``); sort with ``key()``."""

    release: tuple[int, ...]
    pre: tuple[int | str, ...] = ()  # empty for a release
    _key: Key = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 1 <= len(self.release) <= MAX_COMPONENTS or any(type(c) is not int or c < 0 for c in self.release):
            raise FwRangeError(f"release {self.release!r}: expected 1 to 6 non-negative integers")
        for ident in self.pre:
            if type(ident) is int:
                ok = ident >= 0
            else:
                ok = isinstance(ident, str) and bool(_IDENT_RE.fullmatch(ident)) and not _DIGITS_RE.fullmatch(ident)
            if not ok:
                raise FwRangeError(
                    f"pre-release {self.pre!r}: expected non-negative ints and non-numeric strings of [0-9A-Za-z-]"
                )
        padded = self.release + (0,) * (MAX_COMPONENTS - len(self.release))
        if self.pre:
            key: Key = (*padded, 0, tuple(_ident_key(i) for i in self.pre))
        else:
            key = (*padded, 1, ())
        object.__setattr__(self, "_key", key)

    def key(self) -> Key:
        """A totally ordered sort key: ``a.key() < b.key()`` iff a precedes b."""
        return self._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __str__(self) -> str:
        text = ".".join(map(str, self.release))
        return f"{text}-{'.'.join(map(str, self.pre))}" if self.pre else text


@functools.lru_cache(maxsize=4096)
def parse_version(text: str) -> Version:
    """Parse a version (grammar in the module docstring); raises ``FwRangeError``."""
    stripped = text.strip(_WS)
    if len(stripped) > MAX_VERSION_LENGTH:
        raise FwRangeError(f"{_quote(text)}: too long ({len(stripped)} characters, at most {MAX_VERSION_LENGTH})")
    m = _VERSION_RE.fullmatch(stripped)
    if m is None:
        raise FwRangeError(f"{_quote(text)}: {_VERSION_HINT}")
    release = tuple(int(c) for c in m["release"].split("."))
    pre_text = m["pre"]
    pre: tuple[int | str, ...] = ()
    if pre_text is not None:
        pre = tuple(int(i) if _DIGITS_RE.fullmatch(i) else i for i in pre_text.split("."))
    return Version(release, pre)


# --- bounds ---------------------------------------------------------------------------------------------------


def _floor(v: Version) -> Key:
    return v._key[:MAX_COMPONENTS]


def _ceil(v: Version) -> Key:
    return (*v._key[:MAX_COMPONENTS], 2)


def _succ(v: Version) -> Key:
    """The bound just above pre-release ``v``."""
    key = v._key
    return (*key[:MAX_COMPONENTS], 0, (*key[MAX_COMPONENTS + 1], _SUCC_MARK))


def _bump(release: tuple[int, ...]) -> tuple[int, ...]:
    """The zero-padded release just after every release starting with ``release`` (``1.2`` -> ``1.3.0.0.0.0``)."""
    bumped = (*release[:-1], release[-1] + 1)
    return bumped + (0,) * (MAX_COMPONENTS - len(bumped))


def _lowest_version_at(lo: Key) -> Key:
    """The key of the lowest version at or above bound ``lo``."""
    if lo == _BOTTOM:
        return _LOWEST
    release = lo[:MAX_COMPONENTS]
    if len(lo) == MAX_COMPONENTS:  # FLOOR
        return (*release, 0, _MIN_PRE)
    state = lo[MAX_COMPONENTS]
    if state == 2:  # CEIL
        return (*_bump(release), 0, _MIN_PRE)
    ids = lo[MAX_COMPONENTS + 1]
    if ids and ids[-1] == _SUCC_MARK:  # SUCC: the next version is the pre-release with '.0' appended
        return (*release, 0, (*ids[:-1], (0, 0)))
    return lo


def _release_number(release: tuple[int, ...]) -> tuple[int, bool]:
    """The release read in base 2**32, and whether a component saturated (then the rest saturates too)."""
    number = 0
    saturated = False
    for c in release:
        if saturated or c >= _SATURATE:
            saturated = True
            c = _SATURATE
        number = number * _RADIX + c
    return number, saturated


def _bound_number(bound: Key) -> int:
    """Read a bound as a number; bounds with no version between them read the same, order is kept (not strictly)."""
    release: tuple[int, ...] = bound[:MAX_COMPONENTS]
    above_pre = 0
    if len(bound) > MAX_COMPONENTS:
        state = bound[MAX_COMPONENTS]
        if state == 2:  # CEIL(r) selects the same versions as FLOOR(next release)
            release = (*release[:-1], release[-1] + 1)
        elif state == 1:  # a release: just above its pre-releases
            above_pre = 1
    number, saturated = _release_number(release)
    return 2 * number + (1 if saturated else above_pre)


def _lower_bound(op: str, v: Version) -> Key:
    if op == ">=":
        return v._key if v.pre else _floor(v)
    return _succ(v) if v.pre else _ceil(v)  # '>'


def _upper_bound(op: str, v: Version) -> Key:
    if op == "<":
        return v._key if v.pre else _floor(v)
    return _succ(v) if v.pre else _ceil(v)  # '<='


# --- ranges ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FwRange:
    """A firmware version range; ``FwRange(text)`` parses and normalises ``text`` (or use cached ``parse_range``).

    Two ranges are equal when their normalised texts are equal.
    """

    text: str
    _lo: Key = field(init=False, repr=False, compare=False)  # inclusive
    _hi: Key = field(init=False, repr=False, compare=False)  # exclusive
    _width: tuple[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        text, lo, hi, width = _parse(self.text)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "_lo", lo)
        object.__setattr__(self, "_hi", hi)
        object.__setattr__(self, "_width", width)

    def contains(self, version: Version | str) -> bool:
        """Whether ``version`` is in the range; a ``str`` is parsed (``FwRangeError`` if it is not a version)."""
        key = version._key if isinstance(version, Version) else parse_version(version)._key
        return self._lo <= key < self._hi

    def width(self) -> tuple[int, int]:
        """``(unbounded sides, span)``: smaller is narrower; a subset range never has a larger width."""
        return self._width

    def __str__(self) -> str:
        return self.text


def _parse(text: str) -> tuple[str, Key, Key, tuple[int, int]]:
    """Normalised text, inclusive lower key, exclusive upper key, width."""
    s = text.strip(_WS)
    if not s:
        raise FwRangeError(f"{_quote(text)}: empty; {_RANGE_HINT}")
    if len(s) > MAX_RANGE_LENGTH:
        raise FwRangeError(f"{_quote(text)}: too long ({len(s)} characters, at most {MAX_RANGE_LENGTH})")
    if _ANY_RE.fullmatch(s):
        return "*", _BOTTOM, _TOP, (2, _NUM_TOP)

    m = _WILDCARD_RE.fullmatch(s)
    if m is not None:
        prefix = tuple(int(c) for c in m["prefix"].split("."))
        lo: Key = prefix + (0,) * (MAX_COMPONENTS - len(prefix))
        hi: Key = _bump(prefix)
        span = _bound_number(hi) - _bound_number(lo)
        unbounded = 0 if any(prefix) else 1  # 0.* starts at the lowest version
        return ".".join(map(str, prefix)) + ".*", lo, hi, (unbounded, span)

    if s[0] not in "<>=":
        if len(s) > MAX_VERSION_LENGTH:
            raise FwRangeError(f"{_quote(text)}: too long ({len(s)} characters, at most {MAX_VERSION_LENGTH})")
        try:
            v = parse_version(s)
        except FwRangeError:
            raise FwRangeError(f"{_quote(text)}: {_RANGE_HINT}") from None
        return _exact(v)

    comparators = _comparators(text, s)
    if comparators[0][0] == "=":
        if len(comparators) > 1:
            raise FwRangeError(f"{_quote(text)}: '=' cannot be combined with another comparator; {_RANGE_HINT}")
        return _exact(comparators[0][1])
    if len(comparators) > 1 and comparators[1][0] == "=":
        raise FwRangeError(f"{_quote(text)}: '=' cannot be combined with another comparator; {_RANGE_HINT}")
    return _bounded(text, comparators)


def _comparators(text: str, s: str) -> list[tuple[str, Version]]:
    """The one or two ``(operator, version)`` of a comparator range (``s``: ``text`` stripped)."""
    m = _COMPARATORS_RE.fullmatch(s)
    if m is None:
        raise FwRangeError(f"{_quote(text)}: {_RANGE_HINT}")
    comparators: list[tuple[str, Version]] = []
    for op, vtext in ((m[1], m[2]), (m[3], m[4])):
        if op is None:
            continue
        if not vtext:
            raise FwRangeError(f"{_quote(text)}: missing version after {op!r}; {_RANGE_HINT}")
        try:
            comparators.append((op, parse_version(vtext)))
        except FwRangeError as exc:
            raise FwRangeError(f"{_quote(text)}: bad version after {op!r}: {exc}") from None
    return comparators


def _bounded(text: str, comparators: list[tuple[str, Version]]) -> tuple[str, Key, Key, tuple[int, int]]:
    """A range of at most one lower and one upper bound: normalised text, keys and width (as :func:`_parse`)."""
    lower = [(op, v) for op, v in comparators if op[0] == ">"]
    upper = [(op, v) for op, v in comparators if op[0] == "<"]
    for side, name in ((lower, "lower"), (upper, "upper")):
        if len(side) > 1:
            both = " and ".join(f"{op}{v}" for op, v in side)
            raise FwRangeError(
                f"{_quote(text)}: two {name} bounds ({both}); use at most one of '>=', '>' and one of '<=', '<'"
            )
    parts: list[str] = []
    lo, hi = _BOTTOM, _TOP
    unbounded = 2
    if lower:
        op, v = lower[0]
        lo = _lower_bound(op, v)
        parts.append(f"{op}{v}")
        if _lowest_version_at(lo) != _LOWEST:  # '>=0' bounds nothing: no version is below 0-0
            unbounded -= 1
    if upper:
        op, v = upper[0]
        hi = _upper_bound(op, v)
        parts.append(f"{op}{v}")
        unbounded -= 1
    normalised = " ".join(parts)
    if not _lowest_version_at(lo) < hi:
        raise FwRangeError(f"{_quote(text)}: empty range, no version is {' and '.join(parts)}")
    lo_number = _bound_number(lo) if lower else 0  # 0 for any bound at the lowest version too
    hi_number = _bound_number(hi) if upper else _NUM_TOP
    return normalised, lo, hi, (unbounded, hi_number - lo_number)


def _exact(v: Version) -> tuple[str, Key, Key, tuple[int, int]]:
    return str(v), v._key, (_succ(v) if v.pre else _ceil(v)), (0, 0)


@functools.lru_cache(maxsize=4096)
def parse_range(text: str) -> FwRange:
    """Parse a range (grammar in the module docstring); cached; raises ``FwRangeError``."""
    return FwRange(text)
