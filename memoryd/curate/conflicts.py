"""Preference conflicts: an update that changes a preference the user stated (docs/reference/curation.md,
"Conflicts").

A preference is a bullet ``key: value`` (also ``key = value``, ``key：value``, the key maybe in ``**bold**``) whose
key matches one of ``curate.conflict_keys`` (ignoring case, ``_`` and ``-`` as spaces, ``*`` a wildcard). When the
update gives such a key a value the current file does not hold, that is a conflict, settled by
``curate.conflict_resolution``:

- ``keep_old``: the update's bullet is dropped;
- ``keep_new``: the update's bullet replaces the old one where it stands (and leaves the update);
- ``merge``: both kept, each marked ``<!-- conflict: key -->``;
- ``ask_user``: the old one kept for now, the update's bullet dropped, and a question returned for
  ``questions.ask`` to record; ``context.dynamic`` shows it until ``memoryctl answer`` settles it.

Pure functions over the two texts; lines are split at "\\n" only and every line not edited is kept byte for byte.
Feed them the sanitized update (``sanitize`` first), so no value here is a secret.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from memoryd.curate import patterns
from memoryd.settings import CurateSettings
from memoryd.settings_curation import Resolution

KEY_MAX = 60  # characters of a key
LINE_MAX = 2000  # longer lines are not read as preferences
_PREF = re.compile(r" {0,3}[-*+][ \t]+(?:\*\*|__)?(?P<key>[^:=：*`\n]{1,60}?)(?:\*\*|__)?[ \t]*[:=：](?P<value>.*)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
MARK = "<!-- conflict: {key} -->"


@dataclass(frozen=True, slots=True)
class Preference:
    key: str  # as written
    norm: str  # as compared
    value: str  # as written, trailing HTML comments left out
    line: int  # 1-based


@dataclass(frozen=True, slots=True)
class Conflict:
    key: str  # as the update writes it
    old: str  # the value the current file holds
    new: str  # the value the update gives
    resolution: Resolution
    old_line: int  # 1-based, in the current file
    new_line: int  # 1-based, in the update


@dataclass(frozen=True, slots=True)
class Resolved:
    current: str  # the current file with keep_new / merge edits (unchanged otherwise)
    update: str  # the update without the bullets keep_old / keep_new / ask_user took out
    asked: list[Conflict] = field(default_factory=list)  # ask_user conflicts: record them (questions.ask)


def norm_key(key: str, *, pattern: bool = False) -> str:
    """A key as compared: case folded, ``_`` and ``-`` as spaces, spacing collapsed, emphasis off (a pattern keeps
    its ``*`` wildcards)."""
    key = key.replace("_", " ").replace("-", " ").strip(" `" if pattern else " *`")
    return " ".join(key.casefold().split())


def norm_value(value: str) -> str:
    return " ".join(patterns.content(value).strip("*_` ").casefold().split()).rstrip(".。")


def preferences(markdown: str, keys: tuple[str, ...]) -> list[Preference]:
    """The preference bullets of ``markdown`` (outside code blocks) whose key matches ``keys``."""
    wanted = [norm_key(k, pattern=True) for k in keys]
    found: list[Preference] = []
    fence: str | None = None
    for number, line in enumerate(markdown.split("\n"), 1):
        opened = _FENCE.match(line)
        if opened:
            mark = opened.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
            continue
        if fence is not None or len(line) > LINE_MAX:
            continue
        pref = _PREF.match(line)
        if pref is None:
            continue
        key = pref.group("key").strip()
        norm = norm_key(key)
        value = patterns.content(pref.group("value")).strip()
        if norm and value and any(_matches(norm, w) for w in wanted):
            found.append(Preference(key=key, norm=norm, value=value, line=number))
    return found


def _matches(key: str, pattern: str) -> bool:
    if "*" in pattern or "?" in pattern:
        return fnmatch.fnmatchcase(key, pattern)
    return key == pattern


def find_conflicts(current_md: str, update_md: str, policy: CurateSettings) -> list[Conflict]:
    """Every preference the update gives a value the current file does not hold for the same key (one conflict
    per key and new value, against the key's first bullet in the current file)."""
    current: dict[str, list[Preference]] = {}
    for pref in preferences(current_md, policy.conflict_keys):
        current.setdefault(pref.norm, []).append(pref)
    out: list[Conflict] = []
    seen: set[tuple[str, str]] = set()
    for new in preferences(update_md, policy.conflict_keys):
        olds = current.get(new.norm)
        value = norm_value(new.value)
        if not olds or value in {norm_value(o.value) for o in olds} or (new.norm, value) in seen:
            continue
        seen.add((new.norm, value))
        old = olds[0]
        out.append(Conflict(new.key, old.value, new.value, policy.conflict_resolution, old.line, new.line))
    return out


def resolve(current_md: str, update_md: str, conflicts: list[Conflict]) -> Resolved:
    """Apply each conflict's resolution (module docstring) to the two texts ``find_conflicts`` read."""
    current = current_md.split("\n")
    update = update_md.split("\n")
    drop: set[int] = set()  # update lines (0-based) to take out
    asked: list[Conflict] = []
    for c in conflicts:
        new_at, old_at = c.new_line - 1, c.old_line - 1
        if not (0 <= new_at < len(update) and 0 <= old_at < len(current)):
            raise ValueError("a conflict's line is not in the texts it was found in")
        if c.resolution == "keep_new":
            current[old_at] = _replace_line(current[old_at], update[new_at])
            drop |= _bullet_lines(update, new_at)
        elif c.resolution == "merge":
            current[old_at] = marked(current[old_at], c.key)
            update[new_at] = marked(update[new_at], c.key)
        else:  # keep_old, ask_user: the old one stays, the new one leaves the update
            drop |= _bullet_lines(update, new_at)
            if c.resolution == "ask_user":
                asked.append(c)
    kept = [line for i, line in enumerate(update) if i not in drop]
    return Resolved(current="\n".join(current), update="\n".join(kept), asked=asked)


def _bullet_lines(lines: list[str], at: int) -> set[int]:
    """The bullet at ``at`` with its indented continuation lines."""
    end = at + 1
    while end < len(lines) and lines[end][:1] in (" ", "\t") and lines[end].strip() and not _PREF.match(lines[end]):
        end += 1
    return set(range(at, end))


def _replace_line(old: str, new: str) -> str:
    """``new``'s text on ``old``'s line: the old line's indentation and line ending kept."""
    indent = old[: len(old) - len(old.lstrip(" \t"))]
    ending = "\r" if old.endswith("\r") else ""
    return indent + new.strip(" \t\r") + ending


def marked(line: str, key: str) -> str:
    """``line`` with ``<!-- conflict: key -->`` at its end (once), its line ending kept."""
    mark = MARK.format(key=key.replace("--", "- -"))
    if line.rstrip("\r").endswith(mark):
        return line
    ending = "\r" if line.endswith("\r") else ""
    return f"{line.rstrip(chr(13)).rstrip()} {mark}{ending}"
