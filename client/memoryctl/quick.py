"""Read a plain command line without argparse: importing argparse (and the re, enum and gettext it pulls in) and
building the verb's parser cost `memoryctl search` ~10 ms of a ~25 ms process.

A verb opts in with a ``Spec`` (its group's ``QUICK`` table). The quick reader accepts only the plainest forms:
each option spelled out exactly, its value in the next word; the global options anywhere, the verb's own after the
verb. Anything else — ``--help``, an abbreviation, ``--opt=value``, ``-n5``, a value that starts with ``-``, a value
its type refuses, a missing or extra word — returns None and argparse reads the line, so every message and exit
code stays argparse's. For what it accepts it builds the same ``Args`` argparse would (tests/test_client.py
compares them on many command lines).
"""

from __future__ import annotations

from memoryctl.common import FLAG_OPTIONS, VALUE_OPTIONS, Args
from memoryctl.rpc import parse_timeout

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any


class Spec:
    """One verb's arguments: positional dests in order; flags (option → dest, store_true); options with a value
    (option → (dest, convert), convert raising ValueError for a value argparse would refuse); and the defaults of
    the verb's arguments, exactly as its argparse parser sets them."""

    __slots__ = ("defaults", "flags", "positionals", "values")

    def __init__(
        self,
        positionals: tuple[str, ...],
        flags: dict[str, str],
        values: dict[str, tuple[str, Callable[[str], Any]]],
        defaults: dict[str, Any],
    ) -> None:
        self.positionals = positionals
        self.flags = flags
        self.values = values
        self.defaults = defaults


def choice(*allowed: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in allowed:
            raise ValueError(text)
        return text

    return convert


def iso_day(text: str) -> str:
    """A day as YYYY-MM-DD (argparse names this function in its message: "invalid iso_day value")."""
    from datetime import date  # only when a day is given: a C module, no start-up cost otherwise

    if len(text) != 10:
        raise ValueError(text)
    return date.fromisoformat(text).isoformat()


GLOBAL_DEFAULTS: dict[str, Any] = {
    "json": False,
    "socket": None,
    "timeout": None,
    "autostart": False,
    "workspace": None,
}
GLOBAL_CONVERT: dict[str, Callable[[str], Any]] = {"timeout": parse_timeout}


def parse(argv: Sequence[str], verb: str, spec: Spec) -> Args | None:
    """``argv`` read as argparse would read it, or None when argparse must read it."""
    values: dict[str, Any] = {**GLOBAL_DEFAULTS, **spec.defaults}
    positionals = list(spec.positionals)
    seen_verb = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in FLAG_OPTIONS:
            values[FLAG_OPTIONS[arg]] = True
        elif seen_verb and arg in spec.flags:
            values[spec.flags[arg]] = True
        elif arg in VALUE_OPTIONS or (seen_verb and arg in spec.values):
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None
            if arg in VALUE_OPTIONS:
                dest = VALUE_OPTIONS[arg]
                convert = GLOBAL_CONVERT.get(dest, str)
            else:
                dest, convert = spec.values[arg]
            try:
                values[dest] = convert(argv[i + 1])
            except ValueError:
                return None
            i += 1
        elif arg.startswith("-"):
            return None
        elif not seen_verb:
            if arg != verb:
                return None
            seen_verb = True
        elif positionals:
            values[positionals.pop(0)] = arg
        else:
            return None
        i += 1
    if not seen_verb or positionals:
        return None
    return Args(verb=verb, **values)
