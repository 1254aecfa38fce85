"""Text made safe to show: a small Markdown renderer that escapes everything (memory files are untrusted: a cloned
repository wrote them), snippets with their matched words marked, unified diffs, and charts as inline SVG built
here (no script, no chart library).

The renderer is line by line on purpose: every source line becomes one element with the id ``L<n>``, so search can
link to the lines of a hit, a range can be highlighted, and an entry remember wrote gets its id and forgotten mark
beside its heading. It knows headings, bullets, fenced code, ``**bold**`` and `` `code` ``; a link shows as its
text and target, never as a link. No raw HTML passes: ``<script>`` in a note is shown as text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$")


def inline(text: str, marks: tuple[str, ...] = ()) -> Markup:
    """One line's inline Markdown, escaped first; ``marks``: words to wrap in <mark> (matched words)."""
    text = text.replace("\x01", "").replace("\x02", "")
    words = sorted({w for w in marks if w.strip()}, key=len, reverse=True)
    if words:
        pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)
        text = pattern.sub(lambda m: f"\x01{m.group(0)}\x02", text)
    out = str(escape(text))
    out = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", out)
    out = _BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", out)
    return Markup(out.replace("\x01", "<mark>").replace("\x02", "</mark>"))


def snippet(text: str) -> Markup:
    """A search snippet: its ``**word**`` markers become <mark>, everything else escaped."""
    parts = re.split(r"\*\*(.+?)\*\*", text)
    return Markup("".join(f"<mark>{escape(p)}</mark>" if n % 2 else str(escape(p)) for n, p in enumerate(parts)))


def marked_words(text: str) -> list[str]:
    """The words a snippet marks (``**…**``), first seen first, at most 12."""
    seen: list[str] = []
    for word in re.findall(r"\*\*(.+?)\*\*", text):
        if word not in seen:
            seen.append(word)
    return seen[:12]


@dataclass
class Entry:
    """What the browser knows of an entry remember wrote: its id and, if forgotten, the forget's run."""

    id: str
    forgotten_by: str | None = None


@dataclass
class Line:
    number: int
    kind: str  # heading, bullet, code, fence, text, blank
    html: Markup
    level: int = 0
    entry: Entry | None = None
    classes: list[str] = field(default_factory=list)


def document(
    text: str,
    first_line: int,
    entries: dict[tuple[str, str], Entry],
    highlight: tuple[int, int] | None = None,
    marks: tuple[str, ...] = (),
    code: bool = False,
) -> list[Line]:
    """The lines of a window of a Markdown file (numbered from ``first_line``). ``entries``: (heading without its
    hashes, first non-blank line below it) → the entry, as items name sections; ``highlight``: lines to mark;
    ``code``: every line as code (a rule's YAML)."""
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    out: list[Line] = []
    fenced = False
    forgotten_until = -1
    for n, source in enumerate(raw):
        number = first_line + n
        line = _line(source, number, fenced or code, marks if _within(number, highlight) else ())
        if line.kind == "fence":
            fenced = not fenced
        if line.kind == "heading" and line.level == 2:
            key = (source.lstrip("#").strip(), _first_below(raw, n))
            entry = entries.get(key) or entries.get((key[0], ""))
            line.entry = entry
            forgotten_until = _section_end(raw, n) if entry and entry.forgotten_by else -1
        if n <= forgotten_until:
            line.classes.append("forgotten")
        if _within(number, highlight):
            line.classes.append("hit")
        out.append(line)
    return out


def _within(number: int, span: tuple[int, int] | None) -> bool:
    return span is not None and span[0] <= number <= span[1]


def _first_below(raw: list[str], at: int) -> str:
    for source in raw[at + 1 :]:
        if source.startswith("## "):
            return ""
        if source.strip():
            return source.strip()
    return ""


def _section_end(raw: list[str], at: int) -> int:
    for n in range(at + 1, len(raw)):
        if _HEADING.match(raw[n]) and len(_HEADING.match(raw[n]).group(1)) <= 2:  # type: ignore[union-attr]
            return n - 1
    return len(raw) - 1


def _line(source: str, number: int, fenced: bool, marks: tuple[str, ...]) -> Line:
    if source.lstrip().startswith(("```", "~~~")):
        return Line(number, "fence", Markup(escape(source)))
    if fenced:
        return Line(number, "code", Markup(escape(source)))
    if not source.strip():
        return Line(number, "blank", Markup(""))
    heading = _HEADING.match(source)
    if heading:
        return Line(number, "heading", inline(heading.group(2), marks), level=len(heading.group(1)))
    bullet = _BULLET.match(source)
    if bullet:
        depth = len(bullet.group(1).expandtabs(4)) // 2
        return Line(number, "bullet", inline(bullet.group(3), marks), level=depth)
    return Line(number, "text", inline(source, marks))


@dataclass
class DiffLine:
    kind: str  # add, del, hunk, meta, same
    text: str


def diff_lines(diff: str) -> list[DiffLine]:
    out: list[DiffLine] = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            out.append(DiffLine("meta", line))
        elif line.startswith("@@"):
            out.append(DiffLine("hunk", line))
        elif line.startswith("+"):
            out.append(DiffLine("add", line))
        elif line.startswith("-"):
            out.append(DiffLine("del", line))
        else:
            out.append(DiffLine("same", line))
    return out


# --- charts --------------------------------------------------------------------------------------------------------

PALETTE = ["#2f6db5", "#d9822b", "#3a9d5d", "#b54b4b", "#7d5bb5", "#6b7785", "#c4a000", "#1d9aa5"]


def bars(
    title: str, labels: list[str], series: Mapping[str, Sequence[float]], *, width: int = 640, height: int = 200
) -> Markup:
    """A stacked bar chart as inline SVG: one bar per label, one colour per series, a legend and a <title> per bar
    (the browser's tooltip)."""
    top = max((sum(v[i] for v in series.values()) for i in range(len(labels))), default=0) or 1
    left, bottom, legend_h = 40, 28, 18 * ((len(series) + 3) // 4)
    plot_h = height - bottom - legend_h - 8
    step = (width - left - 8) / max(len(labels), 1)
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<line x1="{left}" y1="{plot_h + 4}" x2="{width - 4}" y2="{plot_h + 4}" stroke="#999"/>',
        f'<text x="{left - 4}" y="12" text-anchor="end" font-size="10" fill="#555">{_num(top)}</text>',
        f'<text x="{left - 4}" y="{plot_h + 4}" text-anchor="end" font-size="10" fill="#555">0</text>',
    ]
    for i, label in enumerate(labels):
        x = left + i * step + step * 0.1
        y = float(plot_h + 4)
        for k, (name, values) in enumerate(series.items()):
            value = values[i]
            if value <= 0:
                continue
            h = value / top * plot_h
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[k % len(PALETTE)]}"><title>{escape(label)} · {escape(name)}: {_num(value)}</title></rect>'
            )
        if len(labels) <= 16 or i % max(len(labels) // 8, 1) == 0:
            parts.append(
                f'<text x="{x + step * 0.4:.1f}" y="{plot_h + 18}" text-anchor="middle" font-size="10" '
                f'fill="#555">{escape(label[-5:])}</text>'
            )
    for k, name in enumerate(series):
        lx, ly = left + (k % 4) * ((width - left) / 4), height - legend_h + 14 + (k // 4) * 18
        parts.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{PALETTE[k % len(PALETTE)]}"/>')
        parts.append(f'<text x="{lx + 14:.1f}" y="{ly}" font-size="11" fill="#333">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def meter(label: str, value: float, total: float, *, width: int = 320) -> Markup:
    """One horizontal bar: ``value`` of ``total`` (an embedding backlog, a share)."""
    share = 0.0 if total <= 0 else min(max(value / total, 0.0), 1.0)
    return Markup(
        f'<svg class="meter" role="img" viewBox="0 0 {width} 22" width="{width}" height="22" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(label)}: {_num(value)} of {_num(total)}</title>'
        f'<rect x="0" y="4" width="{width}" height="14" fill="#e6e9ee"/>'
        f'<rect x="0" y="4" width="{width * share:.1f}" height="14" fill="#2f6db5"/></svg>'
    )


def _num(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"
