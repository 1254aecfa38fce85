"""YAML from files the daemon did not write (rule files arrive by git clone): bounded before it is parsed, and only
values that can travel on the wire after.

Three things in a small YAML file can take the daemon down, and each is refused here with :class:`YamlRefused`:

- **Aliases** (``*name``): a "billion laughs" file of nested aliases, 9 levels in 1,153 bytes, expands to more than
  9 GB once anything walks it (validation, flattening, JSON). Rule files have no use for them, and the daemon never
  writes one (:func:`dump` turns them off), so any alias is refused rather than counted.
- **Nesting**: libyaml's composer recurses in C, without Python's recursion limit: ``[[[…]]]`` 100,000 deep
  (200 kB) kills the process with a segmentation fault, and its parser slows down with the square of the depth. An
  upper bound of the depth is read off the text before any parsing (:func:`depth_bound`) and must stay under
  :data:`MAX_DEPTH`.
- **Values the wire cannot carry** (:func:`check_values`): integers outside 64 bits (orjson refuses them), NaN and
  infinities (JSON has none), bytes (``!!binary``), sets (``!!set``) and other constructed types. Unknown tags
  (``!!python/object``) are refused by the safe loader itself.
"""

from __future__ import annotations

import datetime as dt
import math
import operator
import re
from itertools import accumulate
from typing import Any

import yaml

MAX_DEPTH = 128  # nesting a rule file may have, counted generously (depth_bound over-estimates)
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what orjson serialises
# A block line's indentation, with the compact-collection indicators that open a nested node on the same line
# ("- - x", "? ? x", "- key: - x" is invalid, but "- key:" opens a mapping inside the sequence).
_BLOCK_PREFIX = re.compile(r"^[ \t]*(?:[-?:][ \t]+)*", re.MULTILINE)
_FLOW = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}

SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlRefused(ValueError):
    """The YAML is refused before (or instead of) being used; the message says why, for a person."""


def depth_bound(text: str) -> int:
    """An upper bound of the nesting depth of ``text`` as YAML, from the text alone (linear, no parsing).

    A block collection nested in another is indented further, or opened by an indicator on the same line, so a
    line's prefix length (indentation plus indicators) bounds the block depth there, twice over for sequences that
    share their parent mapping's indentation. Flow collections add at most the running balance of their brackets
    (brackets inside quoted strings only make the bound larger)."""
    block = max(map(len, _BLOCK_PREFIX.findall(text)), default=0)
    # The deepest point of the bracket balance, counted from its lowest point before (a closing bracket too many,
    # say in a comment, must not hide openings after it): max of S[i] - min(S[0..i]) over the prefix sums S.
    sums = list(accumulate(map(_STEP.__getitem__, _FLOW.findall(text)), initial=0))
    deepest = max(map(operator.sub, sums, accumulate(sums, min)), default=0)
    return 2 * block + deepest + 2


def check_text(text: str, *, max_depth: int = MAX_DEPTH) -> None:
    """Refuse ``text`` when it may nest deeper than ``max_depth`` or uses an alias: before it is composed."""
    if depth_bound(text) > max_depth:
        raise YamlRefused(f"nested too deeply (rule files may nest at most {max_depth} levels)")
    if "*" not in text:  # no alias without one
        return
    for event in yaml.parse(text, Loader=SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark is not None else "?"
            raise YamlRefused(f"line {line}: YAML aliases (*name) are not allowed in rule files; write the value out")


def load(text: str) -> Any:
    """Parse ``text`` (one document) with the safe loader after :func:`check_text`, then :func:`check_values`.
    Raises :class:`YamlRefused`, or ``yaml.YAMLError`` for what is not YAML."""
    check_text(text)
    value = yaml.load(text, Loader=SafeLoader)
    check_values(value)
    return value


def check_values(value: Any, where: str = "") -> None:
    """Refuse a value the wire cannot carry, naming where it is (``facts.x``)."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, bool) or item is None or isinstance(item, str | dt.date):
            continue
        if isinstance(item, int):
            if not _INT_MIN <= item <= _INT_MAX:
                raise YamlRefused(f"{path or 'value'}: integer {_short(item)} does not fit in 64 bits")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise YamlRefused(f"{path or 'value'}: {item} is not a JSON number")
        elif isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str | int | float | bool) and key is not None:
                    raise YamlRefused(f"{path or 'value'}: a key of type {type(key).__name__} is not allowed")
                stack.append((f"{path}.{key}" if path else str(key), inner))
        elif isinstance(item, list):
            stack.extend((f"{path}[{n}]", inner) for n, inner in enumerate(item))
        else:
            kinds: dict[type, str] = {bytes: "binary data (!!binary)", set: "a set (!!set)"}
            kind = kinds.get(type(item), type(item).__name__)
            raise YamlRefused(f"{path or 'value'}: {kind} is not allowed in rule files")


def _short(number: int) -> str:
    text = str(number)
    return text if len(text) <= 24 else f"{text[:10]}…({len(text)} digits)"


class _NoAliasDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(data: Any) -> bytes:
    """YAML the daemon writes: block style, Unicode as is, never an alias (a value shared by two keys is written
    twice), so that what it writes it can read back."""
    text: str = yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True, width=100)
    return text.encode("utf-8")
