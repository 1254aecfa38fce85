"""Chunk Markdown by ``## `` headings (one chunk per heading block), with line windows for long blocks; chunk
rule YAML by rule.

A chunk is what a search hit points at (``path`` + line range) and what ``get`` reads back, so line numbers must
be the ones an editor shows: 1-based, inclusive, counted the way :func:`split_lines` counts (``\\r\\n``, ``\\r``
and ``\\n`` end a line, as in Python's universal newlines and VS Code; nothing else does, unlike
``str.splitlines`` which also breaks on ``\\f``, ``\\x1c``, ``\\u2028``… that editors show inside a line).

Only level-2 ATX headings split (the daily and MEMORY.md formats use ``## `` for entries and sections); ``#`` and
``###`` stay inside their block. Lines inside fenced code blocks are never headings: a pasted shell session or
Markdown sample must not cut a note in two. Chunks are trimmed of blank lines at both ends so a hit's range
points at content; blank-only chunks are dropped.

Rule files (:func:`chunk_rules`): a profile or candidate file is one chunk, an override file one chunk per item of
its ``rules:`` list, with the item's own lines (from the YAML parser's marks). A rule chunk carries its summary and
its identifiers (each fact key, bare and as ``facts.<key>``, the rule, model and instance ids) for the index. A
file that does not parse, or does not hold rules, is indexed as plain text in line windows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import compress, count, islice, pairwise, repeat
from typing import Any, Literal

import yaml

from memoryd import yamlsafe

# Bump when chunk boundaries change for the same text: stored line ranges would be stale (forces a rebuild).
CHUNKER_VERSION = 3
RuleKind = Literal["profile", "candidate", "override"]
MAX_FACT_KEYS = 1000  # per rule: YAML aliases can make a small file name exponentially many keys

# The lines that can matter: CommonMark level-2 ATX headings (up to three spaces, "##", then a space, a tab or the
# end of the line) and fences (up to three spaces, then at least three backticks or tildes, then an info string).
# Only a line starting with one of _LINE_STARTS can be one (the file's first line may start with a byte-order mark).
_LINE_MARKER = re.compile(r" {0,3}(?:##(?:[ \t]|$)|(`{3,}|~{3,})(.*))")
_LINE_STARTS = ("##", "`", "~", " ", "\ufeff")
# What str.strip() removes, plus the byte-order mark an editor hides: a line of only these is blank.
_BLANK = "".join(c for c in map(chr, range(0x3001)) if c.isspace()) + "\ufeff"
# Line breaks to YAML but not to split_lines: with one of these, the parser's line numbers are not an editor's.
_YAML_ONLY_BREAKS = re.compile("[\x85\u2028\u2029]")
# Every scalar a string: the index wants names, not typed values (a rule's `model_id: 200` is still found), and
# implicit typing (a regex per scalar, timestamps that fail to construct) was a quarter of the parse.
_Loader: Any = getattr(yaml, "CBaseLoader", yaml.BaseLoader)


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    heading: str  # the nearest "## ..." line, stripped; "" before the first heading; rules: see chunk_rules
    text: str  # the chunk's lines (without line terminators) joined by "\n"
    summary: str = ""  # a rule's summary, searched with the text (the YAML may fold or escape it)
    identifiers: tuple[str, ...] = ()  # searched as identifiers besides those in the text


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as an editor numbers them (line N is ``split_lines(text)[N - 1]``).

    A final line terminator does not start another line, so ``"a\\n"`` is one line, as ``wc -l`` and editors
    count it. ``get`` should use this too, or its line numbers drift from the chunks'.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _is_blank(line: str) -> bool:
    return not line.strip(_BLANK)


def heading_lines(lines: list[str]) -> list[int]:
    """Indexes of the lines that start a ``## `` block, skipping fenced code: the one reader of headings and
    fences, for the index (chunks) and ``validate`` (daily headings) alike."""
    found: list[int] = []
    fence_char, fence_len = "", 0
    # only lines starting with one of _LINE_STARTS can be a heading or a fence: picked out in C, not tested one by one
    for index in compress(count(), map(str.startswith, lines, repeat(_LINE_STARTS))):
        line = lines[index]
        if line[:2] == "##":  # the common case without a regex ("" is in every string: "##" alone is a heading)
            if not fence_len and line[2:3] in " \t":
                found.append(index)
            continue
        marker = _LINE_MARKER.match(line.removeprefix("\ufeff") if index == 0 else line)
        if marker is None:
            continue
        fence, info = marker[1], marker[2]
        if fence_len:
            if fence and fence[0] == fence_char and len(fence) >= fence_len and not info.strip():
                fence_len = 0
        elif fence:
            if not (fence[0] == "`" and "`" in info):  # a backtick fence's info string has no backtick
                fence_char, fence_len = fence[0], len(fence)
        else:
            found.append(index)
    return found


def fence_blocks(lines: list[str]) -> list[int]:
    """For each line, the number (1, 2, …) of the fenced code block it belongs to, its fences included, else 0.
    The fence rules of :func:`heading_lines`; an unclosed fence runs to the end."""
    blocks = [0] * len(lines)
    fence_char, fence_len, number = "", 0, 0
    for index, line in enumerate(lines):
        marker = (
            _LINE_MARKER.match(line.removeprefix("\ufeff") if index == 0 else line) if line[:1] in "`~ \ufeff" else None
        )
        fence, info = (marker[1], marker[2]) if marker is not None else (None, "")
        if fence_len:
            blocks[index] = number
            if fence and fence[0] == fence_char and len(fence) >= fence_len and not info.strip():
                fence_len = 0
        elif fence and not (fence[0] == "`" and "`" in info):
            number += 1
            fence_char, fence_len = fence[0], len(fence)
            blocks[index] = number
    return blocks


def _windows(lines: list[str], start: int, end: int, max_lines: int) -> list[tuple[int, int]]:
    """Split ``lines[start:end]`` into windows of at most ``max_lines`` lines, cutting after a blank line in
    the second half of a window when there is one (a paragraph or bullet group stays whole)."""
    windows: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        cut = min(pos + max_lines, end)
        if cut < end:
            for candidate in range(cut, pos + max_lines // 2, -1):
                if _is_blank(lines[candidate - 1]):
                    cut = candidate
                    break
        windows.append((pos, cut))
        pos = cut
    return windows


def _trimmed(lines: list[str], lo: int, hi: int) -> tuple[int, int]:
    """``lines[lo:hi]`` without its blank lines at both ends (lo == hi when all are blank)."""
    while lo < hi and not lines[lo].strip(_BLANK):
        lo += 1
    while hi > lo and not lines[hi - 1].strip(_BLANK):
        hi -= 1
    return lo, hi


def _spans(lines: list[str], blocks: list[tuple[int, str]], max_lines: int) -> list[tuple[int, int, str]]:
    """(first index, end index exclusive, heading) of the chunks of blocks given as (first index, heading), the
    last one only marking the end: each block cut into windows of at most ``max_lines`` lines, trimmed, blank
    windows dropped."""
    spans: list[tuple[int, int, str]] = []
    for (start, heading), (end, _next) in pairwise(blocks):
        if heading and end - start <= max_lines:  # the common case, inline: a block that starts with its heading
            while not lines[end - 1].strip(_BLANK):  # stops at the heading at the latest
                end -= 1
            spans.append((start, end, heading))
            continue
        for lo, hi in ((start, end),) if end - start <= max_lines else _windows(lines, start, end, max_lines):
            lo, hi = _trimmed(lines, lo, hi)
            if lo < hi:
                spans.append((lo, hi, heading))
    return spans


def chunk_spans(lines: list[str], *, max_lines: int = 40) -> list[tuple[int, int, str]]:
    """(first index, end index exclusive, heading) of each chunk of a Markdown file's :func:`split_lines`: what
    chunks cover (the texts are the lines in between). Each ``## `` line starts a block; the preamble
    before the first has heading ""."""
    if max_lines < 1:
        raise ValueError("max_lines must be at least 1")
    starts = heading_lines(lines)
    blocks = [] if starts and starts[0] == 0 else [(0, "")]
    blocks += [(start, lines[start].strip()) for start in starts]
    if starts and starts[0] == 0:
        blocks[0] = (0, lines[0].removeprefix("\ufeff").strip())
    blocks.append((len(lines), ""))
    return _spans(lines, blocks, max_lines)


# --- rules ------------------------------------------------------------------------------------------------------


class _NotRules(ValueError):
    """The YAML parsed but does not have the shape of a rule file."""


def chunk_rules(text: str, kind: RuleKind, name: str, *, max_lines: int = 40) -> list[Chunk]:
    """Chunks of a rule file of this kind; ``name`` (the file name without suffix) is an override file's
    instance when the file does not say. Never raises on content: what is not rules is plain text in windows.

    Headings: ``rule <rule_id> · <model_id> <fw_range>``, after ``candidate `` for a candidate and after
    ``override <instance_id> `` for an item of an override file.
    """
    if max_lines < 1:
        raise ValueError("max_lines must be at least 1")
    lines = split_lines(text)
    try:
        return _rule_chunks(text, lines, kind, name)
    except (yaml.YAMLError, ValueError, RecursionError):  # YAML's own errors, not rules, deep nesting
        spans = _spans(lines, [(0, ""), (len(lines), "")], max_lines)
        return [Chunk(lo + 1, hi, heading, "\n".join(lines[lo:hi])) for lo, hi, heading in spans]


def _rule_chunks(text: str, lines: list[str], kind: RuleKind, name: str) -> list[Chunk]:
    yamlsafe.check_text(text)  # aliases and deep nesting (a crash in libyaml's composer): plain text instead
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise _NotRules("not a mapping")
    if kind != "override":
        return [_rule_chunk(lines, 0, len(lines), data, "candidate " if kind == "candidate" else "", ())]
    instance = data.get("instance_id", name)
    items = data.get("rules")
    # the list as written under "rules:" (the last one, as in data; not one merged in), for its items' lines
    written = [value.value for key, value in node.value if key.value == "rules"]
    item_nodes = written[-1] if written else None
    if not isinstance(instance, str) or not isinstance(items, list) or not isinstance(item_nodes, list):
        raise _NotRules("not an override file")
    if _YAML_ONLY_BREAKS.search(text):
        raise _NotRules("line numbers would differ from an editor's")
    return [
        _rule_chunk(
            lines, item_node.start_mark.line, _last_line(item_node) + 1, item, f"override {instance} ", (instance,)
        )
        for item_node, item in zip(item_nodes, items, strict=True)
    ]


def _rule_chunk(lines: list[str], start: int, end: int, rule: Any, prefix: str, extra_ids: tuple[str, ...]) -> Chunk:
    if not isinstance(rule, dict):
        raise _NotRules("a rule is not a mapping")
    rule_id, model_id, fw_range = (_text(rule, key) for key in ("rule_id", "model_id", "fw_range"))
    summary, facts = rule.get("summary") or "", rule.get("facts") or {}
    if not isinstance(summary, str) or not isinstance(facts, dict):
        raise _NotRules("summary must be a string and facts a mapping")
    keys = _fact_keys(facts)
    identifiers = (*keys, *(f"facts.{key}" for key in keys), rule_id, model_id, *extra_ids)
    lo, hi = _trimmed(lines, start, end)
    if lo >= hi:
        raise _NotRules("a rule without lines")
    heading = f"{prefix}rule {rule_id} · {model_id} {fw_range}"
    return Chunk(lo + 1, hi, heading, "\n".join(lines[lo:hi]), summary, tuple(dict.fromkeys(identifiers)))


def _text(rule: dict[Any, Any], key: str) -> str:
    value = rule.get(key)
    if not isinstance(value, str) or not value:
        raise _NotRules(f"{key} must be a non-empty string")
    return value


def _fact_keys(facts: dict[Any, Any]) -> list[str]:
    """The dotted keys of ``facts``, nested mappings flattened as the rule set does (``transport: {baud: 1}`` is
    ``transport.baud``); at most :data:`MAX_FACT_KEYS` entries are looked at."""
    keys: list[str] = []
    stack: list[tuple[str, dict[Any, Any]]] = [("", facts)]
    budget = MAX_FACT_KEYS
    while stack and budget > 0:
        prefix, mapping = stack.pop()
        for key, value in islice(mapping.items(), budget):
            budget -= 1
            if isinstance(value, dict) and value:
                stack.append((f"{prefix}{key}.", value))
            else:
                keys.append(f"{prefix}{key}")
    return sorted(keys)


def _last_line(node: yaml.Node) -> int:
    """Index of the last line of a node's own text. A block collection's end mark lies past the blank lines and
    comments after it (those belong to what follows), so follow its last element down to a scalar or flow node."""
    while isinstance(node, yaml.MappingNode | yaml.SequenceNode) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    end = node.end_mark
    return int(end.line if end.column else end.line - 1)
