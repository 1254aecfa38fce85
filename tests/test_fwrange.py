"""fw_range: version grammar and order, range forms, pre-release rules at bounds, errors, normalisation, width."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memoryd.rules.fwrange import FwRange, FwRangeError, Version, parse_range, parse_version

# --- an independent oracle, written from the spec on structured versions ---------------------------------------


@dataclass(frozen=True)
class V:
    release: tuple[int, ...]
    pre: tuple[str, ...] = ()

    def text(self) -> str:
        rel = ".".join(map(str, self.release))
        return f"{rel}-{'.'.join(self.pre)}" if self.pre else rel


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def cmp_release(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    return _cmp(a + (0,) * (n - len(a)), b + (0,) * (n - len(b)))


def cmp_pre(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    if not a or not b:
        return _cmp(not a, not b)  # a release is above its pre-releases
    for x, y in zip(a, b, strict=False):
        if x.isdigit() and y.isdigit():
            c = _cmp(int(x), int(y))
        elif x.isdigit() or y.isdigit():
            c = -1 if x.isdigit() else 1
        else:
            c = _cmp(x, y)
        if c:
            return c
    return _cmp(len(a), len(b))


def cmp_v(a: V, b: V) -> int:
    return cmp_release(a.release, b.release) or cmp_pre(a.pre, b.pre)


# A range as a structure: ("any",), ("wild", prefix), ("exact", V), ("cmp", ((op, V), ...)).
R = tuple[object, ...]


def oracle_contains(r: R, v: V) -> bool:
    kind = r[0]
    if kind == "any":
        return True
    if kind == "wild":
        prefix = r[1]
        assert isinstance(prefix, tuple)
        return cmp_release(v.release, prefix) >= 0 and cmp_release(v.release, (*prefix[:-1], prefix[-1] + 1)) < 0
    if kind == "exact":
        assert isinstance(r[1], V)
        return cmp_v(v, r[1]) == 0
    comparators = r[1]
    assert isinstance(comparators, tuple)
    for op, bound in comparators:
        # Without a pre-release a bound stands for the release and its pre-releases: compare releases only.
        c = cmp_v(v, bound) if bound.pre else cmp_release(v.release, bound.release)
        ok = {">=": c >= 0, ">": c > 0, "<=": c <= 0, "<": c < 0}[op]
        if not ok:
            return False
    return True


def render(r: R, style: int = 0) -> str:
    kind = r[0]
    if kind == "any":
        return "*xX"[style % 3]
    if kind == "wild":
        prefix = r[1]
        assert isinstance(prefix, tuple)
        return ("v" if style & 4 else "") + ".".join(map(str, prefix)) + "." + "*xX"[style % 3]
    if kind == "exact":
        assert isinstance(r[1], V)
        return ("=" if style & 1 else "") + r[1].text()
    comparators = r[1]
    assert isinstance(comparators, tuple)
    parts = [f"{op}{b.text()}" for op, b in comparators]
    if style & 2:
        parts.reverse()
    return [" ", ",", " , ", "  "][style % 4].join(parts)


# --- grids and strategies ----------------------------------------------------------------------------------------

POOL_RELEASES = [r for n in (1, 2, 3) for r in itertools.product((0, 1, 2), repeat=n)]
POOL_PRES: list[tuple[str, ...]] = [(), ("alpha",), ("rc", "1")]
POOL_VERSIONS = [V(r, p) for r in POOL_RELEASES for p in POOL_PRES]

# Dense enough that between any two different bounds built from the pool there is a grid version.
GRID_PRES: list[tuple[str, ...]] = [
    (),
    ("0",),
    ("alpha",),
    ("alpha", "0"),
    ("beta",),
    ("rc", "1"),
    ("rc", "1", "0"),
    ("rc", "2"),
]
GRID = [V(r, p) for n in (1, 2, 3, 4) for r in itertools.product((0, 1, 2, 3), repeat=n) for p in GRID_PRES]
GRID_PARSED = [parse_version(v.text()) for v in GRID]

pool_version = st.sampled_from(POOL_VERSIONS)
lower_op = st.sampled_from([">=", ">"])
upper_op = st.sampled_from(["<=", "<"])
pool_range: st.SearchStrategy[R] = st.one_of(
    st.just(("any",)),
    st.sampled_from(POOL_RELEASES).map(lambda p: ("wild", p)),
    pool_version.map(lambda v: ("exact", v)),
    st.tuples(st.sampled_from([">=", ">", "<=", "<"]), pool_version).map(lambda c: ("cmp", (c,))),
    st.tuples(st.tuples(lower_op, pool_version), st.tuples(upper_op, pool_version)).map(lambda cs: ("cmp", cs)),
)

ident = st.one_of(
    st.integers(0, 30).map(str),
    st.sampled_from(["01", "007"]),
    st.text(alphabet="abzAZ-0", min_size=1, max_size=4).filter(lambda s: not s.isdigit()),
)
component = st.one_of(st.integers(0, 12), st.sampled_from([2**32 - 1, 2**32, 10**12]))
any_version = st.builds(
    V,
    st.lists(component, min_size=1, max_size=6).map(tuple),
    st.lists(ident, max_size=4).map(tuple),
)


def text_of(v: V) -> str:
    text = v.text()
    assume(len(text) <= 64)  # longer versions are rejected; tested separately
    return text


def try_parse(text: str) -> FwRange | None:
    try:
        return parse_range(text)
    except FwRangeError:
        return None


def members(r: FwRange) -> frozenset[int]:
    return frozenset(i for i, v in enumerate(GRID_PARSED) if r.contains(v))


# --- versions ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "release", "pre"),
    [
        ("1", (1,), ()),
        ("1.2.3", (1, 2, 3), ()),
        ("v1.2.3", (1, 2, 3), ()),
        ("V01.002", (1, 2), ()),
        ("1.2.3.4.5.6", (1, 2, 3, 4, 5, 6), ()),
        ("  1.2.3-rc.1+build.5 \n", (1, 2, 3), ("rc", 1)),
        ("1.2.3-rc.01", (1, 2, 3), ("rc", 1)),
        ("1.2.3-0.a-b.--", (1, 2, 3), (0, "a-b", "--")),
        ("1.2.3+exp.sha.5114f85", (1, 2, 3), ()),
        ("1.0.0-x.7.z.92", (1, 0, 0), ("x", 7, "z", 92)),
        ("0", (0,), ()),
        ("1.2.3-" + "a" * 58, (1, 2, 3), ("a" * 58,)),  # 64 characters
    ],
)
def test_parse_version(text: str, release: tuple[int, ...], pre: tuple[int | str, ...]) -> None:
    v = parse_version(text)
    assert (v.release, v.pre) == (release, pre)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "v",
        "vv1",
        "1..2",
        "1.2.",
        ".1",
        "+1",
        "-1",
        "1.-2",
        "1.2.3.4.5.6.7",
        "1.2.3-",
        "1.2.3+",
        "1.2.3-rc..1",
        "1.2.3-rc_1",
        "1.2.3-rc.1+",
        "1.2.3 4",
        "1 .2",
        "1.2.*",
        "x",
        "\u0661.2",  # ARABIC-INDIC DIGIT ONE
        "1.2.3\u00a0",
        "1\x00",
        "1.2.3-" + "a" * 59,  # 65 characters
        "1" * 65,
    ],
)
def test_parse_version_errors(text: str) -> None:
    with pytest.raises(FwRangeError):
        parse_version(text)


def test_version_error_messages() -> None:
    with pytest.raises(FwRangeError, match=r"^'1\.\.2': expected a version like 1\.2\.3"):
        parse_version("1..2")
    with pytest.raises(FwRangeError, match=r"too long \(65 characters, at most 64\)"):
        parse_version("1" * 65)
    assert issubclass(FwRangeError, ValueError)


SEMVER_PRECEDENCE = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
]


def test_semver_precedence_example() -> None:
    versions = [parse_version(t) for t in SEMVER_PRECEDENCE]
    for a, b in itertools.pairwise(versions):
        assert a.key() < b.key(), (a, b)
    shuffled = versions[::-1]
    assert sorted(shuffled, key=Version.key) == versions


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("1.2", "1.2.0.1"),
        ("1.2.9", "1.10"),
        ("1.2.99", "1.3.0-alpha"),
        ("1.3.0-rc.1", "1.3.0"),
        ("1.3.0-rc.1", "1.3-rc.2"),
        ("1.0.0-RC.1", "1.0.0-rc.1"),  # ASCII order
        ("1.0.0-rc.9", "1.0.0-rc.10"),  # numerically
        ("1.0.0-rc.999", "1.0.0-rc.a"),  # numeric before alphanumeric
        ("1.0.0-rc", "1.0.0-rc.0"),  # longer wins
        ("0-0", "0"),
        ("4294967295", "4294967296"),
    ],
)
def test_version_order(lower: str, higher: str) -> None:
    assert parse_version(lower).key() < parse_version(higher).key()


@pytest.mark.parametrize(
    ("a", "b"),
    [("1.2", "1.2.0"), ("1.2", "1.2.0.0.0.0"), ("v1.2.3", "1.2.3+build"), ("01.2", "1.02"), ("1-rc.01", "1-rc.1")],
)
def test_version_equality_follows_the_order(a: str, b: str) -> None:
    va, vb = parse_version(a), parse_version(b)
    assert va.key() == vb.key()
    assert va == vb
    assert hash(va) == hash(vb)


def test_version_str_and_construction() -> None:
    assert str(parse_version("v01.2.3-rc.01+b")) == "1.2.3-rc.1"
    assert Version((1, 2), ("rc", 1)) == parse_version("1.2-rc.1")
    bad: list[tuple[tuple[int, ...], tuple[int | str, ...]]] = [
        ((), ()),
        ((-1,), ()),
        ((1,) * 7, ()),
        ((1,), ("01",)),
        ((1,), ("",)),
        ((1,), ("r c",)),
        ((1,), (-1,)),
    ]
    for release, pre in bad:
        with pytest.raises(FwRangeError):
            Version(release, pre)


@given(any_version, any_version)
def test_key_order_agrees_with_oracle(a: V, b: V) -> None:
    ka, kb = parse_version(text_of(a)).key(), parse_version(text_of(b)).key()
    assert _cmp(ka, kb) == cmp_v(a, b)


@given(
    any_version,
    st.booleans(),
    st.integers(0, 2),
    st.sampled_from(["", "+b", "+build.5-x"]),
    st.sampled_from(["", " ", "\t\n"]),
)
def test_version_spelling_is_ignored(v: V, vee: bool, zeros: int, build: str, ws: str) -> None:
    rel = ".".join("0" * zeros + str(c) for c in v.release)
    text = f"{ws}{'v' if vee else ''}{rel}{'-' + '.'.join(v.pre) if v.pre else ''}{build}{ws}"
    assume(len(text.strip()) <= 64)
    assert parse_version(text) == parse_version(v.text())


# --- ranges: forms and normalisation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("*", "*"),
        ("x", "*"),
        (" X ", "*"),
        ("1.*", "1.*"),
        ("1.2.*", "1.2.*"),
        ("1.2.x", "1.2.*"),
        ("v1.2.X", "1.2.*"),
        ("01.02.*", "1.2.*"),
        ("1.2.3.4.5.*", "1.2.3.4.5.*"),
        ("1.2.3", "1.2.3"),
        ("=1.2.3", "1.2.3"),
        ("= 1.2.3", "1.2.3"),
        ("V1.2", "1.2"),
        ("1.2.3+build.7", "1.2.3"),
        ("1.2.3-rc.01", "1.2.3-rc.1"),
        (">=1.2.0 <1.3.0", ">=1.2.0 <1.3.0"),
        (">=1.2.0,<1.3.0", ">=1.2.0 <1.3.0"),
        (" >=1.2.0 , <1.3.0 ", ">=1.2.0 <1.3.0"),
        ("<1.3.0 >=1.2.0", ">=1.2.0 <1.3.0"),
        (">= 1.2.0\t< 1.3.0", ">=1.2.0 <1.3.0"),
        (">=v1.2", ">=1.2"),
        ("<=2-rc.1+b", "<=2-rc.1"),
        (">1", ">1"),
        ("<2", "<2"),
    ],
)
def test_normalised_text(text: str, normalised: str) -> None:
    r = parse_range(text)
    assert r.text == normalised
    assert str(r) == normalised
    assert parse_range(normalised) == r
    assert FwRange(text) == r


@pytest.mark.parametrize(
    ("range_text", "inside", "outside"),
    [
        ("*", ["0", "0-0", "1.2.3-rc.1", "99999.1"], []),
        ("1.*", ["1", "1.0-0", "1.99.3", "1.2-rc.1"], ["0.9", "2.0-rc.1", "2", "10.0"]),
        ("1.2.*", ["1.2", "1.2.0-rc.1", "1.2.9", "1.2.9.1", "01.2.3"], ["1.3.0-rc.1", "1.20.0", "1.1.99", "1", "12"]),
        ("1.0.*", ["1", "1.0", "1.0.5-beta"], ["1.1", "0.9"]),
        ("1.2.3", ["1.2.3", "1.2.3.0", "v1.2.3+b", "1.2.3.0.0.0"], ["1.2.3-rc.1", "1.2.3.1", "1.2.4", "1.2.2"]),
        ("1.2", ["1.2.0", "1.2"], ["1.2.0-rc.1", "1.2.1"]),
        ("1.2.3-rc.1", ["1.2.3-rc.1", "1.2.3-rc.01+b"], ["1.2.3", "1.2.3-rc.1.0", "1.2.3-rc.2", "1.2.3-rc"]),
        (">=1.2.0 <1.3.0", ["1.2.0-rc.1", "1.2.0", "1.2.9.9"], ["1.3.0-rc.1", "1.3.0", "1.1.9"]),
        (">1.2 <=1.3", ["1.2.0.1", "1.2.1-rc", "1.3-rc.1", "1.3", "1.3.0.0"], ["1.2", "1.2.0-rc.1", "1.3.0.1"]),
        (">=1.3.0-rc.2", ["1.3.0-rc.2", "1.3.0-rc.10", "1.3.0", "2"], ["1.3.0-rc.1", "1.3.0-beta", "1.2.9"]),
        ("<1.3.0-rc.1", ["1.3.0-beta", "1.2.9", "1.3.0-rc.0"], ["1.3.0-rc.1", "1.3.0", "1.3.0-rc.1.0"]),
        (">1.3.0-rc.1", ["1.3.0-rc.1.0", "1.3.0-rc.2", "1.3.0"], ["1.3.0-rc.1", "1.3.0-beta"]),
        ("<=1.3.0-rc.1", ["1.3.0-rc.1", "1.3.0-beta"], ["1.3.0-rc.1.0", "1.3.0"]),
        ("<2", ["0", "1.99", "1.9.9-rc"], ["2-rc.1", "2", "2.0.1"]),
        (">=0", ["0-0", "0", "5"], []),
    ],
)
def test_contains(range_text: str, inside: list[str], outside: list[str]) -> None:
    r = parse_range(range_text)
    for v in inside:
        assert r.contains(v), (range_text, v)
        assert r.contains(parse_version(v))
        assert parse_range(range_text).contains(v)
    for v in outside:
        assert not r.contains(v), (range_text, v)
        assert not r.contains(parse_version(v))
        assert not parse_range(range_text).contains(v)


@pytest.mark.parametrize(
    ("range_text", "version", "expected"),
    [
        # Bounds without a pre-release: the release and its pre-releases are one block.
        (">=1.3.0", "1.3.0-rc.1", True),
        (">=1.3.0", "1.2.9", False),
        ("<1.3.0", "1.3.0-rc.1", False),
        ("<1.3.0", "1.2.9", True),
        (">1.3.0", "1.3.0", False),
        (">1.3.0", "1.3.0-rc.1", False),
        (">1.3.0", "1.3.0.1-rc.1", True),
        (">1.3.0", "1.3.1-alpha", True),
        ("<=1.3.0", "1.3.0", True),
        ("<=1.3.0", "1.3.0-rc.1", True),
        ("<=1.3.0", "1.3.0.1-rc.1", False),
        # Bounds with a pre-release compare exactly.
        (">=1.3.0-rc.1", "1.3.0-beta", False),
        (">=1.3.0-rc.1", "1.3.0-rc.1", True),
        ("<1.3.0-rc.1", "1.3.0-rc.1", False),
        ("<1.3.0-rc.1", "1.3.0-beta.9", True),
        (">1.3.0-rc.1", "1.3.0-rc.1", False),
        ("<=1.3.0-rc.1", "1.3.0-rc.1", True),
    ],
)
def test_prerelease_rules_at_bounds(range_text: str, version: str, expected: bool) -> None:
    assert parse_range(range_text).contains(version) is expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"^'': empty; expected a version like 1\.2\.3, a wildcard like 1\.2\.\*, or comparators like"),
        ("  ", "empty"),
        (
            "1.2.**",
            r"^'1\.2\.\*\*': expected a version like 1\.2\.3, a wildcard like 1\.2\.\*, "
            r"or comparators like '>=1\.2\.0 <1\.3\.0'$",
        ),
        ("1..2", r"^'1\.\.2': expected a version like"),
        (">=", r"^'>=': missing version after '>='"),
        ("<", "missing version after '<'"),
        (">=1,", "expected a version like"),
        (">=1 >=2", r"two lower bounds \(>=1 and >=2\)"),
        ("<1 <=2", "two upper bounds"),
        (">=2 <1", r"empty range, no version is >=2 and <1"),
        (">=2.0 <1.0", "empty range"),
        (">1.0 <1.0.0", "empty range"),
        (">1.0 <=1.0", "empty range"),
        (">=1.0-rc.1 <1.0-rc.1", "empty range"),
        (">1.0-rc.1 <1.0-rc.1.0", "empty range"),
        ("<0", "empty range"),
        ("<0.0.0-0", "empty range"),
        ("1.*.3", "expected a version like"),
        ("*.1", "expected a version like"),
        ("1.x.x", "expected a version like"),
        ("1.2.3.4.5.6.*", "expected a version like"),
        ("=1.2.*", "bad version after '='"),
        (">=1.2.*", "bad version after '>='"),
        (">=1..2", "bad version after '>='"),
        ("=1 <2", "'=' cannot be combined"),
        (">=1 =2", "'=' cannot be combined"),
        ("1.2.3 <2", "expected a version like"),
        (">=1 <2 <3", "expected a version like"),
        ("> =1", "expected a version like"),
        ("=>1", "expected a version like"),
        (">==1", "expected a version like"),
        ("hello", "expected a version like"),
        ("latest", "expected a version like"),
        ("1.2.3 || 2", "expected a version like"),
        ("~1.2", "expected a version like"),
        ("^1.2", "expected a version like"),
        ("1" * 65, r"too long \(65 characters, at most 64\)"),
        (">=" + "1" * 65, "too long"),
        (">=1" + " " * 140 + "<2", r"too long \(145 characters, at most 140\)"),
        ("1.2\x00", r"^'1\.2\\x00': expected a version like"),
        ("\x00", "expected a version like"),
        (">=1\x00", "expected a version like"),
    ],
)
def test_range_errors(text: str, message: str) -> None:
    with pytest.raises(FwRangeError, match=message):
        parse_range(text)
    with pytest.raises(FwRangeError):
        FwRange(text)


def test_long_but_valid_range() -> None:
    lo, hi = "1.2.3-" + "a" * 58, "1.2.4-" + "b" * 58
    assert parse_range(f">={lo} <{hi}").contains("1.2.3")


def test_parse_range_is_cached_and_hashable() -> None:
    assert parse_range("1.2.*") is parse_range("1.2.*")
    assert len({parse_range("1.2.x"), parse_range("1.2.*"), FwRange("v1.2.X")}) == 1
    assert parse_range("1.2.*") != parse_range(">=1.2.0 <1.3.0")


def test_contains_rejects_a_bad_version() -> None:
    with pytest.raises(FwRangeError):
        parse_range("*").contains("garbage")
    with pytest.raises(FwRangeError):
        parse_range("1.2.*").contains("1..2")


# --- ranges: properties against the oracle -----------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(pool_range, st.integers(0, 7))
def test_ranges_agree_with_oracle_on_the_grid(r: R, style: int) -> None:
    expected = [oracle_contains(r, v) for v in GRID]
    parsed = try_parse(render(r, style))
    if parsed is None:  # only ranges that select nothing are rejected
        assert r[0] == "cmp"
        assert not any(expected)
        return
    assert any(expected)
    assert [parsed.contains(v) for v in GRID_PARSED] == expected
    assert parse_range(parsed.text) == parsed  # normalised text parses to itself


@given(pool_range, any_version)
def test_ranges_agree_with_oracle_on_any_version(r: R, v: V) -> None:
    parsed = try_parse(render(r))
    assume(parsed is not None)
    assert parsed is not None
    assert parsed.contains(text_of(v)) is oracle_contains(r, v)


@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=5).map(tuple),
    st.lists(st.integers(0, 6), min_size=1, max_size=6),
    st.lists(ident, max_size=3).map(tuple),
    st.booleans(),
)
def test_wildcard_equals_half_open_interval(
    prefix: tuple[int, ...], tail: list[int], pre: tuple[str, ...], near: bool
) -> None:
    # Versions near the prefix (sharing most of it) make the comparison interesting.
    release = (*prefix[: len(tail) // 2 + 1], *tail)[:6] if near else tuple(tail)
    v = V(release, pre)
    wildcard = parse_range(".".join(map(str, prefix)) + ".*")
    upper = ".".join(map(str, (*prefix[:-1], prefix[-1] + 1)))
    interval = parse_range(f">={'.'.join(map(str, prefix))} <{upper}")
    inside = wildcard.contains(v.text())
    assert inside is interval.contains(v.text())
    assert inside is oracle_contains(("wild", prefix), v)
    assert wildcard.width() == interval.width()


# --- width -------------------------------------------------------------------------------------------------------


def test_width_shape() -> None:
    assert parse_range("*").width()[0] == 2
    assert parse_range(">=1.0").width()[0] == 1
    assert parse_range("<2").width()[0] == 1
    assert parse_range(">=1 <2").width()[0] == 0
    assert parse_range("1.2.*").width()[0] == 0
    assert parse_range("1.2.3").width() == (0, 0)
    assert parse_range("1.2.3-rc.1").width() == (0, 0)


@pytest.mark.parametrize(
    "chain",
    [
        ["1.2.3", "1.2.3.*", "1.2.*", ">=1.2.0 <1.4", "1.*", ">=1.0 <3", ">=1.0", "*"],
        [
            "1.2.3-rc.1",
            ">=1.2.3-rc.1 <=1.2.3",
            ">=1.2.3-rc.1 <1.2.4",
            ">=1.2.3-alpha <1.2.4",
            ">=1.2.3 <1.2.4",
            "1.2.*",
            "<=1.2.99",
            "*",
        ],
        ["1.2.3", "<=1.2.3 >=1.2.3-alpha", ">=1.2.3-0 <1.2.3.1", "1.2.*", "1.*", "<2"],
        ["0.0.1", "0.0.*", "0.*", "<1", "<2", "*"],
        ["4294967295.1", "4294967295.*", ">=4294967294"],
        ["1.4294967294.*", "1.*", ">=1"],
    ],
)
def test_nested_ranges_get_wider(chain: list[str]) -> None:
    ranges = [parse_range(t) for t in chain]
    for inner, outer in itertools.combinations(ranges, 2):
        assert members(inner) <= members(outer), (inner, outer)
        assert inner.width() <= outer.width(), (inner, outer)
        assert not outer.width() < inner.width()


@pytest.mark.parametrize(
    ("narrow", "wide"),
    [
        ("1.2.3", "1.2.3.*"),
        ("1.2.3-rc.1", ">=1.2.3-rc.1 <=1.2.3"),
        ("1.2.3.*", "1.2.*"),
        ("1.2.*", "1.*"),
        ("1.2.*", ">=1.2 <=1.3"),
        (">=1.2.0 <1.3", ">=1.1.9 <1.3"),
        ("1.*", ">=1 <3"),
        (">=1 <3", ">=1"),
        (">=1", ">=0.9"),
        ("<2", "<=2"),
        ("<2", "*"),
        ("<=0", "0.*"),
        ("<0.5", "0.*"),
        ("<1.2", ">=0 <2"),
        ("0.*", "<2"),
        ("1.4294967294.*", "1.*"),
    ],
)
def test_strictly_narrower(narrow: str, wide: str) -> None:
    assert parse_range(narrow).width() < parse_range(wide).width()
    assert not parse_range(wide).width() < parse_range(narrow).width()


def test_width_ties_for_equal_sets() -> None:
    # No version is below 0-0: a lower bound there counts as no lower bound.
    assert parse_range(">=0").width() == parse_range("*").width() == parse_range(">=0.0-0").width()
    assert parse_range(">=0 <2").width() == parse_range("<2").width()
    assert parse_range("0.*").width() == parse_range("<1").width()
    assert parse_range("0.0.*").width()[0] == 1
    assert parse_range("1.2.*").width() == parse_range(">=1.2.0 <1.3").width()
    assert parse_range("<=1.2").width() == parse_range("<1.2.0.0.0.1").width()
    assert parse_range(">=1.2.3-rc.1 <1.2.3-rc.1.0").width() == (0, 0)


@settings(max_examples=300, deadline=None)
@given(pool_range, pool_range)
def test_containment_implies_width_order(a: R, b: R) -> None:
    ra, rb = try_parse(render(a)), try_parse(render(b))
    assume(ra is not None and rb is not None)
    assert ra is not None and rb is not None
    ma, mb = members(ra), members(rb)
    if ma < mb:  # A is strictly inside B (the grid witnesses a version of B outside A)
        assert ra.width() <= rb.width(), (ra, rb)
        assert not rb.width() < ra.width()
    if ma == mb and ra.width()[0] == rb.width()[0]:  # the same versions, bounded on the same sides
        assert ra.width() == rb.width(), (ra, rb)


@given(pool_range, pool_range, pool_range)
def test_width_is_a_total_order_key(a: R, b: R, c: R) -> None:
    parsed = [try_parse(render(r)) for r in (a, b, c)]
    ranges = [r for r in parsed if r is not None]
    ordered = sorted(ranges, key=FwRange.width)
    for x, y in itertools.pairwise(ordered):
        assert not y.width() < x.width()


# Speed: bench/bench_text.py (FwRange.contains per call).
