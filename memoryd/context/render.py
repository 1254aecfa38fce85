"""Render the stable part of ``context`` deterministically, within a budget in characters. Pure functions, no I/O.

The text is a function of the resolved facts and MEMORY.md alone: sorted where we choose the order (fact keys),
the user's order where they chose it (MEMORY.md's sections), no timestamps, counters or query. When it does not fit,
it is cut at block boundaries — a fact line, a MEMORY.md section, or within the first section that does not fit, at
a line — keeping the first blocks, and the last line names what was left out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from memoryd.context.api import StableContext, StableSource
from memoryd.notes.daily import strip_private
from memoryd.text.chunker import heading_lines, split_lines

MEMORY_FILE = "memory/MEMORY.md"
NOTE_MAX = 400  # the last line naming what was cut is at most this long; reserved when cutting
VALUE_MAX = 400  # one fact's value is shown up to this many characters
MIN_PARTIAL = 2  # a section cut inside keeps at least its heading and one line, or is left out whole


@dataclass(frozen=True, slots=True)
class ResolvedRules:
    model_id: str
    fw_version: str
    instance_id: str | None
    facts: dict[str, Any]
    winners: dict[str, str]  # fact key → the rule that set it
    rules: list[str]


@dataclass(frozen=True, slots=True)
class _Block:
    source: str  # "rules" or the memory file
    label: str  # a fact key, or a section's heading ("" for the text above the first heading)
    lines: list[str]
    first_line: int  # memory: the block's first line in the file (1-based); rules: 0


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def normalise_memory(data: bytes) -> str:
    """MEMORY.md's bytes as the text the stable part shows: UTF-8 (undecodable bytes replaced), no byte-order mark,
    ``<private>`` spans stripped (a hand edit may hold some; they never reach a prompt)."""
    return strip_private(data.decode("utf-8", "replace").removeprefix("\ufeff"))


def _value(value: Any) -> str:
    text = value if isinstance(value, str) and "\n" not in value else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= VALUE_MAX else text[: VALUE_MAX - 1] + "…"


def _rules_blocks(rules: ResolvedRules) -> list[_Block]:
    where = f"model_id={rules.model_id} fw_version={rules.fw_version}"
    if rules.instance_id is not None:
        where += f" instance_id={rules.instance_id}"
    head = [f"## Rules in force ({where})", ""]
    if not rules.facts:
        return [_Block("rules", "", [*head, "(no rule matches)", ""], 0)]
    blocks = [_Block("rules", "", head, 0)]
    keys = sorted(rules.facts)
    for n, key in enumerate(keys):
        line = f"- {key}: {_value(rules.facts[key])}  ({rules.winners.get(key, '?')})"
        blocks.append(_Block("rules", key, [line, ""] if n == len(keys) - 1 else [line], 0))
    return blocks


def _memory_blocks(text: str) -> list[_Block]:
    lines = split_lines(text)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return []
    starts = heading_lines(lines)
    bounds = ([0] if not starts or starts[0] != 0 else []) + starts + [len(lines)]
    blocks = [_Block(MEMORY_FILE, "", [f"## Long-term memory ({MEMORY_FILE})", ""], 0)]
    for lo, hi in pairwise(bounds):
        section = lines[lo:hi]
        if not any(line.strip() for line in section):
            continue
        label = section[0][2:].strip() if lo in starts else ""
        blocks.append(_Block(MEMORY_FILE, label, [line.rstrip() for line in section], lo + 1))
    return blocks


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def render(rules: ResolvedRules | None, memory: str | None, memory_sha256: str | None, budget: int) -> StableContext:
    """The stable text of ``rules`` (None: not asked for) and the MEMORY.md text ``memory`` (None: no such file),
    at most ``budget`` characters."""
    blocks = (_rules_blocks(rules) if rules is not None else []) + (_memory_blocks(memory) if memory else [])
    kept: list[str] = []
    cut: list[_Block] = []
    partly: _Block | None = None
    if _size([line for b in blocks for line in b.lines]) <= budget:
        kept = [line for b in blocks for line in b.lines]
    else:
        room = budget - NOTE_MAX - 2  # the blank line before the note
        for n, block in enumerate(blocks):
            size = _size(block.lines)
            if size <= room:
                kept.extend(block.lines)
                room -= size
                continue
            fitting = _fitting(block.lines, room)
            if block.source == MEMORY_FILE and block.label and fitting >= MIN_PARTIAL:
                kept.extend(block.lines[:fitting])
                partly = _Block(block.source, block.label, block.lines[fitting:], block.first_line + fitting)
            else:
                cut.append(block)
            cut.extend(blocks[n + 1 :])
            break
    text = "\n".join(kept).rstrip("\n")
    truncated = bool(cut) or partly is not None
    if truncated:
        text = (text + "\n\n" if text else "") + _note(cut, partly, budget)
    sources = []
    if rules is not None:
        facts = json.dumps(rules.facts, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        sources.append(
            StableSource(
                kind="rules",
                rules=list(rules.rules),
                sha256=sha256_text(facts),
                cut=any(b.source == "rules" for b in cut),
            )
        )
    if memory is not None and memory_sha256 is not None:
        memory_cut = partly is not None or any(b.source == MEMORY_FILE for b in cut)
        sources.append(StableSource(kind="memory", path=MEMORY_FILE, sha256=memory_sha256, cut=memory_cut))
    return StableContext(text=text, sha256=sha256_text(text), sources=sources, truncated=truncated)


def _fitting(lines: list[str], room: int) -> int:
    """How many of ``lines`` fit in ``room`` characters."""
    used = 0
    for n, line in enumerate(lines):
        used += len(line) + 1
        if used > room:
            return n
    return len(lines)


def _note(cut: list[_Block], partly: _Block | None, budget: int) -> str:
    """The last line: what was left out, by source, with where to read it; at most NOTE_MAX characters."""
    parts = []
    facts = [b.label for b in cut if b.source == "rules" and b.label]
    if any(b.source == "rules" for b in cut):
        parts.append(f"rules: {len(facts)} fact(s) from {facts[0]!r} on (memoryctl resolve)" if facts else "rules")
    sections = ([partly] if partly is not None else []) + [b for b in cut if b.source == MEMORY_FILE]
    if sections:
        first = next((b.first_line for b in sections if b.first_line), 1)
        names = [
            f'"{b.label[:60]}"' + (" (partly)" if b is partly else "") if b.label else "(top)"
            for b in sections
            if b.label or b.first_line
        ]
        head = f"{MEMORY_FILE} from line {first}, sections "
        tail = f" (memoryctl get {MEMORY_FILE} --from {first})"
        shown: list[str] = []
        for name in names:
            rest = len(names) - len(shown) - 1
            if len(head) + len(", ".join([*shown, name])) + len(tail) + 40 + (12 if rest else 0) > NOTE_MAX - 80:
                break
            shown.append(name)
        more = len(names) - len(shown)
        listed = ", ".join(shown) + (f" and {more} more" if more else "")
        parts.append(head + listed + tail)
    note = f"[memoryd: cut to {budget} characters; left out: " + "; ".join(parts) + "]"
    return note if len(note) <= NOTE_MAX else note[: NOTE_MAX - 2] + "…]"
